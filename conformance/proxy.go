package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// proxyConfig is the proxy's configuration for a run: pgx's users with the
// authentication method pgx's pg_hba.conf gives them, TLS with the server's
// certificate, and pgx_test as a one-shard database. pgx_sslcert has a
// password, but its test sends a client certificate and no password.
const proxyConfig = `# Written by shardgate's conformance runner.
listen: 127.0.0.1:0
shutdown_timeout: 5s
two_phase_commit_log: %[1]s
admin: { user: admin, password: admin-secret }
pool: { mode: %[2]s, size: %[3]d }
tls:
  cert: %[4]s
  key: %[5]s
  server_sslmode: prefer
users:
  - { name: pgx_md5, password: %[6]s, auth_type: md5 }
  - { name: pgx_pw, password: %[6]s, auth_type: plain }
  - { name: pgx_scram, password: %[6]s, auth_type: scram }
  - { name: pgx_ssl, password: %[6]s, auth_type: scram }
  - { name: pgx_sslcert, password: %[6]s, auth_type: scram }
databases:
  - name: pgx_test
    shards: [{ host: 127.0.0.1, port: %[7]d, database: pgx_test }]
`

// listenLine finds the address in the proxy's "shardgate listening" log
// line.
var listenLine = regexp.MustCompile(`msg="shardgate listening" addr=(\S+)`)

// proxy is a running proxy process.
type proxy struct {
	cmd     *exec.Cmd
	addr    string
	logPath string
	exited  chan struct{} // closed when cmd.Wait returns
	err     error         // cmd.Wait's result, once exited is closed
}

// startProxy writes the configuration for mode into dir and starts bin with
// it, returning once the proxy listens.
func startProxy(ctx context.Context, bin, dir, mode string, size int, s *server) (*proxy, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(proxyConfig, filepath.Join(dir, "2pc.log"), mode, size,
		s.certs.serverCert, s.certs.serverKey, testPassword, s.cl.Port)
	cfgPath := filepath.Join(dir, "shardgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "proxy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-config", cfgPath, "-log-level", "info")
	cmd.Dir = dir
	cmd.Stdout = logFile
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	p := &proxy{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	addrc := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if m := listenLine.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		// Whatever the scanner could not read must still be drained,
		// or the proxy blocks on a full pipe.
		_, _ = io.Copy(logFile, stderr)
	}()
	go func() {
		<-copied
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	select {
	case p.addr = <-addrc:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("proxy exited before listening: %v; log %s:\n%s", p.err, logPath, tail(logPath, 20))
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	return nil, errors.Join(fmt.Errorf("proxy did not listen within 30s; log %s", logPath), p.stop())
}

// stop shuts the proxy down with SIGTERM, and SIGKILL if it takes longer
// than its shutdown timeout and a margin.
func (p *proxy) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("proxy ignored SIGTERM for 15s; killed")
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return p.err
	}
	if p.err != nil {
		return fmt.Errorf("proxy exited with %v; log %s", p.err, p.logPath)
	}
	return nil
}

// alive reports whether the proxy is still running: a proxy that crashed in
// a run makes every later test of that run fail.
func (p *proxy) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// proxyLogStats counts the warnings, errors and recovered panics in a proxy
// log.
type proxyLogStats struct{ warnings, errors, panics int }

func readProxyLogStats(path string) proxyLogStats {
	var st proxyLogStats
	f, err := os.Open(path)
	if err != nil {
		return st
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "level=WARN"):
			st.warnings++
		case strings.Contains(line, "level=ERROR"):
			st.errors++
		}
		// A client goroutine's panic is recovered and logged; a panic
		// of the process is printed by the runtime.
		if strings.Contains(line, "panicked") || strings.HasPrefix(line, "panic:") {
			st.panics++
		}
	}
	return st
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
