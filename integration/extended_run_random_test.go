package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestExtendedRunRandom sends seeded random sequences of extended-protocol
// messages, each step's in one write (several batches, Flush and Sync
// inside, row-limited Executes, named and unnamed statements and portals,
// Describe and Close of both, errors at Parse, Bind and Execute, wrong
// parameter counts, unknown names), to one PostgreSQL directly and through
// the proxy in transaction mode with a pool of one that another client
// uses between the steps (and in session mode), and requires the same answers, message by
// message with every field a client acts on; after each step a probe
// describes both statement names. Most of each write is what the proxy
// handles in one run after its first message (extendedRun), so this is
// also where that run and the message-by-message path must agree.
// EXTRUN_SEED replays a seed; EXTRUN_STEPS sets the steps a seed runs.
func TestExtendedRunRandom(t *testing.T) {
	checkGoroutines(t)
	seed, stepsPerSeed := extRunSeed(t)
	steps := extRunSteps(extRunRand(seed), stepsPerSeed)

	cl := cluster(t, "app")
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, mode, map[string]int{"transaction": 1, "session": 2}[mode], "app"))
			extRunCompare(t, cl.DSN("app"), p, mode, seed, steps, "")
		})
	}
}

// extRunSeed is the random tests' seed (EXTRUN_SEED, else the clock),
// logged so that a failure can be replayed, and their number of steps
// (EXTRUN_STEPS, else 120).
func extRunSeed(t *testing.T) (seed uint64, steps int) {
	seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("EXTRUN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EXTRUN_SEED: %v", err)
		}
		seed = v
	}
	steps = 120
	if s := os.Getenv("EXTRUN_STEPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("EXTRUN_STEPS: %v", err)
		}
		steps = v
	}
	t.Logf("seed %d (EXTRUN_SEED=%d replays it)", seed, seed)
	return seed, steps
}

// extRunRand is the random tests' generator for seed.
func extRunRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// extRunCompare runs steps on one connection to the PostgreSQL database
// at direct and one through proxy p (pool mode mode), in lockstep, and
// fails at the first answer that differs. Another client uses the proxy
// between the steps: in transaction mode with a pool of one, the server
// the steps ran on. With data not empty, that client also reads it (a
// query that sums up the rows the steps write) on both sides after each
// step, so that writes that differ show at the step that made them.
func extRunCompare(t *testing.T, direct string, p *proxy, mode string, seed uint64, steps []wireStep, data string) {
	d := dialWire(t, direct)
	defer d.close()
	other := simpleConn(t, p.AppURL("app"))
	var otherDirect *pgx.Conn
	if data != "" {
		otherDirect = simpleConn(t, direct)
	}
	a := dialWire(t, p.AppURL("app"))
	defer a.close()
	// After each step, a probe describes each statement name, so that a
	// difference in which statements exist shows at the step that made
	// it rather than steps later.
	probe := wireStep{send: []pgproto3.FrontendMessage{
		&pgproto3.Describe{ObjectType: 'S', Name: "s1"}, syncMsg,
		&pgproto3.Describe{ObjectType: 'S', Name: "s2"}, syncMsg,
	}, zs: 2}
	for i, st := range steps {
		for k, st := range []wireStep{st, probe} {
			want := d.run([]wireStep{st}, nil)
			got := a.run([]wireStep{st}, nil)
			if strings.Join(got[0], " ") != strings.Join(want[0], " ") {
				for _, m := range steps[i].send {
					t.Logf("step %d sent %T %+v", i, m, m)
				}
				a.close() // a proxy stuck on the step still ends at Shutdown
				sameWire(t, fmt.Sprintf("seed %d, %s mode, step %d%s", seed, mode, i, []string{"", " (the probe after it)"}[k]), []wireStep{st}, got, want)
			}
		}
		// Another client uses the pool between the steps: in transaction
		// mode the only server, and the proxy must give the next step
		// the statements it expects.
		execIn(t, other, simple, fmt.Sprintf("SELECT %d", i))
		if data != "" {
			got, want := row(t, other, simple, data), row(t, otherDirect, simple, data)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				for _, m := range steps[i].send {
					t.Logf("step %d sent %T %+v", i, m, m)
				}
				t.Fatalf("seed %d, %s mode, after step %d: %s = %v through the proxy, %v direct", seed, mode, i, data, got, want)
			}
		}
	}
}

// extRunTexts are the statements the random steps prepare: with one
// parameter and without, rows to fetch in pieces, an error at Bind (the
// planner folds 1/0), an error at Parse, and the empty query.
var extRunTexts = []string{
	"SELECT $1::int + 1",
	"SELECT g FROM generate_series(1, 3) g",
	"SELECT 1/0",
	"SELECT nope",
	"SELECT $1::text || 'x'",
	"",
}

// extRunQueries are the simple Queries between the batches: savepoints
// matter inside a transaction block (and fail outside one).
var extRunQueries = []string{
	"SELECT 'q'",
	"SAVEPOINT sp",
	"ROLLBACK TO SAVEPOINT sp",
	"RELEASE SAVEPOINT sp",
}

// extRunSteps draws n steps of one to three batches, each ending with
// Sync; a step's answers are read up to its last ReadyForQuery.
func extRunSteps(rng *rand.Rand, n int) []wireStep {
	return extRunStepsOf(rng, n, extRunTexts)
}

// extRunStepsOf is extRunSteps with the statements texts.
func extRunStepsOf(rng *rand.Rand, n int, texts []string) []wireStep {
	stmts := []string{"", "s1", "s2"}
	portals := []string{"", "p1"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	steps := make([]wireStep, 0, n)
	for range n {
		var st wireStep
		// A quarter of the steps run in a transaction block, where named
		// portals outlive a Sync and errors leave it failed; it ends
		// within the step (COMMIT of a failed one answers ROLLBACK).
		block := rng.IntN(4) == 0
		if block {
			st.send = append(st.send, queryMsg("BEGIN"))
			st.zs++
		}
		for range 1 + rng.IntN(3) {
			if rng.IntN(10) == 0 {
				st.send = append(st.send, queryMsg(pick(extRunQueries)))
				st.zs++
				continue
			}
			// The unnamed statement is bound or described only after a
			// Parse of it in the same batch, as drivers do: the proxy
			// forgets a client's unnamed statement whose Parse or Close
			// the server skipped after an error, where PostgreSQL keeps
			// the one before (notParsed; docs/pooling.md).
			parsed := false
			stmt := func() string {
				if name := pick(stmts); name != "" || parsed {
					return name
				}
				return "s1"
			}
			// Likewise the unnamed portal is executed or described only
			// after a Bind of it in the same batch: a simple Query that
			// fails in a transaction block leaves PostgreSQL's unnamed
			// portal behind, failed, until the block ends (an Execute of
			// it answers 25P02, not 34000), which a sharded database,
			// whose portals are the proxy's, does not copy.
			bound := false
			portal := func() string {
				if name := pick(portals); name != "" || bound {
					return name
				}
				return "p1"
			}
			for range 1 + rng.IntN(6) {
				switch k := rng.IntN(20); {
				case k < 5:
					name := pick(stmts)
					parsed = parsed || name == ""
					st.send = append(st.send, parseMsg(name, pick(texts)))
				case k < 10:
					b := &pgproto3.Bind{DestinationPortal: pick(portals), PreparedStatement: stmt()}
					bound = bound || b.DestinationPortal == ""
					if rng.IntN(3) > 0 {
						b.Parameters = [][]byte{[]byte(strconv.Itoa(rng.IntN(100)))}
					}
					st.send = append(st.send, b)
				case k < 12:
					typ := byte('S')
					name := stmt()
					if rng.IntN(2) == 0 {
						typ, name = 'P', portal()
					}
					st.send = append(st.send, &pgproto3.Describe{ObjectType: typ, Name: name})
				case k < 17:
					st.send = append(st.send, &pgproto3.Execute{Portal: portal(), MaxRows: uint32(rng.IntN(3))})
				case k < 18:
					typ := byte('S')
					name := pick(stmts)
					if rng.IntN(2) == 0 {
						typ, name = 'P', pick(portals)
					}
					st.send = append(st.send, &pgproto3.Close{ObjectType: typ, Name: name})
				default:
					st.send = append(st.send, flushMsg)
				}
			}
			st.send = append(st.send, syncMsg)
			st.zs++
		}
		if block {
			st.send = append(st.send, queryMsg("COMMIT"))
			st.zs++
		}
		steps = append(steps, st)
	}
	return steps
}
