package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
)

const benchSchema = `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, filler text);
CREATE SEQUENCE bench_ins START 1000000000;`

// BenchmarkStreamApply measures the stream of one source shard into two
// destination shards catching up on a backlog of bench/reshard.sh's write
// load: source transactions of one UPDATE of a random row and one INSERT.
// Each iteration writes the backlog with the stream stopped, then times
// Stream from its start until every destination applied it. It reports
// changes/s and the CPU that the destination backends and the walsender
// spent per 100 000 changes (the proxy's own is in -cpuprofile).
func BenchmarkStreamApply(b *testing.B) {
	const rows, txns = 20000, 20000
	f := newStreamFixture(b, 2, benchSchema,
		fmt.Sprintf("INSERT INTO accounts SELECT g, g %% 1000, repeat('x', 160) FROM generate_series(1::bigint, %d) g", rows),
		func(db *config.Database) {
			db.ShardedTables = []config.ShardedTable{{Table: "accounts", Column: "id", Type: "bigint"}}
		})
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed time.Duration
	var backendTicks, senderTicks int64
	for range b.N {
		b.StopTimer()
		var sql strings.Builder
		for i := range txns {
			fmt.Fprintf(&sql, "BEGIN; UPDATE accounts SET balance = balance + 1 WHERE id = %d; INSERT INTO accounts VALUES (nextval('bench_ins'), 0, repeat('y', 160)); COMMIT;\n",
				1+rng.IntN(rows))
			if i%500 == 499 {
				f.exec(b, f.srcConn, sql.String())
				sql.Reset()
			}
		}
		b.StartTimer()
		start := time.Now()
		f.streamWhile(b, func(ctx context.Context) {
			elapsed += time.Since(start)
			be, ws := f.serverTicks(b, ctx)
			backendTicks += be
			senderTicks += ws
		})
	}
	b.StopTimer()
	f.compare(b, "accounts", "id", "balance::text || filler")
	changes := float64(2 * txns * b.N)
	b.ReportMetric(changes/elapsed.Seconds(), "changes/s")
	// Clock ticks are 1/100 s: ticks per 100 000 changes are ms per 1000.
	b.ReportMetric(float64(backendTicks)*1e5/changes/100, "backend-s/100k")
	b.ReportMetric(float64(senderTicks)*1e5/changes/100, "walsender-s/100k")
}

// serverTicks returns the CPU clock ticks (user + system) the stream's
// destination backends and its walsender have used so far.
func (f *streamFixture) serverTicks(tb testing.TB, ctx context.Context) (backends, walsender int64) {
	tb.Helper()
	rows, err := f.srcConn.Query(ctx, `SELECT pid, backend_type = 'walsender' FROM pg_stat_activity
		WHERE application_name = $1 AND (backend_type = 'walsender' OR datname LIKE 'dst\_%')`, taskAppName)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var sender bool
		if err := rows.Scan(&pid, &sender); err != nil {
			tb.Fatal(err)
		}
		ticks := procTicks(pid)
		if sender {
			walsender += ticks
		} else {
			backends += ticks
		}
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return backends, walsender
}

// procTicks returns utime + stime of process pid from /proc, 0 when it is
// not readable.
func procTicks(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after it are
	// counted from its closing parenthesis.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + st
}
