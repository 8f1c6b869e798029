package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultPackages are pgx's packages whose tests use a database.
const defaultPackages = ". ./pgconn ./pgproto3 ./pgtype ./pgtype/zeronull ./pgxpool ./stdlib ./tracelog"

// options are the command line; each flag's default comes from a
// CONFORMANCE_* environment variable, so that make and CI can set them.
type options struct {
	out      string        // results directory
	run      string        // go test -run
	modes    []string      // proxied runs
	pkgs     []string      // pgx packages
	timeout  time.Duration // go test -timeout, per package
	expected string        // expected-failures file
	pgxDir   string        // pgx's source; "" finds it in the module cache
	poolSize int           // pool.size in the proxy
	serve    string        // "session" or "transaction": set up, print the environment, wait
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	o := &options{}
	var modeList, pkgList string
	fs.StringVar(&o.out, "out", os.Getenv("CONFORMANCE_OUT"), "results directory (default: a new directory under $TMPDIR) [CONFORMANCE_OUT]")
	fs.StringVar(&o.run, "run", os.Getenv("CONFORMANCE_RUN"), "go test -run filter for a slice of the suite [CONFORMANCE_RUN]")
	fs.StringVar(&modeList, "modes", envOr("CONFORMANCE_MODES", "session,transaction"), "proxied runs, comma-separated [CONFORMANCE_MODES]")
	fs.StringVar(&pkgList, "packages", envOr("CONFORMANCE_PACKAGES", defaultPackages), "pgx packages, space-separated [CONFORMANCE_PACKAGES]")
	timeout := fs.String("timeout", envOr("CONFORMANCE_TIMEOUT", "5m"), "go test -timeout, per package [CONFORMANCE_TIMEOUT]")
	fs.StringVar(&o.expected, "expected", envOr("CONFORMANCE_EXPECTED", "conformance/expected_failures.txt"), "expected-failures file [CONFORMANCE_EXPECTED]")
	fs.StringVar(&o.pgxDir, "pgx", os.Getenv("CONFORMANCE_PGX"), "pgx v5 source directory (default: the version in go.mod, from the module cache) [CONFORMANCE_PGX]")
	size := fs.String("pool-size", envOr("CONFORMANCE_POOL_SIZE", "10"), "the proxy's pool.size [CONFORMANCE_POOL_SIZE]")
	fs.StringVar(&o.serve, "serve", "", "run no tests: start PostgreSQL and the proxy in this mode, print both environments and wait for Ctrl-C")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.timeout, err = time.ParseDuration(*timeout); err != nil || o.timeout <= 0 {
		return nil, fmt.Errorf("-timeout %q: want a positive duration such as 10m", *timeout)
	}
	if o.poolSize, err = strconv.Atoi(*size); err != nil || o.poolSize < 1 {
		return nil, fmt.Errorf("-pool-size %q: want a positive integer", *size)
	}
	for m := range strings.SplitSeq(modeList, ",") {
		switch m = strings.TrimSpace(m); m {
		case "":
		case "session", "transaction":
			o.modes = append(o.modes, m)
		default:
			return nil, fmt.Errorf("-modes: %q is not session or transaction", m)
		}
	}
	if o.serve != "" && o.serve != "session" && o.serve != "transaction" {
		return nil, fmt.Errorf("-serve: %q is not session or transaction", o.serve)
	}
	o.pkgs = strings.Fields(pkgList)
	if len(o.pkgs) == 0 {
		return nil, errors.New("-packages: empty")
	}
	return o, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("conformance: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		log.Print(err)
		os.Exit(2)
	}
	code, err := run(ctx, o)
	if err != nil {
		log.Print(err)
	}
	os.Exit(code)
}

// run makes the three runs and reports; it returns the exit status.
func run(ctx context.Context, o *options) (int, error) {
	var exps []*expectation
	var err error
	if o.serve == "" {
		if exps, err = readExpectations(o.expected); err != nil {
			return 2, err
		}
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "shardgate-conformance-"); err != nil {
			return 2, err
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 2, err
	}
	log.Printf("results in %s", o.out)
	w, err := prepare(ctx, o)
	if err != nil {
		return 2, err
	}
	w.exps = exps
	srv, err := startServer(ctx, w.certs, func(format string, args ...any) { log.Printf(format, args...) })
	if err != nil {
		return 2, err
	}
	defer func() {
		if err := srv.stop(); err != nil {
			log.Print(err)
		}
	}()

	if o.serve != "" {
		return w.serve(ctx, srv)
	}
	direct, err := w.runDirect(ctx, srv)
	if err != nil {
		return 2, err
	}
	var reports []*modeReport
	runs := []*testRun{direct}
	for _, mode := range o.modes {
		r, err := w.runProxied(ctx, srv, mode)
		if err != nil {
			return 2, err
		}
		runs = append(runs, r)
		reports = append(reports, compare(direct, r, exps, o.run != ""))
	}
	if err := writeFiles(o.out, runs, func(f io.Writer) { report(f, direct, reports, o.expected, true) }); err != nil {
		return 2, err
	}
	fmt.Println()
	report(os.Stdout, direct, reports, o.expected, false)
	fmt.Printf("\nconformance: results, logs and every failure's output are in %s\n", o.out)
	for _, m := range reports {
		if len(m.unexpected()) > 0 {
			return 1, nil
		}
	}
	return 0, nil
}

// workspace is what the runs share: the copy of pgx, the proxy binary and
// the certificates.
type workspace struct {
	o        *options
	pgxDir   string // the writable copy
	proxyBin string
	certs    *certs
	exps     []*expectation
}

// prepare copies pgx, builds the proxy and compiles pgx's tests, so that the
// runs' times are the tests' own.
func prepare(ctx context.Context, o *options) (*workspace, error) {
	src := o.pgxDir
	if src == "" {
		out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", pgxModule).Output()
		if err != nil {
			return nil, fmt.Errorf("finding pgx in the module cache (go list -m %s): %w", pgxModule, err)
		}
		src = strings.TrimSpace(string(out))
	}
	w := &workspace{o: o, pgxDir: filepath.Join(o.out, "pgx"), proxyBin: filepath.Join(o.out, "shardgate")}
	log.Printf("copying %s to %s", src, w.pgxDir)
	if err := os.RemoveAll(w.pgxDir); err != nil {
		return nil, err
	}
	if err := copyTree(src, w.pgxDir); err != nil {
		return nil, fmt.Errorf("copying pgx: %w", err)
	}
	log.Printf("building the proxy")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", w.proxyBin, "./cmd/proxy").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/proxy: %w\n%s", err, out)
	}
	log.Printf("compiling pgx's tests")
	cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-count=1", "-run", "^$"}, o.pkgs...)...)
	cmd.Dir = w.pgxDir
	cmd.Env = testEnv(nil)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compiling pgx's tests: %w\n%s", err, out)
	}
	var err error
	if w.certs, err = decodeCerts(w.pgxDir, filepath.Join(o.out, "certs")); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *workspace) goTestOptions(mode string) goTestOptions {
	o := goTestOptions{
		dir:      w.pgxDir,
		pkgs:     w.o.pkgs,
		run:      w.o.run,
		skip:     skips(w.exps, mode),
		timeout:  w.o.timeout,
		jsonPath: filepath.Join(w.o.out, mode+".json"),
	}
	if mode == "direct" {
		o.skip = nil // the baseline runs everything
	}
	return o
}

func (w *workspace) runDirect(ctx context.Context, srv *server) (*testRun, error) {
	if err := srv.resetDatabase(ctx); err != nil {
		return nil, err
	}
	log.Printf("direct run: PostgreSQL on port %d", srv.cl.Port)
	r, err := goTest(ctx, "direct", w.goTestOptions("direct"), srv.directEnv())
	if err != nil {
		return nil, err
	}
	log.Printf("direct run: %s (%s)", countRun(r), r.duration.Round(time.Second))
	return r, nil
}

// proxiedEnv points pgx's connection strings at the proxy; the Unix socket
// is left out, and the pooler tests are turned on.
func (w *workspace) proxiedEnv(p *proxy) map[string]string {
	host, port, _ := strings.Cut(p.addr, ":")
	return connEnv(endpoints{
		tcp:       "host=" + host + " port=" + port,
		tls:       "host=localhost port=" + port,
		pgbouncer: true,
	}, w.certs)
}

func (w *workspace) runProxied(ctx context.Context, srv *server, mode string) (*testRun, error) {
	if err := srv.resetDatabase(ctx); err != nil {
		return nil, err
	}
	p, err := startProxy(ctx, w.proxyBin, filepath.Join(w.o.out, mode), mode, w.o.poolSize, srv)
	if err != nil {
		return nil, err
	}
	log.Printf("%s run: proxy on %s (pool size %d), log %s", mode, p.addr, w.o.poolSize, p.logPath)
	r, err := goTest(ctx, mode, w.goTestOptions(mode), w.proxiedEnv(p))
	crashed := !p.alive()
	stopErr := p.stop()
	if err != nil {
		return nil, errors.Join(err, stopErr)
	}
	if crashed {
		log.Printf("%s run: THE PROXY EXITED during the run; see %s", mode, p.logPath)
	} else if stopErr != nil {
		log.Printf("%s run: stopping the proxy: %v", mode, stopErr)
	}
	st := readProxyLogStats(p.logPath)
	log.Printf("%s run: %s (%s); proxy log: %d warnings, %d errors, %d panics", mode, countRun(r),
		r.duration.Round(time.Second), st.warnings, st.errors, st.panics)
	return r, nil
}

// serve starts the proxy, prints the environment of a direct and of a
// proxied run, and waits for ctx to end: for running one of pgx's tests by
// hand, or a reproduction.
func (w *workspace) serve(ctx context.Context, srv *server) (int, error) {
	if err := srv.resetDatabase(ctx); err != nil {
		return 2, err
	}
	p, err := startProxy(ctx, w.proxyBin, filepath.Join(w.o.out, w.o.serve), w.o.serve, w.o.poolSize, srv)
	if err != nil {
		return 2, err
	}
	defer p.stop()
	fmt.Printf("# PostgreSQL directly:\n%s\n", exports(srv.directEnv()))
	fmt.Printf("# through the proxy (%s mode, log %s):\n%s\n", w.o.serve, p.logPath, exports(w.proxiedEnv(p)))
	fmt.Printf("# pgx's tests: cd %s && go test -count=1 -run TestX ./pgconn\n# Ctrl-C stops both servers.\n", w.pgxDir)
	<-ctx.Done()
	return 0, nil
}

func exports(env map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeFiles writes report.txt, results.tsv and a failures file per run.
func writeFiles(dir string, runs []*testRun, writeReport func(io.Writer)) error {
	var b strings.Builder
	writeReport(&b)
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	writeResults(&b, runs)
	if err := os.WriteFile(filepath.Join(dir, "results.tsv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	for _, r := range runs {
		b.Reset()
		writeFailures(&b, r)
		if err := os.WriteFile(filepath.Join(dir, r.mode+".failures.txt"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies src to dst with every file writable by its owner: the
// module cache is read-only, and go test writes nothing into it, but pgx's
// tests may.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, fi.Mode().Perm()|0o200)
	})
}
