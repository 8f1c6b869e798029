package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReshardTakeover: two proxies serve the same databases; proxy A runs
// RESHARD and is SIGKILLed in the middle of the copy. Proxy B, which was
// never told of the task, takes it over once A's lease is gone (the task's
// record and lease live on the destination: replication/lease.go), copies
// what A had not, streams and cuts over: every table holds the source's
// rows on the new shards, and B's SHOW TASKS reports the task done.
func TestReshardTakeover(t *testing.T) {
	crash, plain := buildCrashProxy(t), buildProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	k := setupCopyKill(t, ctx)
	go k.write(ctx)
	defer func() {
		select {
		case <-k.stopW:
		default:
			close(k.stopW)
		}
		<-k.writerOK
	}()
	// B: the same configuration on another port, in a file of its own.
	cfg, err := os.ReadFile(k.path)
	if err != nil {
		t.Fatal(err)
	}
	addrB := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	pathB := filepath.Join(t.TempDir(), "shardgate.yaml")
	if err := os.WriteFile(pathB, []byte(strings.Replace(string(cfg), k.addr, addrB, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	stalled := "public.orders"
	a := startProxyProcess(t, crash, k.path, k.addr, "-stall-copy", stalled)
	startProxyProcess(t, plain, pathB, addrB)
	admA := connect(t, k.adminURL)
	if _, err := adminPgx(admA, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, admA, stalled, 5000)
	admB := connect(t, fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", addrB))
	if tb, err := adminPgx(admB, "SHOW TASKS"); err != nil || len(tb.rows) != 0 {
		t.Fatalf("B runs tasks while A holds the lease: %v %v", tb, err)
	}
	a.cmd.Process.Kill() // SIGKILL: A's lease session ends with it
	<-a.done
	close(k.stopW)
	<-k.writerOK
	k.stopW, k.writerOK = make(chan struct{}), make(chan struct{})
	close(k.writerOK)
	waitOnlyTaskDone(t, admB, 90*time.Second, "B to take the task over and finish it")
	k.src = reconnected(t, ctx, k.src)
	k.checkResult(t, ctx)
}
