package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// errPortInUse reports that a new server could not listen on its port, which
// someone else took between reservePort and the server's start.
var errPortInUse = errors.New("port in use")

// postmaster is a running postgres server process, a child of this process.
type postmaster struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd.Wait returns
	err    error         // cmd.Wait's result; read after exited is closed
}

func (p *postmaster) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// wait waits up to timeout for the postmaster to exit.
func (p *postmaster) wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// launch starts the postmaster on c.Port and waits until it accepts
// connections on its Unix socket, runs setup (if any) and checks that it
// accepts TCP connections as c.User. On success the cluster is running; on
// failure no server process is left. c.mu must be held.
func (c *Cluster) launch(ctx context.Context, setup func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var logStart int64
	if fi, err := os.Stat(c.logPath); err == nil {
		logStart = fi.Size()
	}
	p, err := c.startPostmaster()
	if err != nil {
		return err
	}
	err = c.waitReady(ctx, p)
	if err == nil && setup != nil {
		err = setup(ctx)
	}
	if err == nil {
		err = c.ping(ctx)
	}
	if err != nil {
		exitedEarly := p.hasExited()
		killErr := c.killProc(p)
		log := c.logSince(logStart)
		if exitedEarly && strings.Contains(log, "could not create any TCP/IP sockets") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return errors.Join(fmt.Errorf("pgtest: start PostgreSQL on port %d: %w\nserver log (%s):\n%s",
			c.Port, err, c.logPath, log), killErr)
	}
	c.proc = p
	c.state = stateRunning
	c.logf("pgtest: started PostgreSQL on %s:%d (data %s)", c.Host, c.Port, c.DataDir)
	return nil
}

func (c *Cluster) startPostmaster() (*postmaster, error) {
	log, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtest: start PostgreSQL: %w", err)
	}
	defer log.Close() // the child has its own copy
	if err := c.env.chown(c.logPath); err != nil {
		return nil, err
	}
	// The port and socket directory go on the command line rather than in
	// the configuration, which replicas copy from their primary.
	cmd := c.env.command(c.dir, "postgres", "-D", c.DataDir,
		"-p", strconv.Itoa(c.Port), "-k", c.sockDir)
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: start PostgreSQL: %w", err)
	}
	p := &postmaster{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls until the server accepts a connection on its Unix socket,
// which needs no password.
func (c *Cluster) waitReady(ctx context.Context, p *postmaster) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, c.localConnString("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("postgres exited: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// ping connects over TCP as the superuser.
func (c *Cluster) ping(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// setPassword gives the superuser its password. The template has none, so
// that one initdb serves every auth method.
func (c *Cluster) setPassword(ctx context.Context) error {
	if c.Password == "" {
		return nil
	}
	return c.execLocal(ctx, "ALTER ROLE postgres PASSWORD "+quoteLiteral(c.Password))
}

// execLocal runs sql on the postgres database over the Unix socket.
func (c *Cluster) execLocal(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.localConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

// localConnString connects over the Unix socket, where pg_hba trusts every
// user.
func (c *Cluster) localConnString(database string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable",
		quoteConnValue(c.sockDir), c.Port, quoteConnValue(c.User), quoteConnValue(database))
}

// shutdown stops the postmaster, if any, and makes sure none of its processes
// remain: a fast shutdown (SIGINT) first, then an immediate one (SIGQUIT),
// then SIGKILL. c.mu must be held.
func (c *Cluster) shutdown() error {
	p := c.proc
	c.proc = nil
	if p == nil {
		return nil
	}
	for _, step := range []struct {
		sig     syscall.Signal
		timeout time.Duration
	}{
		{syscall.SIGINT, fastStopTimeout},
		{syscall.SIGQUIT, immediateTimeout},
	} {
		if p.hasExited() {
			break
		}
		_ = p.cmd.Process.Signal(step.sig)
		if p.wait(step.timeout) {
			break
		}
		c.logf("pgtest: PostgreSQL on port %d ignored %v for %v", c.Port, step.sig, step.timeout)
	}
	return c.killProc(p)
}

// kill SIGKILLs the postmaster and its processes. c.mu must be held.
func (c *Cluster) kill() error {
	p := c.proc
	c.proc = nil
	if p == nil {
		return nil
	}
	return c.killProc(p)
}

// killProc SIGKILLs p, waits for it, and then SIGKILLs the server processes
// it leaves behind: backends outlive a killed postmaster for a moment, and
// while they hold its shared memory no new postmaster can start.
func (c *Cluster) killProc(p *postmaster) error {
	if !p.hasExited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
	return killProcessesIn(c.DataDir, killTimeout)
}

// logSince returns the end of the server log from offset on.
func (c *Cluster) logSince(offset int64) string {
	const tailMax = 4 << 10
	f, err := os.Open(c.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > tailMax {
		offset = fi.Size() - tailMax
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// quoteLiteral quotes s as an SQL string literal, assuming
// standard_conforming_strings (the default since PostgreSQL 9.1).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// quoteConnValue quotes s for a libpq keyword/value connection string.
func quoteConnValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
