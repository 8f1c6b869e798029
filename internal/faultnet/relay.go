package faultnet

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Direction is one way of a relayed connection; the constants combine
// as a bit set.
type Direction int

const (
	// ToTarget is the bytes a client sends to the target.
	ToTarget Direction = 1 << iota
	// FromTarget is the bytes the target sends back.
	FromTarget
	// Both is both directions.
	Both = ToTarget | FromTarget
)

func (d Direction) String() string {
	switch d {
	case ToTarget:
		return "to-target"
	case FromTarget:
		return "from-target"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// directions indexes per-direction state: 0 is ToTarget, 1 FromTarget.
var directions = [2]Direction{ToTarget, FromTarget}

// Relay forwards the TCP connections it accepts to a target address and
// injects faults into them on demand.
type Relay struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every connection's pumps

	mu        sync.Mutex // guards the following
	delay     [2]time.Duration
	blackhole [2]bool
	refuse    bool
	closed    bool
	conns     map[*pair]struct{}
	accepted  int
}

// Listen starts a relay on 127.0.0.1 (a free port) that forwards to
// target (host:port).
func Listen(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultnet: listen for %s: %w", target, err)
	}
	r := &Relay{ln: ln, target: target, conns: map[*pair]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the address clients connect to.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Port is the port of Addr.
func (r *Relay) Port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// SetDelay adds latency d (0: none) to the directions in dir.
func (r *Relay) SetDelay(dir Direction, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range directions {
		if dir&x != 0 {
			r.delay[i] = d
		}
	}
}

// SetBlackhole starts or stops dropping the bytes of the directions in
// dir. Stopping it cuts the connections that lost bytes.
func (r *Relay) SetBlackhole(dir Direction, on bool) {
	r.mu.Lock()
	for i, x := range directions {
		if dir&x != 0 {
			r.blackhole[i] = on
		}
	}
	var lost []*pair
	if !r.blackhole[0] && !r.blackhole[1] {
		for p := range r.conns {
			if p.lostBytes() {
				lost = append(lost, p)
			}
		}
	}
	r.mu.Unlock()
	for _, p := range lost {
		p.cut()
	}
}

// SetRefuse starts or stops resetting new connections as they arrive.
func (r *Relay) SetRefuse(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = on
}

// Cut resets every open connection and returns how many there were.
func (r *Relay) Cut() int {
	r.mu.Lock()
	ps := make([]*pair, 0, len(r.conns))
	for p := range r.conns {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.cut()
	}
	return len(ps)
}

// Heal lifts every fault: no delay, no blackhole (cutting the
// connections that lost bytes), new connections accepted.
func (r *Relay) Heal() {
	r.SetDelay(Both, 0)
	r.SetRefuse(false)
	r.SetBlackhole(Both, false)
}

// Conns is the number of open relayed connections.
func (r *Relay) Conns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// Accepted is the number of connections relayed so far (refused ones
// not counted).
func (r *Relay) Accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted
}

// Close stops accepting, resets every connection and waits for the
// relay's goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := r.ln.Close()
	r.Cut()
	r.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("faultnet: close relay to %s: %w", r.target, err)
	}
	return nil
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.mu.Lock()
		refuse, closed := r.refuse, r.closed
		r.mu.Unlock()
		if refuse || closed {
			reset(c)
			continue
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

// serve dials the target for client c and pumps both ways until one side
// ends; then both are closed.
func (r *Relay) serve(c net.Conn) {
	defer r.wg.Done()
	u, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		reset(c)
		return
	}
	p := &pair{client: c, target: u}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		p.cut()
		return
	}
	r.conns[p] = struct{}{}
	r.accepted++
	r.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pump(p, 0, c, u) }()
	go func() { defer wg.Done(); r.pump(p, 1, u, c) }()
	wg.Wait()
	r.mu.Lock()
	delete(r.conns, p)
	r.mu.Unlock()
}

// admit returns the delay of a chunk that pump read for p in direction
// i, or drop if a blackhole swallows it. It marks p as having lost bytes
// under r.mu, so that a lift of the blackhole (SetBlackhole) either sees
// the mark and cuts p or comes before the chunk and lets it through.
func (r *Relay) admit(p *pair, i int) (delay time.Duration, drop bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blackhole[i] {
		p.lost.Store(true)
		return 0, true
	}
	return r.delay[i], false
}
