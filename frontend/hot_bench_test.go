//go:build linux

package frontend

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// BenchmarkHotRelay is BenchmarkRelay over real loopback sockets, with
// limits.event_loop off (goroutine) and on (loop): a client logged in with
// trust sends each round trip and waits for its ReadyForQuery; the server
// is the fakeServer behind a TCP socket, answered by a goroutine of its
// own. Unlike BenchmarkRelay it measures the kernel and the scheduler too,
// which is where the event loop saves: cpu-us/op is the whole process's
// CPU time per round trip (client, proxy and fake server), the same
// harness in both variants.
func BenchmarkHotRelay(b *testing.B) {
	for _, tc := range relayCases() {
		for _, hot := range []bool{false, true} {
			name := tc.name + "/goroutine"
			if hot {
				name = tc.name + "/loop"
			}
			b.Run(name, func(b *testing.B) { benchHotRelay(b, tc, hot) })
		}
	}
}

func benchHotRelay(b *testing.B, tc relayCase, hot bool) {
	cfg, err := config.Parse([]byte(relayBenchConfig), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Limits.EventLoop = hot
	log := slog.New(slog.DiscardHandler)
	st, err := NewState(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Pools.Close()
	srv := fakeOverTCP(b)
	st.Pools.Get(cfg.Database("app"), cfg.User("app"), 0).Checkin(srv)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
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

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetNoDelay(true)
	startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "app", "database": "app"}}).Encode(nil)
	r := wire.NewReader(conn, 32<<10, 1<<30)
	untilReady := func() { readUntilReady(b, r) }
	conn.Write(startup)
	untilReady()
	conn.Write(tc.warm)
	untilReady()
	if hot && l.HotClients() != 1 {
		b.Fatal("the client is not on the event loop")
	}
	before := processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := conn.Write(tc.trip); err != nil {
			b.Fatal(err)
		}
		untilReady()
	}
	b.StopTimer()
	reportCPUPerOp(b, before)
	conn.Write([]byte{'X', 0, 0, 0, 4})
}

// processCPU is the test process's CPU time (user and system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPUPerOp reports the process's CPU time since before (a
// processCPU) per operation as cpu-us/op.
func reportCPUPerOp(b *testing.B, before time.Duration) {
	b.ReportMetric(float64((processCPU()-before).Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
}

// fakeOverTCP returns a pool.Server whose connection is a loopback socket
// to a fakeServer, answered by a goroutine that ends with the connection.
func fakeOverTCP(b *testing.B) *pool.Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	c.(*net.TCPConn).SetNoDelay(true)
	sc.(*net.TCPConn).SetNoDelay(true)
	done := make(chan struct{})
	b.Cleanup(func() { sc.Close(); <-done })
	go func() {
		defer close(done)
		f := newFakeServer()
		in := make([]byte, 32<<10)
		out := make([]byte, 32<<10)
		for {
			n, err := sc.Read(in)
			if err != nil {
				return
			}
			f.Write(in[:n])
			for {
				k, err := f.Read(out)
				if k > 0 {
					if _, werr := sc.Write(out[:k]); werr != nil {
						return
					}
				}
				if err == io.EOF || k == 0 {
					break
				}
			}
		}
	}()
	return &pool.Server{
		Conn: c, R: wire.NewReader(c, 32<<10, 1<<30), W: bufio.NewWriterSize(c, 32<<10),
		Params: map[string]string{}, Session: map[string]string{}, Prepared: map[string]struct{}{},
		Addr: "fake:5432",
	}
}
