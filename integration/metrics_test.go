package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardgate/shardgate/wire"
)

// httpClient makes one connection per request, so that no keep-alive
// goroutine outlives a test.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// scrapeMetrics fetches and parses /metrics.
func scrapeMetrics(t testing.TB, o *operated) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := httpClient.Get("http://" + o.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// metric returns the value of the sample of name whose labels include
// labels (a histogram's sample count), and whether there is one.
func metric(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func healthz(t testing.TB, o *operated) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + o.MetricsAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsScrape scrapes /metrics over HTTP before and after a known
// workload and checks the counters moved by exactly that workload.
func TestMetricsScrape(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	yaml := poolConfig(cl, "transaction", 4, "app")
	o := startOperated(t, yaml)
	ctx := context.Background()
	app := connect(t, o.AppURL("app"))
	mustRun(t, app, "SELECT 1") // the pool exists from here on
	pool := map[string]string{"database": "app", "user": "app", "shard": "0", "role": "primary"}
	eventually(t, 10*time.Second, "the first query to be counted", func() bool {
		v, ok := metric(scrapeMetrics(t, o), "shardgate_pool_queries_total", pool)
		return ok && v == 1
	})
	before := scrapeMetrics(t, o)

	// Without arguments pgx uses the simple protocol: one round trip per
	// statement.
	for i := 0; i < 10; i++ {
		mustRun(t, app, "SELECT 1")
	}
	mustRun(t, app, "BEGIN")
	mustRun(t, app, "SELECT 1")
	mustRun(t, app, "COMMIT")
	if _, err := app.Exec(ctx, "SELECT 1/0"); sqlstate(err) != wire.DivisionByZero {
		t.Fatalf("SELECT 1/0: %v", err)
	}
	o.rewrite(t, strings.Replace(yaml, "size: 4", "size: four", 1))
	adm := connect(t, o.AdminURL())
	if _, err := adm.Exec(ctx, "RELOAD"); sqlstate(err) != wire.ConfigFileError {
		t.Fatalf("RELOAD of a bad file: %v", err)
	}
	o.rewrite(t, yaml)
	mustRun(t, adm, "RELOAD")

	want := map[string]float64{
		"shardgate_pool_queries_total":                14,
		"shardgate_pool_transactions_total":           12,
		"shardgate_pool_checkouts_total":              12,
		"shardgate_pool_checkout_wait_seconds":        12,
		"shardgate_pool_query_duration_seconds":       14,
		"shardgate_pool_transaction_duration_seconds": 12,
	}
	// The counters move just after the client has its answer: poll.
	var after map[string]*dto.MetricFamily
	var wrong []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		after, wrong = scrapeMetrics(t, o), nil
		for name, delta := range want {
			a, ok1 := metric(after, name, pool)
			b, ok2 := metric(before, name, pool)
			if !ok1 || !ok2 || a-b != delta {
				wrong = append(wrong, fmt.Sprintf("%s went from %g to %g, want +%g", name, b, a, delta))
			}
		}
		if len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, w := range wrong {
		t.Error(w)
	}
	if a, _ := metric(after, "shardgate_pool_errors_total", map[string]string{"database": "app", "class": "22"}); a != 1 {
		t.Errorf("errors of class 22: %g, want 1", a)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"shardgate_pool_size", pool, 4},
		{"shardgate_pool_clients_waiting", pool, 0},
		{"shardgate_reloads_total", map[string]string{"result": "success"}, 1},
		{"shardgate_reloads_total", map[string]string{"result": "failure"}, 1},
		{"shardgate_last_reload_success", nil, 1},
		{"shardgate_shard_up", map[string]string{"database": "app", "shard": "0", "role": "primary"}, 1},
		{"shardgate_database_paused", map[string]string{"database": "app"}, 0},
	} {
		if v, ok := metric(after, c.name, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %g (found: %v), want %g", c.name, c.labels, v, ok, c.want)
		}
	}
	if v, ok := metric(after, "shardgate_clients", map[string]string{"state": "idle"}); !ok || v < 1 {
		t.Errorf("shardgate_clients{state=idle} = %g", v)
	}
	if v, ok := metric(after, "shardgate_pool_servers_idle", pool); !ok || v < 1 {
		t.Errorf("shardgate_pool_servers_idle = %g", v)
	}
	// The app client is served by the event loop (unless the tests turn
	// it off) or parked once idle; the admin client by a goroutine.
	loopOn := os.Getenv("SHARDGATE_TEST_EVENT_LOOP") != "0"
	eventually(t, 10*time.Second, "the app client on the loop or parked", func() bool {
		m := scrapeMetrics(t, o)
		onLoop, ok1 := metric(m, "shardgate_event_loop_clients", nil)
		parked, ok2 := metric(m, "shardgate_clients_parked", nil)
		_, ok3 := metric(m, "shardgate_event_loop_handoffs_total", nil)
		if !loopOn {
			return ok1 && ok2 && ok3 && onLoop == 0
		}
		return ok1 && ok2 && ok3 && onLoop+parked == 1
	})
	// Every metric of ours is named shardgate_*, and no label carries a
	// client address or SQL.
	for name, mf := range after {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		if !strings.HasPrefix(name, "shardgate_") {
			t.Errorf("metric %s lacks the shardgate_ prefix", name)
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				switch l.GetName() {
				case "database", "user", "shard", "role", "class", "state", "result":
				default:
					t.Errorf("metric %s has label %s", name, l.GetName())
				}
			}
		}
	}
}

// TestMetricsHealthz: /healthz is 200 while the shard answers, 503 once it
// is stopped.
func TestMetricsHealthz(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	o := startOperated(t, poolConfig(cl, "transaction", 4, "app"))
	if code, body := healthz(t, o); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("healthz with a running shard: %d %q", code, body)
	}
	if err := cl.Stop(); err != nil {
		t.Fatal(err)
	}
	var body string
	eventually(t, 10*time.Second, "healthz to report the stopped shard", func() bool {
		var code int
		code, body = healthz(t, o)
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, `database "app"`) {
		t.Fatalf("healthz body %q does not name the database", body)
	}
	v, ok := metric(scrapeMetrics(t, o), "shardgate_shard_up", map[string]string{"database": "app", "role": "primary"})
	if !ok || v != 0 {
		t.Fatalf("shardgate_shard_up = %g (found: %v), want 0", v, ok)
	}
}
