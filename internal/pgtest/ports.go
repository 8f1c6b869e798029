package pgtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Clusters listen on ports from just below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range). The kernel never hands those out to a
// listener on port 0 or to an outgoing connection, so a port stays free while
// its cluster is stopped and waits for Restart, whatever else runs on the
// machine. Every pgtest process of the machine takes its ports under an flock
// on one file per port in portLockDir, so two test binaries running at once
// never pick the same one; the kernel drops a process's locks when it exits,
// however it exits.
const (
	portSpan     = 8192 // ports below the ephemeral range that pgtest uses
	portMinFloor = 1024 // never below the privileged ports
	portTries    = 512
)

// ports holds this process's reserved ports, each with its open lock file,
// and where the next search starts: after the port reserved last, so that a
// port released by a stopped cluster is not handed out again until the
// search has gone round the whole range. A client of the old cluster that
// did not notice it was gone (a pool reconnecting, a stream retrying: the
// clusters share their user, password and database names) must not reach a
// new cluster on the same port.
var ports = struct {
	mu   sync.Mutex // guards the following
	held map[int]*os.File
	next int // offset into the range; -1 until the first search
}{held: map[int]*os.File{}, next: -1}

// portLockDir is shared by every user's pgtest processes on the machine; the
// sticky bit keeps one user from removing another's lock files. It is made
// once per process.
var portLockDir = sync.OnceValues(makePortLockDir)

func makePortLockDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "shardgate-pgtest-ports")
	if err := os.MkdirAll(dir, 0o777|os.ModeSticky); err != nil {
		return "", fmt.Errorf("pgtest: port lock directory: %w", err)
	}
	// MkdirAll's mode is cut by the umask. Only the owner may chmod; for
	// anyone else the directory is already as its owner left it.
	_ = os.Chmod(dir, 0o777|os.ModeSticky)
	return dir, nil
}

// portRange returns [lo, hi), the ports below the ephemeral range.
func portRange() (lo, hi int) {
	hi = 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return max(portMinFloor, hi-portSpan), hi
}

// reservePort picks a port that no other cluster on the machine holds and that
// nothing listens on now, and holds it until releasePort.
func reservePort() (int, error) {
	dir, err := portLockDir()
	if err != nil {
		return 0, err
	}
	lo, hi := portRange()
	if hi-lo < 64 {
		return 0, fmt.Errorf("pgtest: find a free port: ip_local_port_range leaves only %d ports below it", hi-lo)
	}
	ports.mu.Lock()
	if ports.next < 0 {
		// Each process starts somewhere else: fewer collisions between
		// test binaries' searches.
		ports.next = rand.IntN(hi - lo)
	}
	start := ports.next
	ports.mu.Unlock()
	for i := range min(portTries, hi-lo) {
		port := lo + (start+i)%(hi-lo)
		lock, err := lockPort(dir, port)
		if err != nil {
			return 0, err
		}
		if lock == nil {
			// Held by another pgtest process, or by this one: each
			// open of the file is its own lock holder.
			continue
		}
		if !portFree(port) {
			lock.Close()
			continue
		}
		ports.mu.Lock()
		ports.held[port] = lock
		ports.next = (port - lo + 1) % (hi - lo)
		ports.mu.Unlock()
		return port, nil
	}
	return 0, fmt.Errorf("pgtest: find a free port in [%d, %d): none free in %d tries", lo, hi, portTries)
}

// lockPort takes port's lock file, or returns nil when another process holds
// it.
func lockPort(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("pgtest: lock port %d: %w", port, err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return nil, nil
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pgtest: lock port %d: %w", port, err)
	}
	return f, nil
}

// portFree reports whether a listener could bind port on the loopback address
// the clusters use.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func releasePort(port int) {
	ports.mu.Lock()
	lock := ports.held[port]
	delete(ports.held, port)
	ports.mu.Unlock()
	if lock != nil {
		lock.Close()
	}
}
