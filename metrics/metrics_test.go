package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardgate/shardgate/wire"
)

func TestMetricsHistogram(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{100 * time.Microsecond, 500 * time.Microsecond, 3 * time.Millisecond, time.Minute} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if s.Count != 4 {
		t.Fatalf("count %d", s.Count)
	}
	want := map[float64]uint64{0.0005: 2, 0.001: 2, 0.0025: 2, 0.005: 3, 10: 3}
	for ub, n := range want {
		if s.Buckets[ub] != n {
			t.Errorf("bucket %g = %d, want %d", ub, s.Buckets[ub], n)
		}
	}
	if sum := 60.0036; s.Sum < sum-1e-9 || s.Sum > sum+1e-9 {
		t.Errorf("sum %g, want %g", s.Sum, sum)
	}
}

func TestMetricsErrorCounts(t *testing.T) {
	var e ErrorCounts
	for _, code := range []string{wire.SyntaxError, wire.UndefinedTable, wire.UniqueViolation, "ZZ999", "", wire.AdminShutdown} {
		e.Add(code)
	}
	got := map[string]uint64{}
	e.Each(func(class string, n uint64) { got[class] = n })
	want := map[string]uint64{"42": 2, "23": 1, "57": 1, "other": 2}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("class %s = %d, want %d", k, got[k], v)
		}
	}
	if e.Total() != 6 {
		t.Errorf("total %d", e.Total())
	}
}

func BenchmarkObserve(b *testing.B) {
	var h Histogram
	var e ErrorCounts
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Observe(time.Duration(i%20000) * time.Microsecond)
		e.Add(wire.SerializationFailure)
	}
}

// fakeSource is a Source with fixed numbers.
type fakeSource struct {
	mu     sync.Mutex
	health error
	errs   ErrorCounts
	query  Histogram
	xact   Histogram
	wait   Histogram
}

func (f *fakeSource) MetricsSample(ctx context.Context) Sample {
	return Sample{
		Pools: []PoolSample{{
			Database: "app", User: "app", Shard: 0, Role: "primary",
			Size: 10, ClientsActive: 2, ClientsWaiting: 1, ServersActive: 2, ServersIdle: 3,
			MaxWait: 1500 * time.Millisecond, Transactions: 7, Queries: 9,
			Errors: &f.errs, QueryTime: &f.query, XactTime: &f.xact, WaitTime: &f.wait,
		}},
		Databases: []DatabaseSample{{Name: "app", Paused: true, Waiting: 4}},
		Shards: []ShardSample{
			{Database: "app", Shard: 0, Role: "primary", Healthy: true},
			{Database: "app", Shard: 0, Role: "replica", Healthy: true},
			{Database: "app", Shard: 0, Role: "replica", Healthy: false},
		},
		Clients: map[string]int{"idle": 5, "active": 2},
		Loop:    LoopSample{Clients: 6, Handoffs: 11, Parked: 3},
	}
}

func (f *fakeSource) Health(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.health
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// value returns the value of the sample of family name whose labels
// include want.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range mf.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no %s with labels %v", name, want)
	return 0
}

func TestMetricsEndpoint(t *testing.T) {
	src := &fakeSource{}
	src.errs.Add(wire.SyntaxError)
	src.errs.Add(wire.UndefinedTable)
	src.query.Observe(2 * time.Millisecond)
	m := New(src)
	m.Reloaded(nil)
	m.Reloaded(errors.New("bad file"))
	m.ObserveCutoverPause("app", "done", 250*time.Millisecond)
	m.ObserveCutoverPause("app", "aborted", 3*time.Second)
	m.ObserveCutoverPause("app", "done", 50*time.Millisecond)
	srv, err := m.Listen("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	base := "http://" + srv.Addr()

	mfs := scrape(t, base+"/metrics")
	pool := map[string]string{"database": "app", "user": "app", "shard": "0", "role": "primary"}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"shardgate_pool_clients_active", pool, 2},
		{"shardgate_pool_clients_waiting", pool, 1},
		{"shardgate_pool_servers_idle", pool, 3},
		{"shardgate_pool_size", pool, 10},
		{"shardgate_pool_max_wait_seconds", pool, 1.5},
		{"shardgate_pool_transactions_total", pool, 7},
		{"shardgate_pool_queries_total", pool, 9},
		{"shardgate_pool_errors_total", map[string]string{"class": "42"}, 2},
		{"shardgate_pool_query_duration_seconds", pool, 1},
		{"shardgate_database_paused", map[string]string{"database": "app"}, 1},
		{"shardgate_database_maintenance", map[string]string{"database": "app"}, 0},
		{"shardgate_database_clients_waiting", map[string]string{"database": "app"}, 4},
		{"shardgate_shard_up", map[string]string{"role": "primary"}, 1},
		{"shardgate_shard_up", map[string]string{"role": "replica"}, 1},
		{"shardgate_clients", map[string]string{"state": "idle"}, 5},
		{"shardgate_event_loop_clients", nil, 6},
		{"shardgate_event_loop_handoffs_total", nil, 11},
		{"shardgate_clients_parked", nil, 3},
		{"shardgate_reloads_total", map[string]string{"result": "success"}, 1},
		{"shardgate_reloads_total", map[string]string{"result": "failure"}, 1},
		{"shardgate_last_reload_success", nil, 0},
		{"shardgate_reshard_cutover_pause_seconds", map[string]string{"database": "app", "outcome": "done"}, 2},
		{"shardgate_reshard_cutover_pause_seconds", map[string]string{"database": "app", "outcome": "aborted"}, 1},
	}
	for _, c := range checks {
		if got := value(t, mfs, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
	for _, pm := range mfs["shardgate_reshard_cutover_pause_seconds"].GetMetric() {
		if pm.GetLabel()[1].GetValue() != "done" { // labels sorted: database, outcome
			continue
		}
		if sum := pm.GetHistogram().GetSampleSum(); sum < 0.3-1e-9 || sum > 0.3+1e-9 {
			t.Errorf("cutover pauses (done) sum to %g s, want 0.3", sum)
		}
	}
	if mfs["go_goroutines"] == nil {
		t.Error("no Go runtime metrics")
	}

	get := func() (int, string) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	src.mu.Lock()
	src.health = errors.New("database \"app\": no shard is healthy")
	src.mu.Unlock()
	if code, body := get(); code != 503 || !strings.Contains(body, "no shard is healthy") {
		t.Fatalf("healthz: %d %q", code, body)
	}
}

// TestMetricsDashboard checks that every metric the example Grafana
// dashboard queries exists.
func TestMetricsDashboard(t *testing.T) {
	src := &fakeSource{}
	src.errs.Add(wire.SerializationFailure)
	mfs, err := New(src).Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	b, err := os.ReadFile("../examples/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`shardgate_[a-z_]+`).FindAllString(string(b), -1)
	if len(names) < 10 {
		t.Fatalf("only %d metric references in the dashboard", len(names))
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if !have[base] {
			t.Errorf("the dashboard queries %s, which is not exported", n)
		}
	}
}
