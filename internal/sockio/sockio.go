// Package sockio reads and writes non-blocking sockets with system calls
// that do not tell Go's runtime the thread enters a system call
// (syscall.RawSyscall6). The frontend's fdConn and replication's rawConn
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

// MaxRaw is the largest read or write that Read and Write make raw. A
// larger copy may take long enough that the P kept by the thread meanwhile
// delays a stop-the-world, so it goes through the runtime as usual.
// Callers that want every call raw cut their buffers to this size.
const MaxRaw = 64 << 10

// Read is recv(2) of p on the non-blocking socket fd: raw when p holds at
// most MaxRaw bytes, through the runtime above that. An empty p makes no
// call and returns 0. EINTR is returned to the caller, like every other
// errno (0 when the call succeeded); 0 bytes and no errno is the end of
// the stream.
//
// recvfrom and sendto rather than read and write: on a socket they go to
// the socket layer directly, where read and write go through the file
// layer first (fdget_pos, rw_verify_area, the iov_iter of vfs_read and
// vfs_write), a few percent of the kernel's cost per call in perf record
// of the proxy (docs/benchmarks.md, issue 13, ninth step). PgBouncer
// makes the same calls.
func Read(fd uintptr, p []byte) (int, syscall.Errno) {
	return call(syscall.SYS_RECVFROM, fd, p, 0)
}

// Write is send(2) of p on the non-blocking socket fd, as Read is recv(2).
// A peer that closed makes it fail with EPIPE, without a SIGPIPE
// (MSG_NOSIGNAL).
func Write(fd uintptr, p []byte) (int, syscall.Errno) {
	return call(syscall.SYS_SENDTO, fd, p, syscall.MSG_NOSIGNAL)
}

func call(trap, fd uintptr, p []byte, flags uintptr) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	sys := syscall.Syscall6
	if len(p) <= MaxRaw {
		sys = syscall.RawSyscall6
	}
	r, _, e := sys(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), flags, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}
