package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStartCPUProfile: the file written is a CPU profile (pprof's format:
// a gzipped protocol buffer whose string table names the cpu sample
// type), and a profile that cannot be created is an error.
func TestStartCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("not a pprof profile: %v", err)
	}
	raw, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("not a pprof profile: %v", err)
	}
	for _, want := range []string{"cpu", "nanoseconds", "samples"} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("the profile's strings lack %q", want)
		}
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.pprof")); err == nil {
		t.Fatal("a profile in a missing directory started")
	}
}
