package replication

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func TestFlushesWait(t *testing.T) {
	var f flushes
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if in, err := f.wait(ctx, []pglogrepl.LSN{10}); in || err != nil {
		t.Fatalf("no reader here: wait = %v, %v; want false, nil (the caller polls)", in, err)
	}
	woken := make(chan int, 2)
	stop0 := f.start(0, 5, func() { woken <- 0 })
	stop1 := f.start(1, 7, func() { woken <- 1 })
	defer stop1()
	done := make(chan error, 1)
	go func() {
		in, err := f.wait(ctx, []pglogrepl.LSN{10, 7})
		if !in && err == nil {
			err = context.Canceled
		}
		done <- err
	}()
	for range 2 {
		<-woken // the waiter wakes every reader first
	}
	f.set(1, 8)
	select {
	case err := <-done:
		t.Fatalf("wait returned (%v) before source 0 reached its target", err)
	case <-time.After(20 * time.Millisecond): // nothing may happen: a short look
	}
	f.set(0, 10)
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}
	// A reader that goes away hands the wait back to the caller.
	stop0()
	if in, _ := f.wait(ctx, []pglogrepl.LSN{1, 1}); in {
		t.Fatal("wait with source 0's reader gone: in = true, want false")
	}
	defer f.start(0, 1, func() {})()
	short, cancelShort := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancelShort()
	if in, err := f.wait(short, []pglogrepl.LSN{1, 100}); !in || err == nil {
		t.Fatalf("wait past its context: %v, %v; want true and the context's error", in, err)
	}
}
