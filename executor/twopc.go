package executor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Two-phase commit across shards.
//
// A transaction that wrote on more than one shard commits in two phases:
// PREPARE TRANSACTION '<gid>' on every shard it touched, then — once every
// PREPARE succeeded — the decision is appended to the DecisionLog and
// fsynced, and only then COMMIT PREPARED runs on each shard. A crash
// before the decision leaves prepared transactions without a decision:
// recovery rolls them back. A crash after it leaves a decision: recovery
// commits them. Either way pg_prepared_xacts ends empty.
//
// GIDs are "sg:<txid>:<shard>"; txid is unique per proxy process start
// (a random prefix plus a counter).

// GID returns the prepared-transaction id of txid on shard.
func GID(txid string, shard int) string { return fmt.Sprintf("sg:%s:%d", txid, shard) }

// ParseGID splits a GID made by GID; ok is false for foreign GIDs.
func ParseGID(gid string) (txid string, shard int, ok bool) {
	rest, found := strings.CutPrefix(gid, "sg:")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", 0, false
	}
	if _, err := fmt.Sscanf(rest[i+1:], "%d", &shard); err != nil {
		return "", 0, false
	}
	return rest[:i], shard, true
}

// DecisionLog is the durable record of commit decisions.
type DecisionLog struct {
	path string

	mu        sync.Mutex // guards the following
	f         *os.File
	committed map[string]bool // decided and not yet finished
}

// OpenDecisionLog opens (creating) the log at path and loads the decisions
// that were not marked done.
func OpenDecisionLog(path string) (*DecisionLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("2pc log: %w", err)
	}
	l := &DecisionLog{path: path, f: f, committed: map[string]bool{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, txid, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue // a torn last line: the decision was never acknowledged
		}
		switch kind {
		case "C":
			l.committed[txid] = true
		case "D":
			delete(l.committed, txid)
		}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return nil, fmt.Errorf("2pc log: read %s: %w", path, err)
	}
	return l, nil
}

// Commit durably records that txid commits.
func (l *DecisionLog) Commit(txid string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.WriteString("C " + txid + "\n"); err != nil {
		return fmt.Errorf("2pc log: write: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("2pc log: fsync: %w", err)
	}
	l.committed[txid] = true
	return nil
}

// Done records that every shard of txid finished; recovery forgets it.
func (l *DecisionLog) Done(txid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.WriteString("D " + txid + "\n")
	delete(l.committed, txid)
}

// Committed reports whether a decision to commit txid is on record.
func (l *DecisionLog) Committed(txid string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed[txid]
}

// Compact rewrites the log with only the open decisions.
func (l *DecisionLog) Compact() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	tmp := l.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("2pc log: compact: %w", err)
	}
	for txid := range l.committed {
		fmt.Fprintf(f, "C %s\n", txid)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("2pc log: compact: %w", err)
	}
	f.Close()
	if err := os.Rename(tmp, l.path); err != nil {
		return fmt.Errorf("2pc log: compact: %w", err)
	}
	nf, err := os.OpenFile(l.path, os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("2pc log: reopen: %w", err)
	}
	l.f.Close()
	l.f = nf
	return nil
}

// Close closes the log file.
func (l *DecisionLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// PreparedStore is one shard's view of prepared transactions, implemented
// over a server connection by the caller.
type PreparedStore interface {
	// Prepared lists the GIDs prepared in this shard's database.
	Prepared(ctx context.Context) ([]string, error)
	// Finish runs COMMIT PREPARED (commit) or ROLLBACK PREPARED.
	Finish(ctx context.Context, gid string, commit bool) error
}

// Recover resolves every in-doubt transaction of this proxy's GID format
// on the given shards: committed where the log holds a decision, rolled
// back otherwise. It returns how many it committed and rolled back.
func Recover(ctx context.Context, log *DecisionLog, shards []PreparedStore) (committed, rolledBack int, err error) {
	var errs []error
	for i, s := range shards {
		gids, err := s.Prepared(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
			continue
		}
		for _, gid := range gids {
			txid, _, ok := ParseGID(gid)
			if !ok {
				continue
			}
			commit := log.Committed(txid)
			if err := s.Finish(ctx, gid, commit); err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %s: %w", i, gid, err))
				continue
			}
			if commit {
				committed++
			} else {
				rolledBack++
			}
		}
	}
	if len(errs) == 0 {
		// Every shard answered: decisions with no prepared transaction
		// left anywhere are finished.
		log.mu.Lock()
		var done []string
		for txid := range log.committed {
			done = append(done, txid)
		}
		log.mu.Unlock()
		for _, txid := range done {
			log.Done(txid)
		}
		if err := log.Compact(); err != nil {
			errs = append(errs, err)
		}
	}
	return committed, rolledBack, errors.Join(errs...)
}
