package proxy

import (
	"testing"

	"github.com/shardgate/shardgate/frontend"
)

// TestAdminClientStates keeps the state names that AdminView hands to
// package admin in step with what admin's SHOW LISTS counts ("active",
// "waiting": admin.clientActive and admin.clientWaiting).
func TestAdminClientStates(t *testing.T) {
	for s, want := range map[frontend.ClientState]string{frontend.ClientActive: "active", frontend.ClientWaiting: "waiting"} {
		if got := s.String(); got != want {
			t.Errorf("frontend.ClientState %d is %q; admin counts %q", s, got, want)
		}
	}
}
