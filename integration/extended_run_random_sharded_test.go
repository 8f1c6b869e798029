package integration

import (
	"context"
	"testing"
	"time"
)

// TestExtendedRunRandomSharded is TestExtendedRunRandom on a database
// sharded over two shards, compared with one PostgreSQL database holding
// the same rows: besides statements without a table (which a sharded
// database runs on one shard), statements routed by their parameter
// (accounts' sharding key) and fanned out to both shards, some with rows
// to fetch in pieces across shards, and writes; in transaction mode (one
// server a shard, which another client uses between the steps) and
// session mode.
func TestExtendedRunRandomSharded(t *testing.T) {
	checkGoroutines(t)
	seed, stepsPerSeed := extRunSeed(t)
	texts := append(append([]string(nil), extRunTexts...),
		"SELECT email FROM accounts WHERE id = $1::bigint",
		"SELECT id FROM accounts ORDER BY id",
		"SELECT count(*) FROM accounts",
		"UPDATE accounts SET email = email || 'x' WHERE id = $1::bigint RETURNING email",
		"UPDATE accounts SET email = email || 'y' WHERE id < 5",
		"INSERT INTO accounts (id, email) VALUES ($1::bigint, 'n') ON CONFLICT (id) DO UPDATE SET email = accounts.email || 'c' RETURNING email",
		"DELETE FROM accounts WHERE id = $1::bigint RETURNING id",
		"SELECT 10 / (id - 5) FROM accounts WHERE id = $1::bigint",
	)
	steps := extRunStepsOf(extRunRand(seed), stepsPerSeed, texts)
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, p, plain := twoShardsBesidePlainIn(t, ctx, mode, map[string]int{"transaction": 1, "session": 4}[mode])
			rows := "INSERT INTO accounts (id, email) SELECT g, 'e' || g FROM generate_series(1, 20) g"
			execIn(t, simpleConn(t, plain), simple, rows)
			execIn(t, simpleConn(t, p.AppURL("app")), simple, rows)
			extRunCompare(t, plain, p, mode, seed, steps,
				"SELECT count(*), coalesce(sum(id * length(email)), 0) FROM accounts")
		})
	}
}
