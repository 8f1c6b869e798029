package integration

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/metrics"
)

// TestRoutedStatementsMetric: statements of a sharded database are counted
// by route (direct, multi, all) and exported as
// shardgate_routed_statements_total.
func TestRoutedStatementsMetric(t *testing.T) {
	e := newShardedEnv(t, 3)
	ctx := context.Background()
	pc := connect(t, e.p.AppURL("app"))
	mustExec(t, pc, "SELECT * FROM accounts WHERE id = 1")            // direct
	mustExec(t, pc, "SELECT * FROM accounts WHERE id = $1", int64(2)) // direct, extended protocol
	mustExec(t, pc, "SELECT count(*) FROM accounts")                  // all
	// Two keys on two different shards: multi.
	a, b := int64(1), int64(2)
	for shardOf(t, b, 3) == shardOf(t, a, 3) {
		b++
	}
	mustExec(t, pc, "SELECT * FROM accounts WHERE id IN ($1, $2)", a, b)

	var got *metrics.RouteSample
	for _, r := range e.p.Listener.MetricsSample(ctx).Routes {
		if r.Database == "app" {
			r := r
			got = &r
		}
	}
	if got == nil || got.Direct != 2 || got.All != 1 || got.Multi != 1 {
		t.Fatalf("route counters %+v, want direct 2, multi 1, all 1", got)
	}
	srv := httptest.NewServer(metrics.New(e.p.Listener).Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, p := range e.p.Listener.MetricsSample(ctx).Pools {
		if p.Database == "app" && p.Queries > 0 && (p.BytesIn == 0 || p.BytesOut == 0) {
			t.Errorf("pool %s/%d: %d queries but %d bytes in, %d out", p.Database, p.Shard, p.Queries, p.BytesIn, p.BytesOut)
		}
	}
	if !strings.Contains(string(body), "shardgate_pool_server_received_bytes_total{") {
		t.Error("metrics lack shardgate_pool_server_received_bytes_total")
	}
	for _, want := range []string{
		`shardgate_routed_statements_total{database="app",route="direct"} 2`,
		`shardgate_routed_statements_total{database="app",route="multi"} 1`,
		`shardgate_routed_statements_total{database="app",route="all"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
