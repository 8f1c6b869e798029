package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
)

// lockedBuffer is a log destination for several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunPortTaken: a proxy whose listen address is taken returns that
// error, and logs no other error for it (the resumption of resharding
// tasks, canceled by the same end, used to log "operation was canceled").
func TestRunPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// The database's server is a closed port: nothing to resume there.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`listen: %s
users:
  - { name: app, password: secret, server_user: app, server_password: secret }
databases:
  - name: app
    shards: [{ host: 127.0.0.1, port: %d, database: app }]
`, taken.Addr(), closedPort)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = Run(ctx, cfg, log, Options{})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run on a taken address: %v; want address already in use", err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "cancel") {
			t.Errorf("an error logged for the cancellation of the run: %s", line)
		}
	}
}
