package executor

import (
	"bytes"
	"io"
	"testing"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// TestShardRowsMalformedReady checks that a shard's ReadyForQuery without
// its status byte breaks that server instead of panicking the client.
func TestShardRowsMalformedReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		read func(r *ShardRows)
		in   []byte
	}{
		{"header", (*ShardRows).Header, []byte{'Z', 0, 0, 0, 4}},
		{"finish", (*ShardRows).Finish, append(wire.AppendCommandComplete(nil, "UPDATE 1"), 'Z', 0, 0, 0, 4)},
		{"finish, two bytes", (*ShardRows).Finish, []byte{'Z', 0, 0, 0, 6, 'I', 'I'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &pool.Server{R: wire.NewReader(bytes.NewReader(tc.in), 1024, 1<<20)}
			r := NewShardRows(s, io.Discard)
			tc.read(r)
			if r.IOErr() == nil || !s.Broken {
				t.Fatalf("ioErr %v, broken %v: want a broken server", r.IOErr(), s.Broken)
			}
		})
	}
}

func TestSumTags(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"UPDATE 2", "UPDATE 3"}, "UPDATE 5"},
		{[]string{"INSERT 0 1", "INSERT 0 2"}, "INSERT 0 3"},
		{[]string{"CREATE TABLE", "CREATE TABLE"}, "CREATE TABLE"},
		{nil, ""},
	} {
		if got := SumTags(tc.in); got != tc.want {
			t.Errorf("SumTags(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
