package frontend

import (
	"context"
	"log/slog"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
)

// The two-phase resolver. Every proxy finishes the multi-shard
// transactions that their proxy left prepared — after a crash, a lost
// connection during COMMIT, or a COMMIT PREPARED that failed — whichever
// proxy ran them: the decision is on the coordinating shard (see
// executor/twopc.go). It runs once before the proxy accepts clients and
// then in the background.

// InDoubt is a prepared transaction the last resolver pass left.
type InDoubt struct {
	Database string
	executor.InDoubt
}

// ResolveTwoPhase runs one resolver pass over every database with several
// shards, once per server user (only a prepared transaction's owner may
// finish it), and returns what it left in doubt.
func (l *Listener) ResolveTwoPhase(ctx context.Context) ([]InDoubt, error) {
	st := l.State()
	timeout := st.Config.Limits.InDoubtTimeout
	var left []InDoubt
	var firstErr error
	for di := range st.Config.Databases {
		db := &st.Config.Databases[di]
		if len(db.Shards) < 2 {
			continue
		}
		for _, pools := range resolverPools(st, db) {
			res, err := executor.ResolvePools(ctx, pools, timeout)
			if res.Committed+res.RolledBack > 0 {
				l.log.Info("resolved in-doubt two-phase transactions", "database", db.Name,
					"committed", res.Committed, "rolled_back", res.RolledBack)
			}
			for _, d := range res.InDoubt {
				left = append(left, InDoubt{Database: db.Name, InDoubt: d})
			}
			if err != nil {
				l.log.Warn("two-phase resolver", "database", db.Name, "user", pools[0].Target.User, "err", err)
				if firstErr == nil {
					firstErr = err
				}
			}
		}
	}
	l.inDoubt.Store(&left)
	return left, firstErr
}

// resolverPools returns, for each distinct server user of database db,
// the primary pools of its shards in shard order.
func resolverPools(st *State, db *config.Database) [][]*pool.Pool {
	var out [][]*pool.Pool
	seen := map[string]bool{}
	for ui := range st.Config.Users {
		u := &st.Config.Users[ui]
		if !u.Allows(db.Name) {
			continue
		}
		pools := make([]*pool.Pool, len(db.Shards))
		key := ""
		for i := range db.Shards {
			pools[i] = st.Pools.Get(db, u, i)
			key += pools[i].Target.User + "\x00"
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, pools)
		}
	}
	return out
}

// LastInDoubt is what the last resolver pass left in doubt.
func (l *Listener) LastInDoubt() []InDoubt {
	if p := l.inDoubt.Load(); p != nil {
		return *p
	}
	return nil
}

// RunTwoPhaseResolver runs a resolver pass every interval (half the
// in-doubt timeout, between 100ms and 5s) until ctx ends, and backs off
// to a minute while passes fail.
func (l *Listener) RunTwoPhaseResolver(ctx context.Context) {
	wait := resolverInterval(l.State().Config.Limits.InDoubtTimeout)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pass, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := l.ResolveTwoPhase(pass)
		cancel()
		base := resolverInterval(l.State().Config.Limits.InDoubtTimeout)
		switch {
		case err == nil:
			wait = base
		case wait < time.Minute:
			wait = min(2*max(wait, base), time.Minute)
			l.log.Log(ctx, slog.LevelDebug, "two-phase resolver backs off", "wait", wait)
		}
		t.Reset(wait)
	}
}

func resolverInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/2, 100*time.Millisecond), 5*time.Second)
}
