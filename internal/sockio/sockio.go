// Package sockio reads and writes non-blocking sockets with system calls
// that do not tell Go's runtime the thread enters a system call
// (syscall.RawSyscall). The frontend's fdConn and replication's rawConn
// both use it.
//
// The runtime's entersyscall/exitsyscall around a read or write of a
// non-blocking socket is pure cost: the call never waits (a read or write
// that would block returns EAGAIN, and the caller waits in a poller).
// Worse, when every P of the process was idle, entersyscall wakes the
// runtime's monitor thread (sysmon), which then polls every 20 µs for at
// least a millisecond. A proxy that goes idle and busy again at every
// round trip keeps it polling: it took a third of the proxy's CPU in the
// resharding apply (docs/benchmarks.md, issue 12 §5, sixth session) and
// a share of the pass-through's (issue 13, second step).
package sockio

import (
	"syscall"
	"unsafe"
)

// MaxRaw is the largest read or write that Call makes raw. A larger copy
// may take long enough that the P kept by the thread meanwhile delays a
// stop-the-world, so it goes through the runtime as usual. Callers that
// want every call raw cut their buffers to this size.
const MaxRaw = 64 << 10

// Call makes the read or write system call trap (syscall.SYS_READ,
// syscall.SYS_WRITE) of p on the non-blocking socket fd: raw when p holds
// at most MaxRaw bytes, through the runtime above that. An empty p makes
// no call and returns 0. EINTR is returned to the caller, like every
// other errno (0 when the call succeeded).
func Call(trap, fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	call := syscall.Syscall
	if len(p) <= MaxRaw {
		call = syscall.RawSyscall
	}
	r, _, e := call(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}
