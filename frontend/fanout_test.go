package frontend

import (
	"bytes"
	"testing"

	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// TestShardRowsMalformedReady checks that a shard's ReadyForQuery without
// its status byte breaks that server instead of panicking the client.
func TestShardRowsMalformedReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		read func(r *shardRows)
		in   []byte
	}{
		{"header", (*shardRows).header, []byte{'Z', 0, 0, 0, 4}},
		{"finish", (*shardRows).finish, append(wire.AppendCommandComplete(nil, "UPDATE 1"), 'Z', 0, 0, 0, 4)},
		{"finish, two bytes", (*shardRows).finish, []byte{'Z', 0, 0, 0, 6, 'I', 'I'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &pool.Server{R: wire.NewReader(bytes.NewReader(tc.in), 1024, 1<<20)}
			r := &shardRows{s: s}
			tc.read(r)
			if r.ioErr == nil || !s.Broken {
				t.Fatalf("ioErr %v, broken %v: want a broken server", r.ioErr, s.Broken)
			}
		})
	}
}
