package frontend

import (
	"testing"
	"unsafe"
)

// TestClientSizeClass: the client struct stays in the 704-byte size
// class of the Go allocator. Thousands of idle clients park with nothing
// but their struct and socket (park.go), so one field more that crosses
// into the next class (768 bytes) costs every parked client 64 bytes:
// keep small fields together (no padding) and sharded-only state in
// shardedState. An object over 512 bytes that holds pointers carries an
// 8-byte type header in its slot (Go 1.22 and later): a 768-byte struct
// took an 896-byte slot.
//
// The client's queue (qBuf, clientQueue reqs) is made at login and at each
// wake and dropped at each park: in the client's size class, the queues of
// a login burst would leave the spans of the clients that stay half empty
// (a heap of 2.7 kB per parked client against 1.6 kB live, measured). It
// stays in the 640-byte class.
func TestClientSizeClass(t *testing.T) {
	const mallocHeader = 8
	if n := unsafe.Sizeof(client{}) + mallocHeader; n > 704 || n <= 640 {
		t.Errorf("client is %d bytes with its malloc header, not in the 704-byte size class", n)
	}
	if n := clientQueue*unsafe.Sizeof(req{}) + mallocHeader; n > 640 {
		t.Errorf("the client's queue is %d bytes with its malloc header, over the 640-byte size class", n)
	}
}

// TestShedDropsShardedSpares: a parked sharded client keeps neither the
// batch buffer nor the spare portal it holds for its next batch
// (sharded_ext.go), so parking costs what it did before they existed.
func TestShedDropsShardedSpares(t *testing.T) {
	c := &client{shardedState: &shardedState{}}
	c.batchBuf = make([]byte, 0, batchKeep)
	c.sparePortal = &sPortal{}
	c.shed()
	if c.batchBuf != nil || c.sparePortal != nil {
		t.Errorf("after shed: batch buffer %d bytes, spare portal %v; want neither", cap(c.batchBuf), c.sparePortal != nil)
	}
}
