package main

import (
	"context"
	"os"
	"runtime"
	"testing"
)

func TestDataSyncProcs(t *testing.T) {
	tests := []struct {
		name string
		env  string
		set  bool
		want int
	}{
		{name: "unset", want: 1},
		{name: "empty", env: "", set: true, want: 1},
		{name: "one", env: "1", set: true, want: 0},
		{name: "two", env: "2", set: true, want: 0},
		{name: "invalid: the runtime's default, left alone", env: "x", set: true, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := dataSyncProcs(tc.env, tc.set); got != tc.want {
				t.Errorf("dataSyncProcs(%q, %v) = %d, want %d", tc.env, tc.set, got, tc.want)
			}
		})
	}
}

// TestDataSyncSetsProcs checks that the data-sync command applies
// dataSyncProcs before anything else: without a source and a destination it
// returns at once, after the choice. It changes the test process's
// GOMAXPROCS and puts it back, so it must not run in parallel.
func TestDataSyncSetsProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	tests := []struct {
		name string
		env  *string // nil: unset
		want int
	}{
		{name: "GOMAXPROCS unset: one P", want: 1},
		{name: "GOMAXPROCS set: untouched", env: ptr("3"), want: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", "")
			if tc.env == nil {
				os.Unsetenv("GOMAXPROCS")
			} else {
				os.Setenv("GOMAXPROCS", *tc.env)
			}
			// As the runtime would have at start: 3 from the variable, or
			// more than one P without it.
			runtime.GOMAXPROCS(3)
			if err := dataSync(context.Background(), nil); err == nil {
				t.Fatal("dataSync without a source and destination: no error")
			}
			if got := runtime.GOMAXPROCS(0); got != tc.want {
				t.Errorf("GOMAXPROCS after data-sync = %d, want %d", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
