#!/usr/bin/env bash
# Runs pgx v5's test suite directly against PostgreSQL and through shardgate
# in session and transaction mode, and fails on any test that passes directly
# but not through the proxy. docs/conformance.md explains the output.
#
#   conformance/run.sh                          the whole suite (a few minutes per run)
#   CONFORMANCE_RUN='TestConn|TestTx' conformance/run.sh   a slice (go test -run)
#   conformance/run.sh -modes transaction -packages ./pgconn
#
# Every flag also has a CONFORMANCE_* environment variable: see
# `go run ./conformance -h`. Results go to $CONFORMANCE_OUT, or to a new
# directory under $TMPDIR that the last line of output names.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
bin=$(mktemp -d "${TMPDIR:-/tmp}/shardgate-conformance-bin-XXXXXX")
trap 'rm -rf "$bin"' EXIT
"$GO" build -o "$bin/conformance" ./conformance
"$bin/conformance" "$@"
