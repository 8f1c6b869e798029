package executor

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// fakeShard is a shard's prepared transactions and commit log, as
// Resolve sees them through TwoPhaseShard.
type fakeShard struct {
	tag      uint32
	prepared map[string]time.Duration // GID → age
	xacts    map[uint64]XactStatus    // the commit log of the coordinator's xids
	coordOf  map[string]uint64        // a coordinator GID → its xid
	finished []string                 // "commit <gid>" / "rollback <gid>"
}

func (f *fakeShard) Tag() uint32 { return f.tag }

func (f *fakeShard) Prepared(context.Context) ([]Prepared, error) {
	var out []Prepared
	for gid, age := range f.prepared {
		if g, ok := ParseGID(gid); ok {
			out = append(out, Prepared{GID: g, Age: age})
		}
	}
	slices.SortFunc(out, func(a, b Prepared) int { return compareStrings(a.GID.String(), b.GID.String()) })
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (f *fakeShard) Status(_ context.Context, xid uint64) (XactStatus, error) {
	return f.xacts[xid], nil
}

func (f *fakeShard) Finish(_ context.Context, gid string, commit bool) (bool, error) {
	if _, ok := f.prepared[gid]; !ok {
		return false, nil
	}
	delete(f.prepared, gid)
	verb := "rollback "
	if commit {
		verb = "commit "
	}
	f.finished = append(f.finished, verb+gid)
	if xid, ok := f.coordOf[gid]; ok {
		f.xacts[xid] = XactAborted
		if commit {
			f.xacts[xid] = XactCommitted
		}
	}
	return true, nil
}

func TestGIDRoundTrip(t *testing.T) {
	g := GID{TxID: "0123abcd0123abcd-7", Coord: 2, Tag: 0xdeadbeef, XID: 1 << 40, Shard: 5}
	s := g.String()
	if s != "sg:0123abcd0123abcd-7:2:deadbeef:1099511627776:5" {
		t.Fatalf("GID %q", s)
	}
	if back, ok := ParseGID(s); !ok || back != g {
		t.Fatalf("ParseGID(%q) = %+v %v", s, back, ok)
	}
	for _, bad := range []string{"sg:abc-1:0", "foreign", "sg::0:0:0:0", "sg:a:0:zz:0:0", "sg:a:-1:00000000:0:0", "sg:a:0:00000000:0:0:0"} {
		if g, ok := ParseGID(bad); ok {
			t.Errorf("ParseGID(%q) = %+v, want not ours", bad, g)
		}
	}
}

// twoShards are a coordinator (shard 0) and a participant (shard 1) with
// the transactions txids prepared: each coordinator GID with xid 100+k.
func twoFakeShards(statuses map[string]XactStatus, ages map[string]time.Duration) []*fakeShard {
	s0 := &fakeShard{tag: 10, prepared: map[string]time.Duration{}, xacts: map[uint64]XactStatus{}, coordOf: map[string]uint64{}}
	s1 := &fakeShard{tag: 11, prepared: map[string]time.Duration{}, xacts: map[uint64]XactStatus{}}
	k := uint64(0)
	for _, txid := range slices.Sorted(func(yield func(string) bool) {
		for id := range statuses {
			if !yield(id) {
				return
			}
		}
	}) {
		k++
		xid := 100 + k
		st := statuses[txid]
		s0.xacts[xid] = st
		if st == XactInProgress {
			coord := GID{TxID: txid, Coord: 0, Tag: 10, Shard: 0}.String()
			s0.prepared[coord] = ages[txid]
			s0.coordOf[coord] = xid
		}
		s1.prepared[GID{TxID: txid, Coord: 0, Tag: 10, XID: xid, Shard: 1}.String()] = ages[txid]
	}
	return []*fakeShard{s0, s1}
}

func TestResolveFollowsTheCoordinator(t *testing.T) {
	shards := twoFakeShards(map[string]XactStatus{
		"committed": XactCommitted, "aborted": XactAborted, "young": XactInProgress, "old": XactInProgress, "forgotten": XactUnknown,
	}, map[string]time.Duration{"young": time.Second, "old": time.Minute})
	// A participant whose coordinator is another database's shard.
	shards[1].prepared[GID{TxID: "elsewhere", Coord: 0, Tag: 99, XID: 5, Shard: 1}.String()] = time.Hour
	res, err := Resolve(context.Background(), []TwoPhaseShard{shards[0], shards[1]}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(shards[0].finished, shards[1].finished)
	want := fmt.Sprint(
		[]string{"rollback sg:old:0:0000000a:0:0"},
		[]string{"rollback sg:aborted:0:0000000a:101:1", "commit sg:committed:0:0000000a:102:1", "rollback sg:old:0:0000000a:104:1"})
	if got != want {
		t.Fatalf("finished %s\nwant     %s", got, want)
	}
	if res.Committed != 1 || res.RolledBack != 3 {
		t.Errorf("committed %d rolled back %d, want 1 and 3", res.Committed, res.RolledBack)
	}
	var left []string
	for _, d := range res.InDoubt {
		left = append(left, fmt.Sprintf("%d %s: %s", d.Shard, d.GID.TxID, d.Status))
	}
	slices.Sort(left)
	wantLeft := []string{
		"0 young: undecided (in progress)",
		"1 elsewhere: its coordinator is not a shard of this database",
		"1 forgotten: the coordinator no longer knows its xid 103",
		"1 young: undecided (coordinator prepared)",
	}
	if fmt.Sprint(left) != fmt.Sprint(wantLeft) {
		t.Errorf("in doubt %q\nwant       %q", left, wantLeft)
	}
}

// A GID that someone else finished between the listing and Finish is
// neither committed nor rolled back by this pass.
func TestResolveFinishedMeanwhile(t *testing.T) {
	shards := twoFakeShards(map[string]XactStatus{"t": XactCommitted}, nil)
	gone := &racingShard{fakeShard: shards[1]}
	res, err := Resolve(context.Background(), []TwoPhaseShard{shards[0], gone}, time.Second)
	if err != nil || res.Committed != 0 || res.RolledBack != 0 {
		t.Fatalf("Resolve: %+v %v, want nothing done", res, err)
	}
}

// racingShard lists its transactions but finds each gone at Finish.
type racingShard struct{ *fakeShard }

func (r *racingShard) Finish(context.Context, string, bool) (bool, error) { return false, nil }
