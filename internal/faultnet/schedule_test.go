package faultnet

import (
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     Options
		kinds map[Kind]bool // the kinds allowed
	}{
		{"shards only", Options{Run: 30 * time.Second, Shards: 2},
			map[Kind]bool{CutShard: true, BlackholeShard: true, DelayShard: true, RefuseShard: true}},
		{"shards and a proxy", Options{Run: 30 * time.Second, Shards: 3, Proxies: []int{1}, PostgresRestarts: 1},
			map[Kind]bool{CutShard: true, BlackholeShard: true, DelayShard: true, RefuseShard: true, StopProxy: true, KillProxy: true, RestartPostgres: true}},
		{"proxies only", Options{Run: 10 * time.Second, Proxies: []int{0, 2}, MinGap: 50 * time.Millisecond, MaxGap: 100 * time.Millisecond},
			map[Kind]bool{StopProxy: true, KillProxy: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 50; seed++ {
				s := Plan(seed, tc.o)
				if again := Plan(seed, tc.o); s.String() != again.String() {
					t.Fatalf("seed %d: two plans differ:\n%s\n%s", seed, s, again)
				}
				checkSchedule(t, seed, tc.o, tc.kinds, s)
			}
			if Plan(1, tc.o).String() == Plan(2, tc.o).String() {
				t.Fatal("seeds 1 and 2 give the same schedule")
			}
		})
	}
}

func checkSchedule(t *testing.T, seed uint64, o Options, kinds map[Kind]bool, s Schedule) {
	t.Helper()
	minGap, maxGap := o.MinGap, o.MaxGap
	if minGap == 0 {
		minGap, maxGap = 200*time.Millisecond, 800*time.Millisecond
	}
	if want := int(o.Run / maxGap); len(s) < want {
		t.Fatalf("seed %d: %d events in %v, want at least %d", seed, len(s), o.Run, want)
	}
	end := map[[2]int]time.Duration{}
	restarts := 0
	prev := time.Duration(0)
	for _, e := range s {
		if gap := e.At - prev; gap < minGap || gap > maxGap || e.At >= o.Run {
			t.Fatalf("seed %d: event %v after a gap of %v", seed, e, gap)
		}
		prev = e.At
		if !kinds[e.Kind] {
			t.Fatalf("seed %d: event %v of a kind not allowed", seed, e)
		}
		switch e.Kind {
		case StopProxy, KillProxy:
			if !contains(o.Proxies, e.Target) {
				t.Fatalf("seed %d: event %v on a proxy not in %v", seed, e, o.Proxies)
			}
		case RestartPostgres:
			restarts++
			fallthrough
		default:
			if e.Target < 0 || e.Target >= o.Shards {
				t.Fatalf("seed %d: event %v on a shard out of range", seed, e)
			}
		}
		if e.Kind == BlackholeShard && (e.Dir < ToTarget || e.Dir > Both) {
			t.Fatalf("seed %d: event %v without a direction", seed, e)
		}
		if e.For > 0 {
			key := [2]int{int(e.Kind), e.Target}
			if end[key] > e.At {
				t.Fatalf("seed %d: event %v overlaps the previous one of its kind", seed, e)
			}
			end[key] = e.At + e.For
		}
	}
	if restarts > o.PostgresRestarts {
		t.Fatalf("seed %d: %d PostgreSQL restarts, at most %d allowed", seed, restarts, o.PostgresRestarts)
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func TestPlanNothingAllowed(t *testing.T) {
	if s := Plan(1, Options{Run: time.Second}); len(s) != 0 {
		t.Fatalf("a plan with no shards, proxies or restarts: %v", s)
	}
}

func TestEventString(t *testing.T) {
	for _, tc := range []struct {
		e    Event
		want string
	}{
		{Event{At: 1500 * time.Millisecond, Kind: CutShard, Target: 1}, "1.5s cut-shard 1"},
		{Event{At: time.Second, Kind: BlackholeShard, Dir: FromTarget, For: 300 * time.Millisecond}, "1s blackhole-shard 0 from-target for 300ms"},
		{Event{At: time.Second, Kind: DelayShard, Latency: 20 * time.Millisecond, For: time.Second}, "1s delay-shard 0 by 20ms for 1s"},
		{Event{At: time.Second, Kind: StopProxy, Target: 1, For: time.Second}, "1s stop-proxy 1 for 1s"},
		{Event{At: time.Second, Kind: KillProxy, Target: 1}, "1s kill-proxy 1"},
		{Event{At: time.Second, Kind: RestartPostgres, Target: 1}, "1s restart-postgres 1"},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
