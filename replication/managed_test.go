package replication

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/wire"
)

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{name: "admin shutdown", err: &pgconn.PgError{Code: wire.AdminShutdown}, want: true},
		{name: "connection failure class", err: &pgconn.PgError{Code: wire.ConnectionFailure}, want: true},
		{name: "undefined table", err: &pgconn.PgError{Code: wire.UndefinedTable}},
		{name: "connect", err: fmt.Errorf("connect: %w", &pgconn.ConnectError{}), want: true},
		{name: "eof", err: fmt.Errorf("copy: %w", io.ErrUnexpectedEOF), want: true},
		{name: "closed socket", err: fmt.Errorf("copy: %w", net.ErrClosed), want: true},
		{name: "conn closed by pgconn", err: fmt.Errorf("destination shard 1: %w", pgconn.ErrConnClosed), want: true},
		{name: "other", err: errors.New("replication: no primary key")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := transient(tc.err); got != tc.want {
				t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
