package replication

import (
	"net"
	"testing"
)

// TestCoalescingConnShort: a read is short, so that the next one waits,
// only when it brought less than coalesceBytes and did not fill its
// buffer.
func TestCoalescingConnShort(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sent, buf int
		short     bool
	}{
		{name: "one small message", sent: 100, buf: 8192, short: true},
		{name: "a full small buffer", sent: 100, buf: 100, short: false},
		{name: "a large read", sent: 5000, buf: 8192, short: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			go server.Write(make([]byte, tc.sent))
			c := &coalescingConn{Conn: client}
			n, err := c.Read(make([]byte, tc.buf))
			if err != nil || n != min(tc.sent, tc.buf) {
				t.Fatalf("read %d, %v", n, err)
			}
			if c.short != tc.short {
				t.Errorf("short = %v, want %v", c.short, tc.short)
			}
		})
	}
}
