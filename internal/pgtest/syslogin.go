//go:build unix

package pgtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
)

// SysLogin connects to 127.0.0.1:port with bare system calls, sends a
// protocol 3.0 StartupMessage of params (name, value, name, value …) to a
// server or proxy that trusts the user, runs SELECT 1 and returns the
// blocking socket. A test that measures a proxy's heap in its own process
// logs its clients in this way, so that they take nothing from that heap.
func SysLogin(port int, params ...string) (int, error) {
	if len(params)%2 != 0 {
		return -1, errors.New("syslogin: params are name, value pairs")
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("connect: %w", err)
	}
	body := binary.BigEndian.AppendUint32(nil, 3<<16)
	for _, p := range params {
		body = append(append(body, p...), 0)
	}
	body = append(body, 0)
	for _, msg := range [][]byte{
		append(binary.BigEndian.AppendUint32(nil, uint32(len(body)+4)), body...),
		append([]byte{'Q', 0, 0, 0, 13}, "SELECT 1\x00"...),
	} {
		if err := SysExchange(fd, msg); err != nil {
			syscall.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// SysExchange writes msg on the blocking socket fd and reads messages up
// to ReadyForQuery; an ErrorResponse before it is an error.
func SysExchange(fd int, msg []byte) error {
	if _, err := syscall.Write(fd, msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		for len(buf) >= 5 {
			n := int(binary.BigEndian.Uint32(buf[1:5]))
			if len(buf) < 1+n {
				break
			}
			switch buf[0] {
			case 'E':
				return fmt.Errorf("error response: %q", buf[5:1+n])
			case 'Z':
				return nil
			}
			buf = buf[1+n:]
		}
		n, err := syscall.Read(fd, tmp)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return errors.New("read: connection closed")
		}
		buf = append(buf, tmp[:n]...)
	}
}
