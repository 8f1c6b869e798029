package executor

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Two-phase commit across shards.
//
// A transaction that wrote on more than one shard commits in two phases.
// One of its shards, the first it touched in shard order, is the
// coordinator: its own COMMIT PREPARED is the transaction's commit point,
// so the decision is stored by PostgreSQL itself, next to the data, where
// any proxy can read it and no proxy's disk can lose it. In order:
//
//  1. On the coordinator, in one round trip: `SELECT pg_current_xact_id();
//     PREPARE TRANSACTION '<gid>'`. The xid names the coordinator's
//     transaction in its commit log (pg_xact) from now on.
//  2. PREPARE TRANSACTION on every other shard, whose GIDs carry the
//     coordinator's shard, identity and xid.
//  3. COMMIT PREPARED on the coordinator: the transaction is committed.
//  4. COMMIT PREPARED on the other shards.
//
// Whoever finds a prepared participant later — the proxy that ran the
// transaction, another proxy, or one restarted after a crash (Resolve) —
// asks the coordinator's server for the status of that xid
// (pg_xact_status): committed means commit the participant, aborted means
// roll it back. While the xid is still in progress the coordinator's
// transaction is prepared and undecided; once it has been so for longer
// than the in-doubt timeout, the resolver decides it by rolling the
// coordinator back. That is safe against the proxy that ran it still
// being alive (slow, or stopped with SIGSTOP): COMMIT PREPARED and
// ROLLBACK PREPARED of one GID exclude each other in PostgreSQL, so
// exactly one of the two proxies decides, and the loser learns it (its
// COMMIT PREPARED finds nothing: SQLSTATE 42704). Because the coordinator
// prepares first, a prepared participant always has a coordinator that is
// prepared or decided.
//
// GIDs are "sg:<txid>:<coord>:<tag>:<xid>:<shard>": txid is unique across
// proxies and restarts (a random 64-bit prefix per process and a counter),
// coord the coordinator's shard index, tag a hash of the coordinator's
// server and database (so that a GID read after a topology change never
// asks the wrong server), xid the coordinator's xid (0 in the
// coordinator's own GID), shard the participant's index.

// GID is a prepared-transaction identifier made by the proxy.
type GID struct {
	TxID  string
	Coord int    // the coordinator's shard
	Tag   uint32 // CoordTag of the coordinator's target
	XID   uint64 // the coordinator's xid; 0 in the coordinator's own GID
	Shard int
}

// String is the GID as PREPARE TRANSACTION receives it.
func (g GID) String() string {
	return fmt.Sprintf("sg:%s:%d:%08x:%d:%d", g.TxID, g.Coord, g.Tag, g.XID, g.Shard)
}

// ParseGID reads a GID made by GID.String; ok is false for any other
// (another application's, or an earlier format's).
func ParseGID(s string) (g GID, ok bool) {
	rest, found := strings.CutPrefix(s, "sg:")
	if !found {
		return GID{}, false
	}
	f := strings.Split(rest, ":")
	if len(f) != 5 || f[0] == "" {
		return GID{}, false
	}
	coord, err1 := strconv.Atoi(f[1])
	tag, err2 := strconv.ParseUint(f[2], 16, 32)
	xid, err3 := strconv.ParseUint(f[3], 10, 64)
	shard, err4 := strconv.Atoi(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil || coord < 0 || shard < 0 {
		return GID{}, false
	}
	return GID{TxID: f[0], Coord: coord, Tag: uint32(tag), XID: xid, Shard: shard}, true
}

// CoordTag identifies a shard's server and database in GIDs.
func CoordTag(host string, port int, database string) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s\x00%d\x00%s", host, port, database)
	return h.Sum32()
}

// XactStatus is what pg_xact_status says of a coordinator's xid.
type XactStatus int

const (
	XactUnknown    XactStatus = iota // NULL: too old, or from another server
	XactInProgress                   // prepared (or still running)
	XactCommitted
	XactAborted
)

func (x XactStatus) String() string {
	switch x {
	case XactUnknown:
		return "unknown"
	case XactInProgress:
		return "in progress"
	case XactCommitted:
		return "committed"
	case XactAborted:
		return "aborted"
	}
	return "XactStatus(" + strconv.Itoa(int(x)) + ")"
}

// Prepared is a prepared transaction of the proxy's on a shard.
type Prepared struct {
	GID GID
	Age time.Duration // since PREPARE TRANSACTION
}

// TwoPhaseShard is what resolving needs of one shard (over a connection
// of the caller's).
type TwoPhaseShard interface {
	// Tag is the shard's CoordTag.
	Tag() uint32
	// Prepared lists the proxy's prepared transactions in the shard's
	// database.
	Prepared(ctx context.Context) ([]Prepared, error)
	// Status is pg_xact_status of xid on the shard.
	Status(ctx context.Context, xid uint64) (XactStatus, error)
	// Finish runs COMMIT PREPARED (commit) or ROLLBACK PREPARED; found is
	// false when the GID was not prepared (42704: someone finished it).
	Finish(ctx context.Context, gid string, commit bool) (found bool, err error)
}

// InDoubt is a prepared transaction a pass of Resolve left alone or could
// not finish.
type InDoubt struct {
	Shard  int
	GID    GID
	Age    time.Duration
	Status string // what is known of its outcome, or why it was left
}

// ResolveResult is what a pass of Resolve did.
type ResolveResult struct {
	Committed, RolledBack int
	InDoubt               []InDoubt
}

// Resolve finishes the proxy's prepared transactions on shards (the
// shards of one database, in its shard order): participants as their
// coordinator decided, and coordinators undecided for longer than
// timeout by rolling them back. Transactions of a coordinator these
// shards do not include (a GID from another topology) are left in doubt.
func Resolve(ctx context.Context, shards []TwoPhaseShard, timeout time.Duration) (ResolveResult, error) {
	var res ResolveResult
	var errs []error
	lists := make([][]Prepared, len(shards))
	for i, s := range shards {
		l, err := s.Prepared(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
		}
		lists[i] = l
	}
	// Coordinators first: a participant's decision may be the rollback of
	// its coordinator.
	for pass := range 2 {
		for i, l := range lists {
			for _, p := range l {
				if (p.GID.XID == 0) != (pass == 0) {
					continue
				}
				if err := resolveOne(ctx, shards, i, p, timeout, &res); err != nil {
					errs = append(errs, fmt.Errorf("shard %d: %s: %w", i, p.GID, err))
				}
			}
		}
	}
	return res, errors.Join(errs...)
}

// resolveOne finishes prepared transaction p of shard i if its outcome is
// known (or, for an old undecided coordinator, decides it).
func resolveOne(ctx context.Context, shards []TwoPhaseShard, i int, p Prepared, timeout time.Duration, res *ResolveResult) error {
	g := p.GID
	doubt := func(why string) {
		res.InDoubt = append(res.InDoubt, InDoubt{Shard: i, GID: g, Age: p.Age, Status: why})
	}
	if g.Shard != i || g.Coord >= len(shards) || shards[g.Coord].Tag() != g.Tag {
		doubt("its coordinator is not a shard of this database")
		return nil
	}
	if g.XID == 0 {
		// The coordinator itself, still prepared: undecided.
		if p.Age < timeout {
			doubt("undecided (in progress)")
			return nil
		}
		return finish(ctx, shards[i], g, false, res)
	}
	coord := shards[g.Coord]
	st, err := coord.Status(ctx, g.XID)
	if err != nil {
		doubt("coordinator unreachable")
		return err
	}
	if st == XactInProgress {
		// The coordinator is prepared and undecided (it prepared before
		// this participant): the coordinator pass above rolls it back once
		// it is old enough; until then, wait.
		doubt("undecided (coordinator prepared)")
		return nil
	}
	switch st {
	case XactCommitted:
		return finish(ctx, shards[i], g, true, res)
	case XactAborted:
		return finish(ctx, shards[i], g, false, res)
	}
	doubt("the coordinator no longer knows its xid " + strconv.FormatUint(g.XID, 10))
	return nil
}

func finish(ctx context.Context, s TwoPhaseShard, g GID, commit bool, res *ResolveResult) error {
	found, err := s.Finish(ctx, g.String(), commit)
	switch {
	case err != nil:
		return err
	case !found:
		// Finished by someone else meanwhile.
	case commit:
		res.Committed++
	default:
		res.RolledBack++
	}
	return nil
}
