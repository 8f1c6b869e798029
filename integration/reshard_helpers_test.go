package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// shardYAML is the flow-style YAML of shard database db on cluster c.
func shardYAML(c *pgtest.Cluster, db string) string {
	return fmt.Sprintf("{ host: %s, port: %d, database: %s }", c.Host, c.Port, db)
}

// accountsRule is the sharding rule of the resharding tests' accounts
// table, as the lines under a database entry.
const accountsRule = "\n    sharded_tables: [{ table: accounts, column: id, type: bigint }]"

// reshardYAML is a proxy configuration with the admin database, the app
// user (server credentials of c) and two databases with the same rules:
// app on the src shards and app_new on the dst shards. head holds the
// top-level lines before users: (listen, admin, …).
func reshardYAML(head string, c *pgtest.Cluster, rules string, src, dst []string) string {
	return fmt.Sprintf(`%s
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards: [%s]%s
  - name: app_new
    shards: [%s]%s
`, strings.TrimRight(head, "\n"), appPassword, c.User, c.Password, strings.Join(src, ", "), rules, strings.Join(dst, ", "), rules)
}

// processHead is the top of the configuration of a proxy process on addr
// that keeps its two-phase commit log in dir.
func processHead(addr, dir string) string {
	return fmt.Sprintf("listen: %s\nadmin: { user: admin, password: admin-secret }\ntwo_phase_commit_log: %s/2pc.log", addr, dir)
}

// waitOnlyTaskDone polls SHOW TASKS until its first task is done, failing
// at once if it failed.
func waitOnlyTaskDone(t *testing.T, adm *pgx.Conn, timeout time.Duration, what string) {
	t.Helper()
	eventually(t, timeout, what, func() bool {
		tb, err := adminPgx(adm, "SHOW TASKS")
		if err != nil || len(tb.rows) == 0 {
			return false
		}
		state := tb.rows[0][tb.col(t, "state")]
		if state == "failed" {
			t.Fatalf("task failed: %v", tb.rows[0])
		}
		return state == "done"
	})
}

// waitTaskStreams polls SHOW TASKS until a running task is in its stream
// phase (a runner that has just resumed a task may still be copying).
func waitTaskStreams(t *testing.T, adm *pgx.Conn, timeout time.Duration, what string) {
	t.Helper()
	eventually(t, timeout, what, func() bool {
		tb, err := adminPgx(adm, "SHOW TASKS")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tb.rows {
			if r[tb.col(t, "state")] == "running" && r[tb.col(t, "phase")] == "stream" {
				return true
			}
		}
		return false
	})
}

// createShardDBs creates databases name_0 … name_<n-1> on c and returns
// them as the YAML list items of a database's shards.
func createShardDBs(t *testing.T, ctx context.Context, c *pgtest.Cluster, name string, n int) string {
	t.Helper()
	var s []string
	for i := range n {
		db := fmt.Sprintf("%s_%d", name, i)
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		s = append(s, fmt.Sprintf("{ host: %s, port: %d, database: %s }", c.Host, c.Port, db))
	}
	return strings.Join(s, ", ")
}
