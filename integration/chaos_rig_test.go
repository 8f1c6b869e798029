package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/faultnet"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// This file is the chaos rig that chaos_*_test.go scenarios share: the
// seeds of a run (CHAOS_SEED, CHAOS_SEEDS), its length (CHAOS_SECONDS),
// and chaosRig, which plays a faultnet.Schedule on shard relays, proxy
// processes and the PostgreSQL servers.

// chaosSeeds is the seeds to run: CHAOS_SEED alone (a replay), or
// CHAOS_SEEDS (default 1) random ones.
func chaosSeeds(t *testing.T) []uint64 {
	t.Helper()
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		return []uint64{seed}
	}
	n := chaosEnvInt(t, "CHAOS_SEEDS", 1)
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = rand.Uint64()
	}
	return seeds
}

// chaosEnvInt is the integer in environment variable name, or def.
func chaosEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, s)
	}
	return n
}

// chaosReplay logs, when t fails, the command that replays its seed.
func chaosReplay(t *testing.T, test string, seed uint64, opts faultnet.Options) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay: CHAOS_SEED=%d CHAOS_SECONDS=%d CHAOS_PG_RESTARTS=%d go test -count=1 -run '%s' ./integration/",
				seed, int(opts.Run/time.Second), opts.PostgresRestarts, test)
		}
	})
}

// chaosProxyProc is one proxy process of a run, which the schedule may
// stop, kill and start again on the same address and config.
type chaosProxyProc struct {
	bin, config, addr string

	mu sync.Mutex // guards the following
	p  *proxyProcess
}

func (c *chaosProxyProc) start(t *testing.T) {
	t.Helper()
	p := startProxyProcess(t, c.bin, c.config, c.addr)
	c.mu.Lock()
	c.p = p
	c.mu.Unlock()
}

func (c *chaosProxyProc) current() *proxyProcess {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p
}

func (c *chaosProxyProc) signal(sig syscall.Signal) {
	_ = c.current().cmd.Process.Signal(sig) // the process may have died: nothing to do
}

// url is the app user's URL through this proxy.
func (c *chaosProxyProc) url() string {
	return fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, c.addr)
}

// exited reports whether the current process ended (other than by the
// rig's SIGKILL, which is followed by a start).
func (c *chaosProxyProc) exited() bool {
	select {
	case err := <-c.current().done:
		c.current().done <- err
		return true
	default:
		return false
	}
}

// startServers starts one PostgreSQL server per shard with opts, and a
// relay in front of each, into r.
func (r *chaosRig) startServers(t *testing.T, shards int, opts pgtest.Options) {
	t.Helper()
	for range shards {
		pg := pgtest.New(t, opts)
		rl, err := faultnet.Listen(fmt.Sprintf("%s:%d", pg.Host, pg.Port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rl.Close() })
		r.pgs = append(r.pgs, pg)
		r.relays = append(r.relays, rl)
	}
}

// dsn returns the connection string of database db, which is on the
// server of its index in dbs.
func (r *chaosRig) dsn(t *testing.T, dbs []string) func(db string) string {
	return func(db string) string {
		i := slices.Index(dbs, db)
		if i < 0 {
			t.Fatalf("chaos: database %s is on no server of the rig", db)
		}
		return r.pgs[i].DSN(db)
	}
}

// chaosRig plays a schedule on relays (one per shard), proxies and the
// PostgreSQL servers behind the relays (one per shard: a restart of one
// leaves the others up).
type chaosRig struct {
	relays  []*faultnet.Relay
	proxies []*chaosProxyProc
	pgs     []*pgtest.Cluster // by shard, as relays

	mu     sync.Mutex // guards the following
	timers []*time.Timer
}

// play runs the events of s at their times, from the test goroutine (so
// that a proxy restart may fail the test), and lifts every fault at the
// end. Faults that last are lifted by timers; every lift restores the
// healthy state, so their order does not matter.
func (r *chaosRig) play(t *testing.T, s faultnet.Schedule, run time.Duration) {
	t.Helper()
	start := time.Now()
	for _, e := range s {
		time.Sleep(time.Until(start.Add(e.At))) // the schedule's clock, not a synchronisation
		t.Logf("chaos: %v", e)
		r.apply(t, e)
	}
	time.Sleep(time.Until(start.Add(run)))
	r.heal()
}

// after runs f after d, unless heal comes first.
func (r *chaosRig) after(d time.Duration, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timers = append(r.timers, time.AfterFunc(d, f))
}

func (r *chaosRig) apply(t *testing.T, e faultnet.Event) {
	t.Helper()
	switch e.Kind {
	case faultnet.CutShard:
		r.relays[e.Target].Cut()
	case faultnet.BlackholeShard:
		rl := r.relays[e.Target]
		rl.SetBlackhole(e.Dir, true)
		r.after(e.For, func() { rl.SetBlackhole(e.Dir, false) })
	case faultnet.DelayShard:
		rl := r.relays[e.Target]
		rl.SetDelay(faultnet.Both, e.Latency)
		r.after(e.For, func() { rl.SetDelay(faultnet.Both, 0) })
	case faultnet.RefuseShard:
		rl := r.relays[e.Target]
		rl.SetRefuse(true)
		r.after(e.For, func() { rl.SetRefuse(false) })
	case faultnet.StopProxy:
		p := r.proxies[e.Target]
		p.signal(syscall.SIGSTOP)
		r.after(e.For, func() { p.signal(syscall.SIGCONT) })
	case faultnet.KillProxy:
		p := r.proxies[e.Target]
		cur := p.current()
		cur.cmd.Process.Kill()
		<-cur.done
		p.start(t)
	case faultnet.RestartPostgres:
		pg := r.pgs[e.Target]
		if err := pg.Kill(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := pg.Restart(ctx); err != nil {
			t.Fatalf("restart PostgreSQL: %v", err)
		}
	default:
		t.Fatalf("chaos: event %v of an unknown kind", e)
	}
}

// heal stops the pending lifts and lifts every fault itself: relays
// healed, every proxy running.
func (r *chaosRig) heal() {
	r.mu.Lock()
	for _, tm := range r.timers {
		tm.Stop()
	}
	r.timers = nil
	r.mu.Unlock()
	for _, rl := range r.relays {
		rl.Heal()
	}
	for _, p := range r.proxies {
		p.signal(syscall.SIGCONT)
	}
}
