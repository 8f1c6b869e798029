package integration

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/replication"
)

// TestCutoverAfterTakeover: the run of a task that is cutting over loses
// the task to another run, as when another proxy took the task's lease
// while this one had lost its lease session for a moment (found by
// TestChaosReshardCluster: writes the source acknowledged after such a
// takeover were missing on the destination). The other run is played by
// a second Task of the same source and destination that claims the task
// from the cutover's stage hook; its claim lifts a fence only while no
// cutover recorded the source's shards, since it cannot tell a live
// cutover from one whose proxy died.
//
//   - claimed once the source is fenced: the claim lifts the fence, and an
//     application writes to the source again. The cutover must not switch:
//     CUTOVER fails, the proxy still serves the source, the write is there
//     through the proxy, and the source is not fenced. The run that lost
//     its claim stops (it cut over again and again, aborting each time,
//     found by make chaos); the task resumed with a claim of its own cuts
//     over, the write with it.
//   - claimed once the cutover recorded the source's shards: the claim
//     leaves the fence up, and the cutover completes. The source stays
//     fenced: a new session there cannot write.
func TestCutoverAfterTakeover(t *testing.T) {
	for _, stage := range []string{"fenced", "before-config-write"} {
		t.Run(stage, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			var o *operated
			var claimed atomic.Bool
			claimErr := make(chan error, 1)
			e := startRetryEnv(t, ctx, false, func(op *operated) {
				o = op
				op.Tasks.KnobsForTest.AtCutoverStage = func(s string) {
					if s != stage || !claimed.CompareAndSwap(false, true) {
						return
					}
					claimErr <- takeOverTask(ctx, op)
				}
			})
			e.start(t)
			e.waitPhase(t, "stream")
			_, cutErr := adminPgx(e.adm, "CUTOVER "+e.id)
			select {
			case err := <-claimErr:
				if err != nil {
					t.Fatalf("the other run's claim: %v", err)
				}
			default:
				t.Fatalf("the cutover never reached stage %q (CUTOVER: %v)", stage, cutErr)
			}
			write := writeSource(ctx, e.sc)
			shards := o.Gate.Config().Database("app").Shards
			if stage == "fenced" {
				if cutErr == nil || !strings.Contains(cutErr.Error(), "another run claimed the task") {
					t.Fatalf("CUTOVER after another run claimed the task: %v, want the cutover aborted for the claim", cutErr)
				}
				if len(shards) != 1 || shards[0].Database != "app_0" {
					t.Fatalf("after the aborted cutover the proxy serves %+v, want the source app_0", shards)
				}
				if write != nil {
					t.Fatalf("a write on the source after the aborted cutover: %v, want it taken (the fence lifted)", write)
				}
				app := connect(t, o.AppURL("app"))
				var n int
				if err := app.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE id = 1000001").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Fatalf("the source's write is %d times on what the proxy serves, want 1", n)
				}
				// The run whose claim was taken ends, leaving the task
				// recorded as running; a run with a claim of its own (Watch
				// resumes it, here or on another proxy) then cuts over,
				// with the write.
				eventually(t, 30*time.Second, "the run that lost its claim to stop", func() bool {
					state, _, errText := e.task(t)
					return state == "stopped" && strings.Contains(errText, "another proxy runs the task now")
				})
				if resumed, err := o.Tasks.Resume(ctx); err != nil || len(resumed) != 1 {
					t.Fatalf("Resume: %d tasks (%v), want 1", len(resumed), err)
				}
				waitTaskStreams(t, e.adm, 60*time.Second, "the resumed run to stream")
				if _, err := adminPgx(e.adm, "CUTOVER"); err != nil {
					t.Fatalf("CUTOVER by the resumed run: %v", err)
				}
				if shards := o.Gate.Config().Database("app").Shards; len(shards) != 2 {
					t.Fatalf("after the resumed run's cutover the proxy serves %+v, want app_new's two shards", shards)
				}
				app = connect(t, o.AppURL("app"))
				if err := app.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE id = 1000001").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Fatalf("the source's write is %d times on the destination after the cutover, want 1", n)
				}
				return
			}
			if cutErr != nil {
				t.Fatalf("CUTOVER with the other run's claim after the record of the source's shards: %v", cutErr)
			}
			if len(shards) != 2 || !strings.HasPrefix(shards[0].Database, "app_new_") {
				t.Fatalf("after the cutover the proxy serves %+v, want app_new's two shards", shards)
			}
			var pgErr *pgconn.PgError
			if !errors.As(write, &pgErr) || pgErr.Code != "25006" {
				t.Fatalf("a write on the source after the cutover: %v, want 25006 (the fence stays)", write)
			}
		})
	}
}

// takeOverTask claims the task app → app_new of o, as another proxy's run
// of it does when it resumes the task.
func takeOverTask(ctx context.Context, o *operated) error {
	cfg := o.Gate.Config()
	user, password := replication.Credentials(cfg, "app")
	other, err := replication.New(cfg.Database("app"), cfg.Database("app_new"), user, password, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	return other.Claim(ctx)
}

// writeSource inserts row 1000001 into accounts on the source shard, in a
// new session as an application's (which a fence makes read-only).
func writeSource(ctx context.Context, sc *pgtest.Cluster) error {
	conn, err := pgx.Connect(ctx, sc.DSN("app_0"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "INSERT INTO accounts VALUES (1000001, 1)")
	return err
}

// TestCutoverAbortWithDestinationDown: the destination's PostgreSQL goes
// down right after the cutover fenced the source, so the cutover aborts
// and cannot reach destination shard 0, where the claim is checked before
// the fence is lifted (claim.go). The source stays fenced while the
// destination is down (refusing writes rather than risking them on a
// source another run may be switching away from), and once it is back
// the task lifts the fence before it streams again: the source takes
// writes without anyone asking.
func TestCutoverAbortWithDestinationDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var dc *pgtest.Cluster
	var killed atomic.Bool
	e := startRetryEnv(t, ctx, false, func(op *operated) {
		op.Tasks.KnobsForTest.AtCutoverStage = func(s string) {
			if s == "fenced" && killed.CompareAndSwap(false, true) {
				if err := dc.Kill(); err != nil {
					t.Errorf("kill the destination: %v", err)
				}
			}
		}
	})
	dc = e.dc
	e.start(t)
	e.waitPhase(t, "stream")
	if _, err := adminPgx(e.adm, "CUTOVER "+e.id); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("CUTOVER with the destination down after the fence: %v, want aborted", err)
	}
	var pgErr *pgconn.PgError
	if err := writeSource(ctx, e.sc); !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("a write on the source while the destination is down: %v, want 25006 (still fenced)", err)
	}
	if err := dc.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the source to take writes again", func() bool {
		return writeSource(ctx, e.sc) == nil
	})
	e.src = reconnected(t, ctx, e.src) // the cutover fenced the source
	e.stop(t, ctx)
}
