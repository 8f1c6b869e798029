//go:build linux

package frontend

import (
	"net"
	"testing"
)

// TestConnAddrs: an fdConn gives back the addresses of the conn it was
// made from, TCP ones kept in place and the rest as they were.
func TestConnAddrs(t *testing.T) {
	tests := []struct {
		name          string
		local, remote net.Addr
		inPlace       bool
	}{
		{"ipv4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 6432}, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3).To4(), Port: 50123}, true},
		{"ipv4 in ipv6 form", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6432}, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 1}, true},
		{"ipv6", &net.TCPAddr{IP: net.ParseIP("::1"), Port: 6432}, &net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 65535}, true},
		{"ipv6 zone", &net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 6432, Zone: "eth0"}, &net.TCPAddr{IP: net.ParseIP("fe80::2"), Port: 9, Zone: "eth0"}, false},
		{"unix", &net.UnixAddr{Name: "/tmp/.s.PGSQL.6432", Net: "unix"}, &net.UnixAddr{Net: "unix"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a connAddrs
			a.set(tc.local, tc.remote)
			if got := a.other == nil; got != tc.inPlace {
				t.Errorf("kept in place: %v, want %v", got, tc.inPlace)
			}
			for i, want := range []net.Addr{tc.local, tc.remote} {
				got := a.addr(i)
				if got.Network() != want.Network() || got.String() != want.String() {
					t.Errorf("address %d: %s %q, want %s %q", i, got.Network(), got, want.Network(), want)
				}
			}
		})
	}
}
