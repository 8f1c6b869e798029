package integration

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestShardCursorRandomMoves drives a cursor over both shards and the same
// cursor on one plain PostgreSQL with the same seeded sequence of FETCH
// and MOVE statements (every direction, counts around the merge's batch
// sizes, statements between them that settle the merge), in SCROLL, NO
// SCROLL and undeclared-scroll cursors over 2 MB of rows, and requires the
// same command tags, rows and errors. SHARDGATE_CURSOR_SEED replays a
// seed; SHARDGATE_CURSOR_STEPS sets the statements per seed.
func TestShardCursorRandomMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, p, plainURL := twoShardsBesidePlain(t, ctx)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SHARDGATE_CURSOR_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SHARDGATE_CURSOR_SEED: %v", err)
		}
		seed = v
	}
	steps := 300
	if s := os.Getenv("SHARDGATE_CURSOR_STEPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("SHARDGATE_CURSOR_STEPS: %v", err)
		}
		steps = v
	}
	t.Logf("seed %d (SHARDGATE_CURSOR_SEED=%d replays it)", seed, seed)
	const rows = 20000
	load := fmt.Sprintf("INSERT INTO accounts SELECT g, repeat('e', 80) || g FROM generate_series(1, %d) g", rows)
	conns := make([]*pgconn.PgConn, 2)
	for k, url := range []string{plainURL, p.AppURL("app")} {
		c, err := pgconn.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, load).ReadAll(); err != nil {
			t.Fatal(err)
		}
		conns[k] = c
	}
	// run runs sql on both and returns what each answered.
	run := func(sql string) [2]string {
		var out [2]string
		for k, c := range conns {
			res, err := c.Exec(ctx, sql).ReadAll()
			h := sha256.New()
			n := 0
			var tag string
			for _, r := range res {
				for _, row := range r.Rows {
					for _, v := range row {
						fmt.Fprintf(h, "%d:%s|", len(v), v)
					}
					n++
				}
				tag = r.CommandTag.String()
			}
			if pe, ok := err.(*pgconn.PgError); ok {
				out[k] = fmt.Sprintf("error %s %s", pe.Code, pe.Message)
			} else if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, sql, err)
			} else {
				out[k] = fmt.Sprintf("%s, %d rows %x", tag, n, h.Sum(nil)[:8])
			}
		}
		return out
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	count := func() string {
		switch rng.IntN(6) {
		case 0:
			return "ALL"
		case 1:
			return strconv.Itoa(rng.IntN(3)) // 0, 1, 2
		case 2:
			return strconv.Itoa(-rng.IntN(50))
		case 3:
			return strconv.Itoa(rows - 5 + rng.IntN(10)) // around the end
		}
		return strconv.Itoa(rng.IntN(3000))
	}
	move := func() string {
		verb := "FETCH"
		if rng.IntN(4) == 0 {
			verb = "MOVE"
		}
		var dir string
		switch rng.IntN(11) {
		case 0:
			dir = "NEXT"
		case 1:
			dir = "PRIOR"
		case 2:
			dir = "FIRST"
		case 3:
			dir = "LAST"
		case 4:
			dir = "ABSOLUTE " + strconv.Itoa(rng.IntN(2*rows+2)-rows-1)
		case 5:
			dir = "RELATIVE " + strconv.Itoa(rng.IntN(4001)-2000)
		case 6, 7:
			dir = "FORWARD " + count()
		case 8:
			dir = "BACKWARD " + count()
		default:
			dir = count() // FETCH 5 FROM c
		}
		return verb + " " + dir + " FROM c"
	}
	options := []string{"SCROLL", "NO SCROLL", ""}
	declare := func() []string {
		opt := options[rng.IntN(len(options))]
		return []string{"BEGIN", "DECLARE c " + opt + " CURSOR FOR SELECT id, email FROM accounts ORDER BY id"}
	}
	var script []string
	for _, s := range declare() {
		script = append(script, s)
		if got := run(s); got[0] != got[1] {
			t.Fatalf("seed %d: %q: direct %s, proxy %s", seed, s, got[0], got[1])
		}
	}
	for i := 0; i < steps; i++ {
		var sql string
		switch r := rng.IntN(40); {
		case r == 0:
			sql = "SELECT count(*) FROM accounts"
		case r == 1:
			sql = "ROLLBACK"
		default:
			sql = move()
		}
		got := run(sql)
		script = append(script, sql)
		if got[0] != got[1] {
			t.Fatalf("seed %d: statement %d %q: direct %s, proxy %s\nscript: %q", seed, i, sql, got[0], got[1], script)
		}
		if sql == "ROLLBACK" || len(got[0]) > 5 && got[0][:5] == "error" {
			for _, s := range append([]string{"ROLLBACK"}, declare()...) {
				script = append(script, s)
				if got := run(s); got[0] != got[1] {
					t.Fatalf("seed %d: %q: direct %s, proxy %s", seed, s, got[0], got[1])
				}
			}
		}
	}
	run("ROLLBACK")
}
