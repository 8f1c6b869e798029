package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The cutover's pause as the operator sees it: the metric
// shardgate_reshard_cutover_pause_seconds on each proxy, SHOW TASKS, and
// in a cluster SHOW CUTOVERS (each proxy's own pause). TestReshardCutover
// and TestClusterCutover call these checks.

// cutoverPauseMetric returns the count and sum (seconds) of
// shardgate_reshard_cutover_pause_seconds{database=db,outcome=outcome}
// scraped from the metrics endpoint at addr; 0, 0 when there is no such
// series.
func cutoverPauseMetric(t testing.TB, addr, db, outcome string) (uint64, float64) {
	t.Helper()
	mfs := scrapeMetrics(t, &operated{MetricsAddr: addr})
	for _, m := range mfs["shardgate_reshard_cutover_pause_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["database"] == db && labels["outcome"] == outcome {
			return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
		}
	}
	return 0, 0
}

// checkCutoverPauseMetric checks that the proxy at addr observed exactly
// want cutover pauses of db with outcome, summing to more than zero and
// less than want × limit, and returns the sum.
func checkCutoverPauseMetric(t testing.TB, addr, db, outcome string, want uint64, limit time.Duration) time.Duration {
	t.Helper()
	n, sum := cutoverPauseMetric(t, addr, db, outcome)
	total := time.Duration(sum * float64(time.Second))
	if n != want || total <= 0 || total >= time.Duration(want)*limit {
		t.Fatalf("proxy %s: shardgate_reshard_cutover_pause_seconds{database=%q,outcome=%q}: count %d sum %v, want count %d and 0 < sum < %v",
			addr, db, outcome, n, total, want, time.Duration(want)*limit)
	}
	return total
}

// taskPause returns the pause column of task id in SHOW TASKS on adm.
func taskPause(t testing.TB, adm *pgx.Conn, id string) time.Duration {
	t.Helper()
	tb, err := adminPgx(adm, "SHOW TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if tb.find(t, map[string]string{"id": id}) == nil {
		return 0
	}
	return time.Duration(tb.num(t, map[string]string{"id": id}, "pause")) * time.Microsecond
}

// cutoverPause is one row of SHOW CUTOVERS.
type cutoverPause struct {
	task, role, outcome string
	pause               time.Duration
}

// cutoverPauses returns SHOW CUTOVERS's rows for database db, by proxy.
func cutoverPauses(t testing.TB, adm *pgx.Conn, db string) map[string]cutoverPause {
	t.Helper()
	tb, err := adminPgx(adm, "SHOW CUTOVERS")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cutoverPause{}
	for _, r := range tb.rows {
		if r[tb.col(t, "database")] != db {
			continue
		}
		us, err := strconv.ParseInt(r[tb.col(t, "pause")], 10, 64)
		if err != nil {
			t.Fatalf("SHOW CUTOVERS: pause %q: %v", r[tb.col(t, "pause")], err)
		}
		out[r[tb.col(t, "proxy")]] = cutoverPause{task: r[tb.col(t, "task")], role: r[tb.col(t, "role")],
			outcome: r[tb.col(t, "outcome")], pause: time.Duration(us) * time.Microsecond}
	}
	return out
}
