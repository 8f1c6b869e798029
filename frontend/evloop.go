//go:build linux

package frontend

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// evloop is an epoll set in which sockets wait for their next message
// without a goroutine: park registers a socket with a function to run,
// and the loop runs it on a new goroutine once the socket is readable or
// hung up, or when wake or close asks for it.
//
// The epoll instance is itself registered in Go's netpoller (an epoll
// file descriptor is pollable), so the loop goroutine sleeps like any
// goroutine waiting on a socket, and no thread is blocked in epoll_wait.
// Sockets are armed with EPOLLONESHOT: an event disarms its socket, and
// the next park re-arms it with EPOLL_CTL_MOD (one syscall per park). The
// runtime's own (edge-triggered) registration of the same socket stays in
// place; nobody waits on it while the socket is parked, and it serves the
// goroutine reading the socket after it resumed.
//
// Each park gets a token, carried in the epoll event, so that an event of
// an earlier park (a socket woken by wake, whose event fired later) never
// resumes a later one by mistake.
type evloop struct {
	ep   *os.File        // the epoll instance, non-blocking, in Go's netpoller
	epfd int             // ep's descriptor (ep.Fd would make it blocking)
	raw  syscall.RawConn // ep's, for non-blocking epoll_wait calls
	done chan struct{}   // closed when run returns

	mu sync.Mutex // guards the following
	// waiting is indexed by file descriptor (descriptors are small and
	// dense): an entry with a nil fn waits for nothing. A slice rather
	// than a map: 24 bytes a descriptor instead of a map slot and its
	// share of the map's growth, for every parked client.
	waiting []parkedFn
	n       int    // entries of waiting with a client's fn
	total   uint64 // clients' parks so far
	token   int32
	closed  bool
}

// parkedFn is what runs when a parked socket wakes.
type parkedFn struct {
	token  int32
	client bool // a parked client (counted), not a connection yet to speak
	fn     resumer
}

// parkKey names one park of one socket: its file descriptor and token.
type parkKey struct{ fd, token int32 }

func (k parkKey) pack() uint64 { return uint64(uint32(k.fd))<<32 | uint64(uint32(k.token)) }

func unpackParkKey(v uint64) parkKey {
	return parkKey{fd: int32(uint32(v >> 32)), token: int32(uint32(v))}
}

var errEvloopClosed = errors.New("evloop: closed")

// evloopEvents are the events a parked socket waits for: data, or the peer
// closing (EPOLLHUP and EPOLLERR are always reported).
const evloopEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// newEvloop creates the epoll instance and starts the loop goroutine,
// which close stops and waits for.
func newEvloop() (*evloop, error) {
	f, fd, err := newPolledEpoll("evloop")
	if err != nil {
		return nil, err
	}
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("evloop: %w", err)
	}
	e := &evloop{ep: f, epfd: fd, raw: raw, done: make(chan struct{})}
	go e.run()
	return e, nil
}

// park arms the socket of rc and runs fn.resume on a new goroutine when it
// wakes.
// armed says whether the socket was added to the set before (by an earlier
// park); park sets it. The key is also stored in last before the park can
// wake, so that last always names the latest park of the socket, even when
// fn runs and parks again before park returns. On error nothing is parked
// and fn never runs. client says whether the park is a logged-in client's:
// only those count in parked and parks, not a connection's wait for its
// first bytes (firstbytes.go).
func (e *evloop) park(rc syscall.RawConn, armed *bool, last *atomic.Uint64, fn resumer, client bool) (parkKey, error) {
	var key parkKey
	var ctlErr error
	err := rc.Control(func(fd uintptr) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed {
			ctlErr = errEvloopClosed
			return
		}
		e.token++
		key = parkKey{fd: int32(fd), token: e.token}
		// Armed under mu, which close takes before it closes the epoll
		// instance and run takes to look the event up: an event that
		// fires at once finds the entry.
		if ctlErr = e.arm(key, armed); ctlErr == nil {
			last.Store(key.pack())
			if int(key.fd) >= len(e.waiting) {
				e.waiting = append(e.waiting, make([]parkedFn, int(key.fd)+1-len(e.waiting))...)
			}
			if old := e.waiting[key.fd]; old.fn != nil && old.client {
				e.n-- // a park that replaces another
			}
			if client {
				e.n++
				e.total++
			}
			e.waiting[key.fd] = parkedFn{token: key.token, client: client, fn: fn}
		}
	})
	if err == nil {
		err = ctlErr
	}
	return key, err
}

// arm adds or re-arms the socket key.fd with key's token.
func (e *evloop) arm(key parkKey, armed *bool) error {
	ev := syscall.EpollEvent{Events: evloopEvents, Fd: key.fd, Pad: key.token}
	epfd := e.epfd
	op := syscall.EPOLL_CTL_ADD
	if *armed {
		op = syscall.EPOLL_CTL_MOD
	}
	err := syscall.EpollCtl(epfd, op, int(key.fd), &ev)
	switch {
	case err == syscall.ENOENT && op == syscall.EPOLL_CTL_MOD:
		err = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(key.fd), &ev)
	case err == syscall.EEXIST && op == syscall.EPOLL_CTL_ADD:
		err = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_MOD, int(key.fd), &ev)
	}
	if err != nil {
		return fmt.Errorf("evloop: epoll_ctl fd %d: %w", key.fd, err)
	}
	*armed = true
	return nil
}

// take removes the park key and returns its resumer, or nil when the
// park already woke (or never was).
func (e *evloop) take(key parkKey) resumer {
	e.mu.Lock()
	defer e.mu.Unlock()
	if key.fd < 0 || int(key.fd) >= len(e.waiting) {
		return nil
	}
	p := e.waiting[key.fd]
	if p.fn == nil || p.token != key.token {
		return nil
	}
	e.waiting[key.fd] = parkedFn{}
	if p.client {
		e.n--
	}
	return p.fn
}

// wake resumes the park key now, as if its socket were readable; it
// reports whether the park was still waiting.
func (e *evloop) wake(key parkKey) bool {
	fn := e.take(key)
	if fn != nil {
		go fn.resume()
	}
	return fn != nil
}

// unpark removes the park key without running its function, for the
// parked goroutine itself to go on; false means the park already woke and
// its function runs (or ran).
func (e *evloop) unpark(key parkKey) bool { return e.take(key) != nil }

// parked is the number of clients parked.
func (e *evloop) parked() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// parks is the number of clients' parks so far.
func (e *evloop) parks() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.total
}

// close resumes every parked socket, refuses further parks, and stops the
// loop goroutine.
func (e *evloop) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.done
		return
	}
	e.closed = true
	fns := make([]resumer, 0, e.n)
	for _, p := range e.waiting {
		if p.fn != nil {
			fns = append(fns, p.fn)
		}
	}
	e.waiting, e.n = nil, 0
	e.mu.Unlock()
	for _, fn := range fns {
		go fn.resume()
	}
	e.ep.Close() // ends run's wait
	<-e.done
}

// run waits for events and resumes their sockets' parks until close.
func (e *evloop) run() {
	defer close(e.done)
	events := make([]syscall.EpollEvent, 128)
	for {
		var n int
		var werr error
		err := e.raw.Read(func(fd uintptr) bool {
			n, werr = syscall.EpollWait(int(fd), events, 0)
			if werr == syscall.EINTR {
				n, werr = 0, nil
			}
			// Nothing ready: wait in the netpoller until the epoll
			// instance is readable again.
			return n > 0 || werr != nil
		})
		if err != nil {
			return // closed
		}
		if werr != nil {
			return // cannot happen on a valid epoll instance
		}
		for _, ev := range events[:n] {
			e.wake(parkKey{fd: ev.Fd, token: ev.Pad})
		}
	}
}

// forget takes fd out of the epoll set before its descriptor is closed
// while another descriptor of the same socket stays open (parkedConn's
// reopen): the registration would otherwise outlive the number.
func (e *evloop) forget(fd int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		syscall.EpollCtl(e.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	}
}
