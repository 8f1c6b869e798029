package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clientEnv is the environment for psql and pgbench: only what they need,
// so that the tester's PG* variables and ~/.psqlrc do not interfere.
func clientEnv(p *proxy) []string {
	host, port, _ := net.SplitHostPort(p.Addr)
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"LC_ALL=C",
		"PGHOST=" + host,
		"PGPORT=" + port,
		"PGUSER=app",
		"PGDATABASE=app",
		"PGPASSWORD=" + appPassword,
		"PGSSLMODE=disable",
		"PGCONNECT_TIMEOUT=10",
	}
}

// runClient runs a client binary against the proxy and returns its stdout,
// stderr and exit code (-1 if it could not run or was killed).
func runClient(t *testing.T, p *proxy, timeout time.Duration, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = clientEnv(p)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", bin, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: timed out after %s\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), timeout, out.String(), errb.String())
	}
	return out.String(), errb.String(), code
}

// TestPsql runs psql scripts through the proxy: \copy in both directions
// with CSV quoting and NULLs, a multi-statement query, and a script that
// stops at an error with the server's message.
func TestPsql(t *testing.T) {
	checkGoroutines(t)
	psql := need(t, "psql")
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	dir := t.TempDir()

	in := filepath.Join(dir, "in.csv")
	out := filepath.Join(dir, "out.csv")
	// Quotes, embedded commas and newlines, empty strings (quoted) and
	// NULLs (unquoted empty fields).
	csv := "id,name,note\n" +
		"1,plain,\n" +
		"2,\"with, comma\",\"\"\n" +
		"3,\"say \"\"hi\"\"\",\"two\nlines\"\n" +
		"4,,\"x\"\n" +
		"5,ünïcödé,\\N\n"
	if err := os.WriteFile(in, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`
CREATE TABLE people (id int PRIMARY KEY, name text, note text);
\copy people FROM '%s' WITH (FORMAT csv, HEADER)
SELECT count(*) AS total, count(name) AS named, count(note) AS noted FROM people;
\copy (SELECT * FROM people ORDER BY id) TO '%s' WITH (FORMAT csv, HEADER)
SELECT 1 AS a \; SELECT 2 AS b \; SELECT name FROM people WHERE id = 3;
`, in, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runClient(t, p, 30*time.Second, psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", script)
	if code != 0 || stderr != "" {
		t.Fatalf("psql exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	want := "5|4|4\n1\n2\nsay \"hi\"\n"
	if stdout != want {
		t.Fatalf("psql output %q, want %q", stdout, want)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// COPY writes the empty string quoted and NULL as an empty field, and
	// "\N" in CSV is data, not NULL.
	wantCSV := "id,name,note\n" +
		"1,plain,\n" +
		"2,\"with, comma\",\"\"\n" +
		"3,\"say \"\"hi\"\"\",\"two\nlines\"\n" +
		"4,,x\n" +
		"5,ünïcödé,\\N\n"
	if string(got) != wantCSV {
		t.Fatalf("\\copy TO wrote %q, want %q", got, wantCSV)
	}

	t.Run("multi-statement query", func(t *testing.T) {
		stdout, stderr, code := runClient(t, p, 30*time.Second, psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
			"-c", "INSERT INTO people VALUES (6, 'six', NULL); UPDATE people SET note = 'n' WHERE id >= 5; SELECT count(*) FROM people WHERE note = 'n'")
		if code != 0 || stderr != "" || stdout != "2\n" {
			t.Fatalf("psql exit %d stdout %q stderr %q", code, stdout, stderr)
		}
	})

	t.Run("error stops the script", func(t *testing.T) {
		script := filepath.Join(dir, "error.sql")
		os.WriteFile(script, []byte(`SELECT 'before';
BEGIN;
INSERT INTO people VALUES (7, 'seven', NULL);
INSERT INTO people VALUES (1, 'duplicate', NULL);
SELECT 'after';
COMMIT;
`), 0o644)
		stdout, stderr, code := runClient(t, p, 30*time.Second, psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", script)
		if code != 3 {
			t.Fatalf("psql exit %d, want 3 (stopped by ON_ERROR_STOP)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if stdout != "before\n" {
			t.Fatalf("stdout %q, want only the output before the error", stdout)
		}
		wantErr := `psql:` + script + `:4: ERROR:  duplicate key value violates unique constraint "people_pkey"` + "\n" +
			`DETAIL:  Key (id)=(1) already exists.` + "\n"
		if stderr != wantErr {
			t.Fatalf("stderr %q, want %q", stderr, wantErr)
		}
		// psql disconnected inside the failed transaction; nothing of it
		// remains.
		stdout, _, code = runClient(t, p, 30*time.Second, psql, "-X", "-A", "-t", "-c", "SELECT count(*) FROM people WHERE id = 7")
		if code != 0 || stdout != "0\n" {
			t.Fatalf("after the failed script: exit %d, %q", code, stdout)
		}
	})
}

// pgbenchResult is what a pgbench run reported.
type pgbenchResult struct {
	tps    float64
	failed int
	done   int
}

var (
	tpsRE       = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	failedRE    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	processedRE = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
)

func parsePgbench(out string) (pgbenchResult, error) {
	var r pgbenchResult
	m := tpsRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("no tps line")
	}
	r.tps, _ = strconv.ParseFloat(m[1], 64)
	m = failedRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("no failed transactions line")
	}
	r.failed, _ = strconv.Atoi(m[1])
	m = processedRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("no processed transactions line")
	}
	r.done, _ = strconv.Atoi(m[1])
	return r, nil
}

// TestPgbench runs pgbench through a pool of 4 server connections with
// many more clients, in each query mode. With -M prepared, pgbench
// prepares each statement synchronously (PQprepare) while other clients of
// the same thread hold servers in open transactions: that only works
// because the proxy answers the Parse of a known statement without a
// server (see answerWithoutServer in package frontend).
func TestPgbench(t *testing.T) {
	checkGoroutines(t)
	pgbench := need(t, "pgbench")
	cl := cluster(t, "app")
	// 64 clients queue for 4 servers behind one pgbench_branches row: on
	// a loaded machine a wait can exceed the harness's 2s checkout
	// timeout, which is not what this test is about.
	cfg := strings.Replace(poolConfig(cl, "transaction", 4, "app"), "checkout_timeout: 2s", "checkout_timeout: 20s", 1)
	p := startProxy(t, cfg)
	stdout, stderr, code := runClient(t, p, 60*time.Second, pgbench, "-i", "-s", "1", "-q")
	if code != 0 || !strings.Contains(stderr, "done in") {
		t.Fatalf("pgbench -i: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	tests := []struct {
		name string
		args []string
	}{
		{"select-only", []string{"-S", "-c", "16", "-j", "2"}},
		{"tpcb", []string{"-c", "16", "-j", "2"}},
		{"prepared", []string{"-M", "prepared", "-c", "64", "-j", "2"}},
		{"extended", []string{"-M", "extended", "-c", "16", "-j", "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-n", "-T", "5"}, tc.args...)
			stdout, stderr, code := runClient(t, p, 30*time.Second, pgbench, args...)
			r, err := parsePgbench(stdout)
			if code != 0 || err != nil {
				t.Fatalf("pgbench %s: exit %d, %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, err, stdout, stderr)
			}
			if r.failed != 0 || r.tps <= 0 || r.done == 0 || strings.Contains(stderr, "error") {
				t.Fatalf("pgbench %s: %+v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r, stdout, stderr)
			}
			t.Logf("pgbench %s: %.0f tps, %d transactions", strings.Join(args, " "), r.tps, r.done)
		})
	}
	// pgbench's TPC-B keeps the sums consistent: no transaction was lost
	// or applied twice.
	conn := connect(t, p.AppURL("app"))
	var ok bool
	if err := conn.QueryRow(context.Background(), `SELECT
		(SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(delta) FROM pgbench_history) AND
		(SELECT sum(bbalance) FROM pgbench_branches) = (SELECT sum(delta) FROM pgbench_history) AND
		(SELECT sum(tbalance) FROM pgbench_tellers) = (SELECT sum(delta) FROM pgbench_history)`).Scan(&ok); err != nil || !ok {
		t.Fatalf("pgbench balances disagree with its history (%v)", err)
	}
}
