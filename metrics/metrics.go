package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the proxy's Prometheus registry: the pool collector over a
// Source, the reload counters, and Go runtime and process metrics. It is
// its own registry, not Prometheus's global default, so that two proxies in
// one process (tests) do not share metrics.
type Metrics struct {
	reg *prometheus.Registry
	src Source

	reloads       *prometheus.CounterVec
	reloadSuccess prometheus.Gauge
	reloadTime    prometheus.Gauge
	cutoverPause  *prometheus.HistogramVec
}

// cutoverPauseBuckets are the upper bounds, in seconds, of
// shardgate_reshard_cutover_pause_seconds: from a quick cutover's pause
// (tens of milliseconds) to the longest a member holds a database for
// another proxy's cutover (two minutes); the default cutover timeout is
// 10 s.
var cutoverPauseBuckets = []float64{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// New returns the metrics of src.
func New(src Source) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		src: src,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardgate_reloads_total",
			Help: "Configuration reloads (SIGHUP, admin RELOAD, admin SET) by result: success or failure.",
		}, []string{"result"}),
		reloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardgate_last_reload_success",
			Help: "1 if the last reload succeeded (or none happened yet), 0 if it failed and the previous configuration is in effect.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardgate_last_reload_timestamp_seconds",
			Help: "Unix time of the last reload attempt (0 before the first).",
		}),
		cutoverPause: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardgate_reshard_cutover_pause_seconds",
			Help:    "How long each resharding cutover held this proxy's traffic to the source database, by outcome: done (cut over) or aborted (resumed on the source). In a cluster every proxy observes its own pause.",
			Buckets: cutoverPauseBuckets,
		}, []string{"database", "outcome"}),
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.reloadSuccess.Set(1)
	m.reg.MustRegister(newCollector(src), m.reloads, m.reloadSuccess, m.reloadTime, m.cutoverPause,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the Prometheus registry, to gather in tests or to add
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Reloaded records the outcome of a reload attempt.
func (m *Metrics) Reloaded(err error) {
	m.reloadTime.Set(float64(time.Now().UnixNano()) / 1e9)
	if err != nil {
		m.reloads.WithLabelValues("failure").Inc()
		m.reloadSuccess.Set(0)
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.reloadSuccess.Set(1)
}

// ObserveCutoverPause records how long a resharding cutover held the
// traffic of database db (the source) on this proxy, with its outcome
// ("done" or "aborted"). The task manager calls it for the cutovers this
// proxy coordinates, the cluster member for those it paused for
// (replication.PauseObserver).
func (m *Metrics) ObserveCutoverPause(db, outcome string, pause time.Duration) {
	m.cutoverPause.WithLabelValues(db, outcome).Observe(pause.Seconds())
}

// healthTimeout bounds one /healthz request.
const healthTimeout = 3 * time.Second

// Handler serves /metrics (Prometheus text or OpenMetrics, as negotiated)
// and /healthz: 200 "ok" while the proxy accepts clients and every
// database has a healthy shard, else 503 with the reason.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := m.src.Health(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Server is the HTTP listener of the metrics endpoint.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Listen starts serving m.Handler on addr (such as "127.0.0.1:9930";
// port 0 picks a free port).
func (m *Metrics) Listen(addr string, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	s := &Server{
		srv: &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the server, waiting for requests in progress until ctx
// ends, and for its goroutine.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
