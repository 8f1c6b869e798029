package executor

import (
	"context"
	"path/filepath"
	"testing"
)

type fakeStore struct {
	gids     []string
	finished map[string]bool
}

func (f *fakeStore) Prepared(context.Context) ([]string, error) { return f.gids, nil }
func (f *fakeStore) Finish(_ context.Context, gid string, commit bool) error {
	f.finished[gid] = commit
	return nil
}

func TestDecisionLogRecovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "2pc.log")
	l, err := OpenDecisionLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit("a1"); err != nil {
		t.Fatal(err)
	}
	l.Commit("a2")
	l.Done("a2")
	l.Close()

	l, err = OpenDecisionLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Committed("a1") || l.Committed("a2") || l.Committed("b") {
		t.Fatalf("reloaded decisions wrong: %v", l.committed)
	}
	s0 := &fakeStore{gids: []string{GID("a1", 0), GID("b", 0), "foreign"}, finished: map[string]bool{}}
	s1 := &fakeStore{gids: []string{GID("a1", 1)}, finished: map[string]bool{}}
	c, r, err := Recover(context.Background(), l, []PreparedStore{s0, s1})
	if err != nil {
		t.Fatal(err)
	}
	if c != 2 || r != 1 {
		t.Fatalf("committed %d rolled back %d", c, r)
	}
	if !s0.finished[GID("a1", 0)] || s0.finished[GID("b", 0)] || !s1.finished[GID("a1", 1)] {
		t.Fatalf("finished %v %v", s0.finished, s1.finished)
	}
	if _, ok := s0.finished["foreign"]; ok {
		t.Fatal("touched a foreign prepared transaction")
	}
	if l.Committed("a1") {
		t.Fatal("decision kept after recovery finished it")
	}
	if txid, shard, ok := ParseGID(GID("x:y", 3)); !ok || txid != "x:y" || shard != 3 {
		t.Fatalf("ParseGID: %q %d %v", txid, shard, ok)
	}
}
