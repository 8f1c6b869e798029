package faultnet

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind is what a fault Event does.
type Kind int

const (
	// CutShard resets every connection of shard Target's relay.
	CutShard Kind = iota
	// BlackholeShard drops the bytes of shard Target's relay in direction
	// Dir for For, then cuts the connections that lost bytes.
	BlackholeShard
	// DelayShard adds Latency to both directions of shard Target's relay
	// for For.
	DelayShard
	// RefuseShard resets new connections to shard Target for For.
	RefuseShard
	// StopProxy stops proxy Target (SIGSTOP) for For, then continues it
	// (SIGCONT).
	StopProxy
	// KillProxy kills proxy Target (SIGKILL) and starts it again.
	KillProxy
	// RestartPostgres kills the PostgreSQL server of shard Target
	// (SIGKILL) and restarts it from its data directory.
	RestartPostgres
	numKinds
)

func (k Kind) String() string {
	switch k {
	case CutShard:
		return "cut-shard"
	case BlackholeShard:
		return "blackhole-shard"
	case DelayShard:
		return "delay-shard"
	case RefuseShard:
		return "refuse-shard"
	case StopProxy:
		return "stop-proxy"
	case KillProxy:
		return "kill-proxy"
	case RestartPostgres:
		return "restart-postgres"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Event is one fault, At after the start of the run.
type Event struct {
	At      time.Duration
	Kind    Kind
	Target  int           // the shard or proxy index
	Dir     Direction     // BlackholeShard
	For     time.Duration // how long the fault lasts (not CutShard, KillProxy, RestartPostgres)
	Latency time.Duration // DelayShard
}

func (e Event) String() string {
	at := e.At.Round(time.Millisecond)
	switch e.Kind {
	case CutShard:
		return fmt.Sprintf("%v %v %d", at, e.Kind, e.Target)
	case BlackholeShard:
		return fmt.Sprintf("%v %v %d %v for %v", at, e.Kind, e.Target, e.Dir, e.For)
	case DelayShard:
		return fmt.Sprintf("%v %v %d by %v for %v", at, e.Kind, e.Target, e.Latency, e.For)
	case RefuseShard, StopProxy:
		return fmt.Sprintf("%v %v %d for %v", at, e.Kind, e.Target, e.For)
	case KillProxy, RestartPostgres:
		return fmt.Sprintf("%v %v %d", at, e.Kind, e.Target)
	}
	return fmt.Sprintf("%v %v", at, e.Kind)
}

// Options shape a Schedule.
type Options struct {
	Run     time.Duration // faults start within the run
	Shards  int           // shard relays, numbered from 0, each to a PostgreSQL server of its own
	Proxies []int         // the proxies that may be stopped or killed; none: no proxy faults
	// PostgresRestarts is the most RestartPostgres events in a run
	// (0: none).
	PostgresRestarts int
	MinGap, MaxGap   time.Duration // between two events; 0: 200 ms and 800 ms
}

// Schedule is the fault events of one run, in the order of their At.
type Schedule []Event

func (s Schedule) String() string {
	var b strings.Builder
	for _, e := range s {
		fmt.Fprintln(&b, e)
	}
	return b.String()
}

// Plan returns the schedule that seed gives under o: an event every
// MinGap to MaxGap, its kind and target drawn from a PCG seeded by seed.
// A fault that lasts is never drawn for a shard or proxy still under a
// fault of the same kind, so that lifting one never ends another.
func Plan(seed uint64, o Options) Schedule {
	if o.MinGap <= 0 {
		o.MinGap = 200 * time.Millisecond
	}
	if o.MaxGap < o.MinGap {
		o.MaxGap = max(o.MinGap, 800*time.Millisecond)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := planner{o: o, rng: rng, busy: map[[2]int]time.Duration{}}
	if p.total() == 0 {
		return nil
	}
	var s Schedule
	for at := p.gap(); at < o.Run; at += p.gap() {
		s = append(s, p.event(at))
	}
	return s
}

type planner struct {
	o        Options
	rng      *rand.Rand
	busy     map[[2]int]time.Duration // (kind, target) → end of its fault
	restarts int
}

func (p *planner) gap() time.Duration {
	return p.o.MinGap + time.Duration(p.rng.Int64N(int64(p.o.MaxGap-p.o.MinGap)+1))
}

// ms returns a duration of lo to hi milliseconds.
func (p *planner) ms(lo, hi int) time.Duration {
	return time.Duration(lo+p.rng.IntN(hi-lo+1)) * time.Millisecond
}

// weights of each kind, in Kind order.
var weights = [numKinds]int{CutShard: 4, BlackholeShard: 2, DelayShard: 2, RefuseShard: 1, StopProxy: 2, KillProxy: 2, RestartPostgres: 1}

func (p *planner) event(at time.Duration) Event {
	for {
		e := p.draw(at)
		if e.For > 0 {
			key := [2]int{int(e.Kind), e.Target}
			if p.busy[key] > at {
				continue
			}
			p.busy[key] = at + e.For
		}
		if e.Kind == RestartPostgres {
			p.restarts++
		}
		return e
	}
}

// draw draws a kind allowed by the options and its parameters.
func (p *planner) draw(at time.Duration) Event {
	n := p.rng.IntN(p.total())
	k := CutShard
	for ; ; k++ {
		if !p.allowed(k) {
			continue
		}
		if n < weights[k] {
			break
		}
		n -= weights[k]
	}
	e := Event{At: at, Kind: k}
	switch k {
	case CutShard, BlackholeShard, DelayShard, RefuseShard, RestartPostgres:
		e.Target = p.rng.IntN(p.o.Shards)
	case StopProxy, KillProxy:
		e.Target = p.o.Proxies[p.rng.IntN(len(p.o.Proxies))]
	}
	switch k {
	case BlackholeShard:
		e.Dir = Direction(1 + p.rng.IntN(3))
		e.For = p.ms(100, 500)
	case DelayShard:
		e.Latency = p.ms(5, 60)
		e.For = p.ms(200, 1000)
	case RefuseShard:
		e.For = p.ms(100, 600)
	case StopProxy:
		e.For = p.ms(300, 1500)
	}
	return e
}

// total is the sum of the weights of the kinds allowed now.
func (p *planner) total() int {
	total := 0
	for k, w := range weights {
		if p.allowed(Kind(k)) {
			total += w
		}
	}
	return total
}

func (p *planner) allowed(k Kind) bool {
	switch k {
	case CutShard, BlackholeShard, DelayShard, RefuseShard:
		return p.o.Shards > 0
	case StopProxy, KillProxy:
		return len(p.o.Proxies) > 0
	case RestartPostgres:
		return p.restarts < p.o.PostgresRestarts && p.o.Shards > 0
	}
	return false
}
