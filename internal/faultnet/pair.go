package faultnet

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pair is one relayed connection: the client's socket and the one the
// relay opened to the target.
type pair struct {
	client, target net.Conn
	lost           atomic.Bool // a blackhole dropped some of its bytes
	once           sync.Once
}

func (p *pair) lostBytes() bool { return p.lost.Load() }

// cut resets both sockets; the pumps then end on their errors.
func (p *pair) cut() {
	p.once.Do(func() {
		reset(p.client)
		reset(p.target)
	})
}

// close closes both sockets in order, after one side ended its stream:
// the bytes already written still reach the other.
func (p *pair) close() {
	p.once.Do(func() {
		_ = p.client.Close()
		_ = p.target.Close()
	})
}

// reset closes c so that its peer sees a reset (SO_LINGER 0).
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// chunk is bytes read from one side, to be written to the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst for direction i of r, applying its faults: a
// reader stamps each chunk with its due time (or drops it into a
// blackhole) and a writer writes it once due, so that a delay adds
// latency without adding up over the chunks queued behind it. When src
// ends its stream, the pair is closed once the rest is written; when
// either side fails, the pair is cut.
func (r *Relay) pump(p *pair, i int, src, dst net.Conn) {
	q := make(chan chunk, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				p.cut()
				for range q { // drain so that the reader never blocks
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if delay, drop := r.admit(p, i); !drop {
				q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			close(q)
			<-done
			if errors.Is(err, io.EOF) {
				p.close()
			} else {
				p.cut()
			}
			return
		}
	}
}
