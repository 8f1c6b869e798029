package frontend

import (
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
)

// TestPoolSampleReplicaRole: replica pools of one shard get distinct role
// labels, or a scrape would see duplicate label sets.
func TestPoolSampleReplicaRole(t *testing.T) {
	var ids atomic.Uint64
	cfg := config.Pool{Size: 1}
	roles := map[string]bool{}
	for _, k := range []pool.Key{{Role: "primary"}, {Role: "replica", Replica: 0}, {Role: "replica", Replica: 1}} {
		p := pool.New(k, pool.Target{}, cfg, slog.Default(), &ids)
		roles[poolSample(p).Role] = true
		p.Close()
	}
	if len(roles) != 3 || !roles["primary"] || !roles["replica0"] || !roles["replica1"] {
		t.Fatalf("roles %v", roles)
	}
}
