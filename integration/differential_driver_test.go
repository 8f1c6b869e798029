package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The driver runners of the differential harness: psycopg2, node-postgres
// and pgjdbc, each a program under testdata/drivers that the test starts
// once (a JVM takes most of a second to start, so one process per script
// would add minutes) and drives over a pipe. The program reads one command
// a line, a JSON array of strings, and answers each with one JSON line:
//
//	["open", url, mode]  connect; the answer is {"ok": true} or {"err": …}
//	["stmt", sql]        run sql; the answer is a diffWorkerResult
//	["close"]            disconnect
//
// So a script is one connection of a long-lived process, the harness
// calls its between function after each statement as for every runner, and
// a statement that gets no answer in time kills the process (the next
// script starts a new one). Each program's comment says what its library
// shows of a result.

// diffWorkerTimeout bounds the wait for one answer.
const diffWorkerTimeout = 20 * time.Second

// diffWorkerResult is a program's answer.
type diffWorkerResult struct {
	Tag    string         `json:"tag"`
	Fields []string       `json:"fields"`
	Rows   []string       `json:"rows"`
	Err    *diffWorkerErr `json:"err"`
	Tx     string         `json:"tx"`
}

// diffWorkerErr is an error as a program reports it: the server's fields,
// or Other for an error of the library's own.
type diffWorkerErr struct {
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Message  string `json:"message"`
	Detail   string `json:"detail"`
	Hint     string `json:"hint"`
	Other    string `json:"other"`
}

func (e *diffWorkerErr) String() string {
	if e == nil {
		return ""
	}
	if e.Other != "" {
		return "non-PostgreSQL error: " + e.Other
	}
	return diffErr(e.Severity, e.Code, e.Message, e.Detail, e.Hint)
}

// diffWorker is one driver program, started on first use and again after
// it ended or was killed. One goroutine (the test's) uses it at a time.
type diffWorker struct {
	name string
	argv []string
	dir  string

	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan []byte   // stdout, line by line, closed at its end
	stderr *syncBuffer   // the program's stderr, for failure messages
	done   chan struct{} // closed when the process has been waited for
}

// syncBuffer is a bytes.Buffer that os/exec may write while the test reads.
type syncBuffer struct {
	mu sync.Mutex // guards the following
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (w *diffWorker) start() error {
	cmd := exec.Command(w.argv[0], w.argv[1:]...)
	cmd.Dir = w.dir
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("%s: stdin: %w", w.name, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("%s: stdout: %w", w.name, err)
	}
	w.stderr = &syncBuffer{}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start %s: %w", w.name, w.argv[0], err)
	}
	w.cmd, w.in = cmd, in
	w.lines, w.done = make(chan []byte), make(chan struct{})
	go func() {
		defer close(w.done)
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				w.lines <- line
			}
			if err != nil {
				break
			}
		}
		close(w.lines)
		cmd.Wait()
	}()
	return nil
}

// call sends cmd and returns the answer. An error means the process is
// gone: it ended, or it did not answer in time and was killed.
func (w *diffWorker) call(cmd ...string) (diffWorkerResult, error) {
	var res diffWorkerResult
	if w.cmd == nil {
		if err := w.start(); err != nil {
			return res, err
		}
	}
	line, err := json.Marshal(cmd)
	if err != nil {
		return res, fmt.Errorf("%s: encode %q: %w", w.name, cmd, err)
	}
	if _, err := w.in.Write(append(line, '\n')); err != nil {
		w.stop()
		return res, fmt.Errorf("%s: write: %w (stderr: %s)", w.name, err, abbrev(w.stderr.String(), 2000))
	}
	select {
	case ans, ok := <-w.lines:
		if !ok {
			w.stop()
			return res, fmt.Errorf("%s ended (stderr: %s)", w.name, abbrev(w.stderr.String(), 2000))
		}
		if err := json.Unmarshal(ans, &res); err != nil {
			w.stop()
			return res, fmt.Errorf("%s: decode %q: %w", w.name, abbrev(string(ans), 300), err)
		}
		return res, nil
	case <-time.After(diffWorkerTimeout):
		w.stop()
		return res, fmt.Errorf("%s: nothing within %s", w.name, diffWorkerTimeout)
	}
}

// stop ends the process: it closes its stdin, waits a little for it to
// exit and then kills it.
func (w *diffWorker) stop() {
	if w.cmd == nil {
		return
	}
	w.in.Close()
	drain := func() {
		for range w.lines {
		}
	}
	go drain()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		w.cmd.Process.Kill()
		<-w.done
	}
	w.cmd = nil
}

// workerRunner runs scripts in mode of w, connecting to dsn(url).
func workerRunner(name string, w *diffWorker, mode string, dsn func(string) string) diffRunner {
	return diffRunner{name: name, run: func(t testing.TB, u string, stmts []string, between func()) []stmtResult {
		t.Helper()
		res, err := w.call("open", dsn(u), mode)
		if err == nil && res.Err != nil {
			err = errors.New(res.Err.String())
		}
		if err != nil {
			t.Fatalf("[%s] connect %s: %v", name, u, err)
		}
		var out []stmtResult
		for _, sql := range stmts {
			res, err := w.call("stmt", sql)
			if err != nil {
				return append(out, stmtResult{Err: "non-PostgreSQL error: " + err.Error()})
			}
			out = append(out, stmtResult{Tag: res.Tag, Fields: res.Fields, Rows: res.Rows, Err: res.Err.String(), Tx: res.Tx})
			if between != nil {
				between()
			}
		}
		if _, err := w.call("close"); err != nil {
			t.Logf("[%s] close: %v", name, err)
		}
		return out
	}}
}

// diffWorkerRunners are the runners of every driver program whose
// library is installed; the processes end with the test.
func diffWorkerRunners(t *testing.T) []diffRunner {
	t.Helper()
	var out []diffRunner
	libpq := func(u string) string { return u }
	if w, ok := psycopg2Worker(t); ok {
		out = append(out, workerRunner("psycopg2", w, "autocommit", libpq))
	}
	if w, ok := nodeWorker(t); ok {
		for _, mode := range []string{"simple", "extended", "named", "cursor"} {
			out = append(out, workerRunner("node-postgres "+mode, w, mode, libpq))
		}
	}
	if w, ok := jdbcWorker(t); ok {
		out = append(out,
			workerRunner("pgjdbc prepareThreshold=5", w, "prepared", jdbcURL("")),
			workerRunner("pgjdbc prepareThreshold=1", w, "prepared", jdbcURL("prepareThreshold=1")),
			workerRunner("pgjdbc fetch size 1", w, "fetch", jdbcURL("")))
	}
	return out
}

// driverMissing reports a driver that is not installed: a failure under
// CI=true, elsewhere a skipped subtest.
func driverMissing(t *testing.T, name, why, install string) {
	t.Helper()
	msg := fmt.Sprintf("%s runner: %s; install it with %s (.ci/run does)", name, why, install)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: the differential harness runs every driver)")
	}
	t.Run("driver "+name, func(t *testing.T) { t.Skip(msg) })
}

// driverDir is the directory of a driver program under testdata.
func driverDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "drivers", name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// newWorker returns a worker that the test stops when it ends.
func newWorker(t *testing.T, name, dir string, argv ...string) *diffWorker {
	w := &diffWorker{name: name, argv: argv, dir: dir}
	t.Cleanup(w.stop)
	return w
}

// debianPython is the Python of Debian's python3-psycopg2 package (the
// python3 first on PATH may be another one, without it).
const debianPython = "/usr/bin/python3"

func psycopg2Worker(t *testing.T) (*diffWorker, bool) {
	t.Helper()
	const install = "apt-get install python3-psycopg2"
	if out, err := exec.Command(debianPython, "-c", "import psycopg2").CombinedOutput(); err != nil {
		driverMissing(t, "psycopg2", fmt.Sprintf("%s cannot import psycopg2 (%v: %s)", debianPython, err, strings.TrimSpace(string(out))), install)
		return nil, false
	}
	dir := driverDir(t, "psycopg2")
	return newWorker(t, "psycopg2", dir, debianPython, "-u", "run.py"), true
}

func nodeWorker(t *testing.T) (*diffWorker, bool) {
	t.Helper()
	dir := driverDir(t, "node")
	install := "apt-get install nodejs npm, then npm ci --no-audit --no-fund in " + dir
	node, err := exec.LookPath("node")
	if err != nil {
		driverMissing(t, "node-postgres", "node not found", install)
		return nil, false
	}
	for _, pkg := range []string{"pg", "pg-cursor"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			driverMissing(t, "node-postgres", "npm package "+pkg+" not installed", install)
			return nil, false
		}
	}
	return newWorker(t, "node-postgres", dir, node, "run.js"), true
}

// pgjdbcJar is where Debian's libpostgresql-jdbc-java puts pgjdbc.
const pgjdbcJar = "/usr/share/java/postgresql.jar"

// jdbcWorker compiles testdata/drivers/jdbc/Run.java into a directory of
// the test's.
func jdbcWorker(t *testing.T) (*diffWorker, bool) {
	t.Helper()
	const install = "apt-get install libpostgresql-jdbc-java default-jdk-headless"
	javac, err := exec.LookPath("javac")
	if err != nil {
		driverMissing(t, "pgjdbc", "javac not found", install)
		return nil, false
	}
	java, err := exec.LookPath("java")
	if err != nil {
		driverMissing(t, "pgjdbc", "java not found", install)
		return nil, false
	}
	if _, err := os.Stat(pgjdbcJar); err != nil {
		driverMissing(t, "pgjdbc", pgjdbcJar+" not found", install)
		return nil, false
	}
	classes := t.TempDir()
	src := filepath.Join(driverDir(t, "jdbc"), "Run.java")
	if out, err := exec.Command(javac, "-d", classes, "-cp", pgjdbcJar, src).CombinedOutput(); err != nil {
		t.Fatalf("javac %s: %v\n%s", src, err, out)
	}
	// The JIT's first tier and the serial collector start fastest; the
	// program is short-lived and small.
	return newWorker(t, "pgjdbc", classes, java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
		"-cp", pgjdbcJar+string(os.PathListSeparator)+classes, "Run"), true
}

// jdbcURL turns a postgres:// URL into pgjdbc's form, with the connection
// properties extra.
func jdbcURL(extra string) func(string) string {
	return func(u string) string {
		p, err := url.Parse(u)
		if err != nil {
			return "invalid URL " + u
		}
		q := url.Values{}
		q.Set("user", p.User.Username())
		if pw, ok := p.User.Password(); ok {
			q.Set("password", pw)
		}
		q.Set("sslmode", "disable")
		s := "jdbc:postgresql://" + p.Host + p.Path + "?" + q.Encode()
		if extra != "" {
			s += "&" + extra
		}
		return s
	}
}
