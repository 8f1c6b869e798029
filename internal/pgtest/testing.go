package pgtest

import (
	"errors"
	"os"
	"testing"
)

// New starts a cluster for a test and stops it when the test ends. Without
// PostgreSQL binaries it skips the test, except when $CI is "true": tests must
// never skip in CI.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := Start(t.Context(), opts)
	if err != nil {
		if errors.Is(err, errNoBinaries) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return c
}

// Port reserves a loopback port for a test's own listener (a proxy process,
// say) the way clusters get theirs: from below the ephemeral range and locked
// machine-wide, so that a listener restarted on it finds it free. It is
// released when the test ends.
func Port(t testing.TB) int {
	t.Helper()
	port, err := reservePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releasePort(port) })
	return port
}
