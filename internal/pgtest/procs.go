package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processesIn returns the processes whose working directory is dir or below
// it. Every PostgreSQL server process works in its data directory (the
// postmaster changes into it and its children inherit it), so this finds a
// cluster's processes even after the postmaster died and they were
// reparented. Without /proc it finds nothing.
func processesIn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// Zombies and processes of other users fail here; neither is
		// ours to care about.
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil {
			continue
		}
		if cwd == dir || strings.HasPrefix(cwd, dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killProcessesIn SIGKILLs the processes working under dir until there are
// none left.
func killProcessesIn(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := processesIn(dir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: processes %v in %s survive SIGKILL", pids, dir)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reapStale removes the run directories of processes that exited without
// stopping their clusters (a test binary that timed out, say), killing any
// server still running from them. Run directories are named run-<pid>-*; this
// assumes that every process sharing $TMPDIR also shares the PID namespace.
func reapStale(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "run-")
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if killProcessesIn(dir, 5*time.Second) == nil {
			_ = os.RemoveAll(dir)
		}
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
