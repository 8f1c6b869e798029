package frontend

import (
	"testing"
	"unsafe"
)

// TestClientSizeClass: the client struct stays in the 768-byte size
// class of the Go allocator. Thousands of idle clients park with nothing
// but their struct and socket (park.go), so one field more that crosses
// into the next class (896 bytes) costs every parked client 128 bytes:
// keep small fields together (no padding) and sharded-only state in
// shardedState.
func TestClientSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(client{}); n > 768 {
		t.Fatalf("client is %d bytes, over the 768-byte size class", n)
	}
}
