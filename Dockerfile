# shardgate container image.
#
#   docker build -t shardgate .
#   docker run --rm -p 6432:6432 -v $PWD/shardgate.yaml:/etc/shardgate/shardgate.yaml:ro shardgate
#
# pg_query_go (the SQL parser) is C code built with cgo, so the binary links
# against glibc: the build stage and the runtime stage must be the same
# Debian release (bookworm here).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first, so that code changes do not re-download modules.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# ICU: the proxy compares text in ICU collations with the library the
# shards' PostgreSQL uses (bookworm's ICU 72, as Debian's PostgreSQL).
RUN apt-get update && apt-get install -y --no-install-recommends libicu-dev && rm -rf /var/lib/apt/lists/*
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/proxy ./cmd/proxy

FROM debian:bookworm-slim
# locales: the proxy merges text ORDER BY across shards with the C library's
# collation of the database's locale (strcoll_l), so the locales the shards
# use must exist here too; add yours to /etc/locale.gen (en_US.UTF-8 below).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates locales libicu72 \
 && sed -i 's/^# *en_US.UTF-8/en_US.UTF-8/' /etc/locale.gen && locale-gen \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin shardgate \
 && install -d -o shardgate -g shardgate /var/lib/shardgate
COPY --from=build /out/proxy /usr/local/bin/proxy
USER shardgate
# Two-phase commit decisions live on the shards (docs/two-phase-commit.md):
# the proxy keeps nothing on disk.
WORKDIR /var/lib/shardgate
# 6432: PostgreSQL clients (and the admin database).
EXPOSE 6432
# SIGTERM (docker stop) drains transactions for up to shutdown_timeout (30s
# by default); SIGHUP (docker kill -s HUP) reloads the config file.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/proxy"]
CMD ["-config", "/etc/shardgate/shardgate.yaml"]
