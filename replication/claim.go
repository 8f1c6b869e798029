package replication

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run claims: a runner that lost its task to another proxy writes nothing
// more to the destinations.
//
// The lease (lease.go) makes one proxy the task's runner, but a runner
// learns that it lost the lease only at its next check: a proxy stopped
// (SIGSTOP, a long GC pause, a partition) goes on where it was when it
// continues. Its stream cannot do harm — the slot and the destinations'
// replication origins take one session at a time — but its copy can: it
// copied at a snapshot older than the one the new runner advanced the slot
// to, so its table copy, committed after the takeover, would either fail
// the new runner's copy of the same table (23505 on the table_copies row,
// ending the task) or, committed first, carry a snapshot the slot has
// moved past (changes in between lost). The same holds for its advance of
// the slot to a snapshot newer than the new runner's copies.
//
// So each run claims the task on every destination shard before it writes
// there (Claim, called by Managed.phases under the lease, retried as a lost
// server is): it writes a
// token of its own in shardgate_reshard.runners, holding the task's two
// claim locks (transaction-level advisory locks, keyed by the task's name)
// exclusively. Every write that must not come from a stale runner holds one
// of them shared, in the transaction that writes, and first checks that
// the row still names its run (checkClaim):
//   - a table copy's destination transaction holds the copy lock. Claim
//     terminates the sessions that hold it: a copy can take minutes, and a
//     stopped proxy holds it for as long as it stays stopped; its
//     transaction rolls back, and its runner's next attempt finds the
//     claim gone.
//   - the advance of the slot to a copy's snapshot holds the advance lock
//     on destination shard 0 for as long as the advance runs on the
//     source. Claim waits for it (up to claimWait): terminating the
//     destination session would not stop the advance on the source.
//   - a cutover's fence (fence.go), its record of the source's shards
//     (the step before its switch, after which the source stays fenced),
//     and the undoing of both when it aborts hold the advance lock too
//     (underClaim). Claim lifts a fence that an earlier run left, and only
//     while the task's record says that no cutover got that far: the
//     earlier run may have died between its fence and its switch, and
//     the source serves the database still. Both sides take the lock and
//     read the claim first, so either the earlier run's cutover recorded
//     the source's shards before the claim (the fence stays, that cutover
//     completes) or it finds the task claimed and aborts, without lifting
//     a fence that is no longer its own. Without that, a run that lost its
//     lease for a moment in the middle of its cutover went on to switch
//     while the run that took the task over had lifted its fence: every
//     write committed on the source between that and the switch was lost
//     (TestCutoverAfterTakeover).
//
// A Task used without a Manager (tests, benchmarks) has no claim and
// checks nothing.
type claim struct {
	token string // this run's; empty: not claimed
}

const (
	// copyClaimLock and advanceClaimLock name the two claim locks: the
	// first key of each lock is hashtext of this text, the second
	// hashtext of the task's name.
	copyClaimLock    = "shardgate-claim-copy"
	advanceClaimLock = "shardgate-claim-advance"
	// claimWait bounds how long Claim waits for a runner's slot advance,
	// and for the sessions it terminated to let the copy lock go.
	claimWait = 20 * time.Second
)

// claimLockHeld selects the pg_locks rows of the sessions that hold the
// claim lock named $1 of the task named $2 in this database.
const claimLockHeld = `locktype = 'advisory' AND granted AND objsubid = 2
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid = hashtext($1)::oid AND objid = hashtext($2)::oid`

// claimError is a failed Claim: retried, as a server that went away is
// (the claim waits for a stale runner's sessions, which end in time).
type claimError struct{ err error }

func (e *claimError) Error() string { return e.err.Error() }
func (e *claimError) Unwrap() error { return e.err }

// errClaimLost is the error of a write refused because another run
// claimed the task: its runner lost its lease.
var errClaimLost = fmt.Errorf("another run claimed the task on its destinations: %w", errLeaseHeld)

// Claim makes this run the task's only writer on the destinations (see
// claim): it records a new token on every destination shard, after ending
// the copies of any earlier run and waiting for its slot advance. Call it
// once per run, holding the lease, before the task writes.
func (t *Task) Claim(ctx context.Context) error {
	var b [12]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	for d := range t.dst.Shards {
		if err := t.claimShard(ctx, d, token); err != nil {
			return fmt.Errorf("replication: claim the task: %s: %w", shardDesc("destination", t.dst, d), err)
		}
	}
	t.claim.token = token
	return nil
}

// claimShard records token as the task's run on destination shard d.
func (t *Task) claimShard(ctx context.Context, d int, token string) error {
	conn, err := t.connectDest(ctx, d)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if d == 0 {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", claimWait.Milliseconds())); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, advanceClaimLock, t.Name); err != nil {
				return fmt.Errorf("wait for another runner's slot advance: %w", err)
			}
		}
		deadline := time.Now().Add(claimWait)
		for {
			var got bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtext($1), hashtext($2))`, copyClaimLock, t.Name).Scan(&got); err != nil {
				return err
			}
			if got {
				break
			}
			// An earlier run's copies hold it: they end now.
			var ended int
			if err := tx.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE `+claimLockHeld+`
				AND pid <> pg_backend_pid()`, copyClaimLock, t.Name).Scan(&ended); err != nil {
				return err
			}
			if ended > 0 {
				t.log.Warn("ended another run's table copies: the task was taken over", "shard", d, "sessions", ended)
			}
			if time.Now().After(deadline) {
				return errors.New("the copies of another run of the task hold its claim lock still")
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shardgate_reshard.runners (task, token) VALUES ($1, $2)
			ON CONFLICT (task) DO UPDATE SET token = EXCLUDED.token, claimed_at = now()`, t.Name, token); err != nil {
			return err
		}
		if d == 0 {
			return t.liftEarlierFence(ctx, tx)
		}
		return nil
	})
}

// liftEarlierFence lifts the fence of a cutover that an earlier run of the
// task left between its fence and its switch, unless the task's record
// says that cutover recorded the source's shards (see claim); tx holds
// both claim locks on destination shard 0.
func (t *Task) liftEarlierFence(ctx context.Context, tx pgx.Tx) error {
	r, err := readRecord(ctx, tx, t.Name)
	switch {
	case err != nil:
		return fmt.Errorf("read the task's record: %w", err)
	case !r.found || !r.running:
		return nil
	case r.cutOver:
		t.log.Warn("an earlier run of the task recorded a cutover's source shards: a fence it put up on the source stays until a cutover completes (CUTOVER) or the task stops (STOP_TASK)")
		return nil
	}
	uctx, cancel := context.WithTimeout(ctx, claimWait)
	defer cancel()
	if err := t.Unfence(uctx); err != nil {
		return fmt.Errorf("lift the fence of an interrupted cutover: %w", err)
	}
	return nil
}

// underClaim runs f in a transaction on destination shard 0 that holds the
// advance claim lock shared, once it has checked that the claim is still
// this run's (errClaimLost otherwise): the fence of a cutover, its record
// of the source's shards and their undoing (see claim). A Task that was
// not claimed checks nothing.
func (t *Task) underClaim(ctx context.Context, f func(tx pgx.Tx) error) error {
	conn, err := t.connectDest(ctx, 0)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := t.checkClaim(ctx, tx, advanceClaimLock); err != nil {
			return err
		}
		return f(tx)
	})
}

// checkClaim takes the claim lock named lock shared, for the rest of tx
// (a transaction on a destination shard), and fails with errClaimLost
// unless the shard's claim is still this run's. It checks nothing for a
// Task that was not claimed.
func (t *Task) checkClaim(ctx context.Context, tx pgx.Tx, lock string) error {
	if t.claim.token == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtext($1), hashtext($2))`, lock, t.Name); err != nil {
		return fmt.Errorf("claim lock: %w", err)
	}
	var token string
	err := tx.QueryRow(ctx, `SELECT token FROM shardgate_reshard.runners WHERE task = $1`, t.Name).Scan(&token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errClaimLost
	case err != nil:
		return fmt.Errorf("read the task's claim: %w", err)
	case token != t.claim.token:
		return errClaimLost
	}
	return nil
}
