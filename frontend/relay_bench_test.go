package frontend

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// The relay benchmarks measure what the proxy spends on one round trip of
// a single-shard client in transaction mode: the client's message loop
// reads the request, checks the server out, writes the batch, relays the
// answers up to ReadyForQuery, flushes the client and checks the server
// back in.
//
// They run the real Listener (Serve, login, message loop) with both
// sockets in memory, so that what is measured is the proxy's work and not
// the kernel's: on this machine a loopback TCP round trip costs tens of
// microseconds of syscalls and wake-ups, which would drown the relay's
// few microseconds. The server is the tests' fakeServer, put into the
// database's pool before the client logs in; the client is played by the
// client socket itself (relayConn), in the client goroutine: each read of
// that socket first checks that the previous request was answered with a
// ReadyForQuery, then hands over the next request whole. The proxy thus
// sees a client that waits for every answer (as pgbench does), and nothing
// but the proxy's own goroutine runs while the timer runs. Only the
// package's exported surface (NewListener, Serve, Shutdown) and fakeServer
// are used, so that the benchmarks survive changes inside the loop.
//
// The fakeServer parses every message and builds its answers, which
// allocates; BenchmarkRelayFakeServer measures that harness cost on the
// same requests, to be subtracted from BenchmarkRelay.

const relayBenchConfig = `
pool: { mode: transaction, size: 1, checkout_timeout: 1s, server_lifetime: 0s, idle_timeout: 0s }
users:
  - { name: app, auth_type: trust }
databases:
  - name: app
    shards: [{ host: 127.0.0.1, port: 1 }]
`

// relayCase is one kind of round trip: warm is sent once before the
// timer starts (it may prepare a statement), trip b.N times; want lists
// the types of the messages the client must get for trip.
type relayCase struct {
	name string
	warm []byte
	trip []byte
	want string
}

func relayCases() []relayCase {
	enc := func(msgs ...pgproto3.FrontendMessage) []byte {
		var b []byte
		for _, m := range msgs {
			var err error
			if b, err = m.Encode(b); err != nil {
				panic(err)
			}
		}
		return b
	}
	simple := enc(&pgproto3.Query{String: "SELECT 1"})
	extended := enc(&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	prepare := enc(&pgproto3.Parse{Name: "s", Query: "SELECT 1"}, &pgproto3.Sync{})
	prepared := enc(&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	rows := enc(&pgproto3.Query{String: "ROWS 100"})
	return []relayCase{
		// A simple Query, as pgbench -M simple sends it.
		{name: "simple", warm: simple, trip: simple, want: "C Z"},
		// An unnamed statement parsed, bound and executed in one batch,
		// as pgbench -M extended (and most drivers' one-off queries).
		{name: "extended", warm: extended, trip: extended, want: "1 2 C Z"},
		// A named statement parsed once, then bound and executed, as
		// pgbench -M prepared and pgx's statement cache.
		{name: "prepared", warm: prepare, trip: prepared, want: "2 C Z"},
		// A simple Query whose result is 100 rows of 100 bytes: the
		// relay's cost per row (wire.Reader.NextRun).
		{name: "rows100", warm: rows, trip: rows, want: strings.Repeat("D ", 100) + "C Z"},
	}
}

// BenchmarkRelay measures one round trip through the proxy per iteration.
func BenchmarkRelay(b *testing.B) {
	for _, tc := range relayCases() {
		b.Run(tc.name, func(b *testing.B) { benchRelay(b, tc) })
	}
}

func benchRelay(b *testing.B, tc relayCase) {
	cfg, err := config.Parse([]byte(relayBenchConfig), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	st, err := NewState(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Pools.Close()
	fake := newFakeServer()
	st.Pools.Get(cfg.Database("app"), cfg.User("app"), 0).Checkin(fake.server())

	startup, err := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "app", "database": "app"}}).Encode(nil)
	if err != nil {
		b.Fatal(err)
	}
	conn := &relayConn{startup: startup, warm: tc.warm, trip: tc.trip, left: b.N,
		ready: make(chan struct{}), start: make(chan struct{}), closed: make(chan struct{})}
	ln := &relayListener{conns: make(chan net.Conn, 1), closed: make(chan struct{})}
	ln.conns <- conn

	l := NewListener(st, log)
	served := make(chan error, 1)
	go func() { served <- l.Serve(context.Background(), ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Shutdown(ctx); err != nil {
			b.Error(err)
		}
		if err := <-served; err != nil {
			b.Error(err)
		}
	}()

	select {
	case <-conn.ready:
	case <-conn.closed: // login or the warm-up failed
		b.Fatalf("client closed before the benchmark started: %v", conn.err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	close(conn.start)
	<-conn.closed
	b.StopTimer()
	if conn.err != nil {
		b.Fatal(conn.err)
	}
	if conn.left > 0 {
		b.Fatalf("the proxy closed the client with %d round trips left", conn.left)
	}
	if got := relayTypes(conn.last); got != tc.want {
		b.Fatalf("the last round trip answered %q, want %q", got, tc.want)
	}
}

// BenchmarkRelayFakeServer is the harness's share of BenchmarkRelay: the
// fakeServer answering the same requests with no proxy in between.
func BenchmarkRelayFakeServer(b *testing.B) {
	for _, tc := range relayCases() {
		b.Run(tc.name, func(b *testing.B) {
			f := newFakeServer()
			buf := make([]byte, 32<<10)
			answer := func(req []byte) int {
				f.Write(req)
				n := 0
				for {
					k, err := f.Read(buf)
					n += k
					if err == io.EOF {
						return n
					}
				}
			}
			answer(tc.warm)
			b.ReportAllocs()
			for b.Loop() {
				if answer(tc.trip) == 0 {
					b.Fatal("no answer")
				}
			}
		})
	}
}

// relayConn is the client's socket, and the client: see the comment at
// the top of the file. It is used by the client goroutine only, except
// for closed, ready and start, and for the fields read after closed.
type relayConn struct {
	startup, warm, trip []byte
	left                int // round trips still to send

	phase int           // 0: before the startup packet, 1: before warm, 2: warm-up, 3: benchmark
	ready chan struct{} // closed when the warm-up round trip was answered
	start chan struct{} // closed by the benchmark when the timer runs
	tail  [6]byte       // the last bytes the proxy wrote: ReadyForQuery ends every answer
	last  []byte        // what the proxy wrote since the last request
	err   error         // why the client stopped early

	closeOnce sync.Once
	closed    chan struct{}
}

func (c *relayConn) Read(p []byte) (int, error) {
	switch c.phase {
	case 0:
		c.phase = 1
		return copy(p, c.startup), nil
	case 1:
		c.phase = 2
		if err := c.answered(); err != nil {
			return 0, err
		}
		return c.send(p, c.warm)
	case 2:
		c.phase = 3
		if err := c.answered(); err != nil {
			return 0, err
		}
		close(c.ready)
		<-c.start
	default:
		if err := c.answered(); err != nil {
			return 0, err
		}
	}
	if c.left == 0 {
		return 0, io.EOF
	}
	c.left--
	return c.send(p, c.trip)
}

// answered checks that the proxy finished answering the last request
// (or, the first time, the login) with a ReadyForQuery.
func (c *relayConn) answered() error {
	if c.tail[0] != 'Z' || !bytes.Equal(c.tail[1:5], []byte{0, 0, 0, 5}) {
		c.err = fmt.Errorf("the proxy read the client before answering it: last bytes %q, answer %q", c.tail, c.last)
		return c.err
	}
	return nil
}

func (c *relayConn) send(p, req []byte) (int, error) {
	if len(p) < len(req) {
		c.err = fmt.Errorf("read buffer of %d bytes for a %d-byte request", len(p), len(req))
		return 0, c.err
	}
	c.last = c.last[:0]
	return copy(p, req), nil
}

func (c *relayConn) Write(p []byte) (int, error) {
	c.last = append(c.last, p...)
	if len(p) >= len(c.tail) {
		copy(c.tail[:], p[len(p)-len(c.tail):])
	} else {
		n := copy(c.tail[:], c.tail[len(p):])
		copy(c.tail[n:], p)
	}
	return len(p), nil
}

func (c *relayConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

var relayAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}

func (c *relayConn) LocalAddr() net.Addr                { return relayAddr }
func (c *relayConn) RemoteAddr() net.Addr               { return relayAddr }
func (c *relayConn) SetDeadline(t time.Time) error      { return nil }
func (c *relayConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *relayConn) SetWriteDeadline(t time.Time) error { return nil }

// relayListener hands out the connections put in conns, then blocks until
// closed.
type relayListener struct {
	conns     chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func (l *relayListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *relayListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *relayListener) Addr() net.Addr { return relayAddr }

// relayTypes lists the types of the messages in b, separated by spaces.
func relayTypes(b []byte) string {
	r := wire.NewReader(bytes.NewReader(b), 1024, 1<<30)
	var types []string
	for {
		typ, _, _, err := r.Next()
		if err != nil {
			return strings.Join(types, " ")
		}
		types = append(types, string(typ))
	}
}
