# The README's two commands: `make demo` runs the proxy in front of two local
# PostgreSQL shards; `make test` runs every test (unit, fuzz seeds, and
# integration tests against real PostgreSQL servers).
GO ?= go

.PHONY: demo test build vet fmt-check bench bench-sharding bench-reshard bench-sparse bench-icount

demo:
	$(GO) run ./cmd/proxy demo

build:
	$(GO) build -o bin/proxy ./cmd/proxy

# The integration package takes 15-18 minutes on a 2-core machine (more when
# other suites share it); 30 minutes leaves room for a loaded run.
test: fmt-check vet
	$(GO) test -count=1 -timeout 30m ./...
	$(MAKE) goroutine-slice
	$(MAKE) conformance-slice

# limits.event_loop is on by default, so the tests above serve eligible
# clients on the event loop. This runs the pooler, isolation, retry and park
# tests again with it off (SHARDGATE_TEST_EVENT_LOOP=0), over a goroutine
# per client: the path of event_loop: false, and of session-mode clients
# whatever the setting (about 3 minutes).
GOROUTINE_TESTS = $(shell cd integration && grep -ho '^func Test[A-Za-z0-9_]*' pooler_*test.go isolation_*test.go retry_test.go replica_retry_test.go replica_batch_test.go park_test.go stmt_isolation_test.go | sed 's/^func //' | paste -sd'|' -)
.PHONY: goroutine-slice
goroutine-slice:
	@echo "goroutine-slice: $(words $(subst |, ,$(GOROUTINE_TESTS))) integration tests with SHARDGATE_TEST_EVENT_LOOP=0"
	@SHARDGATE_TEST_EVENT_LOOP=0 $(GO) test -count=1 -timeout 20m -run '^($(GOROUTINE_TESTS))$$' ./integration

# The slice of the conformance suite (below) that make test runs: pgx itself
# and pgconn, the protocol-heavy packages (about 3 minutes).
.PHONY: conformance-slice
conformance-slice:
	CONFORMANCE_PACKAGES='. ./pgconn' GO=$(GO) bash conformance/run.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench:
	bash bench/run.sh

bench-sharding:
	bash bench/sharding.sh

bench-reshard:
	bash bench/reshard.sh

bench-sparse:
	bash bench/sparse.sh

bench-icount:
	bash bench/icount.sh

# pgx v5's own test suite, directly and through the proxy in session and
# transaction mode; fails on a test that passes only directly. CONFORMANCE_RUN
# runs a slice (go test -run). See docs/conformance.md.
.PHONY: conformance
conformance:
	GO=$(GO) bash conformance/run.sh

# The differential tests (one plain PostgreSQL against the proxy, every
# runner) over the whole matrix: both pool modes × one, two and three
# shards. make test runs a slice of it (integration/differential_harness_test.go:
# diffInMatrix).
.PHONY: diff-full
diff-full:
	SHARDGATE_DIFF_MATRIX=full $(GO) test -count=1 -timeout 0 -run 'Diff' ./integration

# The randomized isolation test with many seeds (ISOLATION_SEEDS, default
# 50); make test runs it once with a random seed. A failure prints its seed,
# and ISOLATION_SEED=<seed> replays it.
.PHONY: isolation-soak
isolation-soak:
	@for s in $$(seq 1 $${ISOLATION_SEEDS:-50}); do \
		ISOLATION_SEED=$$s $(GO) test -count=1 -run 'TestIsolationRandomized$$' ./integration >/dev/null || \
			{ echo "isolation-soak: seed $$s failed; replay with ISOLATION_SEED=$$s"; exit 1; }; \
	done; echo "isolation-soak: $${ISOLATION_SEEDS:-50} seeds passed"

# The random differential test with many seeds (RANDOM_DIFF_SEEDS, default
# 20) of RANDOM_DIFF_QUERIES queries each (default 1000); make test runs it
# once with a random seed. A failure prints its seed and query;
# RANDOM_DIFF_SEED=<seed> RANDOM_DIFF_ONLY=<query> replays it.
.PHONY: random-diff-soak
random-diff-soak:
	@for s in $$(seq 1 $${RANDOM_DIFF_SEEDS:-20}); do \
		RANDOM_DIFF_SEED=$$s RANDOM_DIFF_QUERIES=$${RANDOM_DIFF_QUERIES:-1000} $(GO) test -count=1 -run 'TestRndDifferential$$' ./integration >/dev/null || \
			{ echo "random-diff-soak: seed $$s failed; replay with RANDOM_DIFF_SEED=$$s $(GO) test -count=1 -v -run 'TestRndDifferential$$' ./integration"; exit 1; }; \
	done; echo "random-diff-soak: $${RANDOM_DIFF_SEEDS:-20} seeds passed"

# The random extended-protocol pipelines against one PostgreSQL, through a
# one-shard and a two-shard database, with many seeds (EXTRUN_SEEDS,
# default 50) of EXTRUN_STEPS steps each (default 300); make test runs one
# random seed of 120. A failure prints its seed; EXTRUN_SEED=<seed>
# replays it.
.PHONY: extended-soak
extended-soak:
	@for s in $$(seq 1 $${EXTRUN_SEEDS:-50}); do \
		EXTRUN_SEED=$$s EXTRUN_STEPS=$${EXTRUN_STEPS:-300} $(GO) test -count=1 -run 'TestExtendedRunRandom(Sharded)?$$' ./integration >/dev/null || \
			{ echo "extended-soak: seed $$s failed; replay with EXTRUN_SEED=$$s $(GO) test -count=1 -v -run 'TestExtendedRunRandom(Sharded)?$$' ./integration"; exit 1; }; \
	done; echo "extended-soak: $${EXTRUN_SEEDS:-50} seeds passed"

# Seeded fault-injection runs (integration/chaos_*_test.go), SEEDS of them
# (default 10) of CHAOS_SECONDS each (default 15), PostgreSQL restarts
# included; make test runs one seed of 8 s (at most one restart). A failure
# prints its replay.
.PHONY: chaos
chaos:
	CHAOS_SEEDS=$(or $(SEEDS),10) CHAOS_SECONDS=$(or $(CHAOS_SECONDS),15) CHAOS_PG_RESTARTS=1 \
		$(GO) test -count=1 -timeout 0 -v -run 'TestChaos' ./integration/
