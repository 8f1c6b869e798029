package pool

import (
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/wire"
)

// Startup is the set of startup parameters a server connection was opened
// with, beyond the user and database of its pool's Target.
//
// A client's startup parameters are its session's reset values: RESET,
// SET ... TO DEFAULT, RESET ALL and DISCARD ALL return to them, and
// pg_settings reports them with source 'client'. SET cannot reproduce
// that, so a client is lent only servers opened with its own set. Key
// identifies a set: two Startups with the same Key open servers in the same
// state. The zero Startup is the empty set.
//
// Names are compared as PostgreSQL compares setting names, ignoring ASCII
// case, except for the names the startup packet treats specially (user,
// database, options, replication and the _pq_. protocol options), which
// PostgreSQL matches exactly: "Options" is a setting name that does not
// exist, not the options parameter. Pool does not pick which client
// parameters go in; the caller leaves out those that are not session
// settings (user, database, replication, options, which it expands into
// settings). application_name is a setting like the others: clients that
// differ only in it get servers of their own (docs/pooling.md).
type Startup struct {
	key    string
	params map[string]string
}

// NewStartup returns the set of params. It copies params, folding each
// setting name to lower case; when two names differ only in case, the value
// of the spelling that sorts last is kept (PostgreSQL would keep the one
// sent last, but a map has no order).
func NewStartup(params map[string]string) Startup {
	if len(params) == 0 {
		return Startup{}
	}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	canon := make(map[string]string, len(params))
	for _, name := range names {
		canon[canonicalName(name)] = params[name]
	}
	names = names[:0]
	for name := range canon {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		writeKeyString(&b, name)
		writeKeyString(&b, canon[name])
	}
	return Startup{key: b.String(), params: canon}
}

// Key returns a string that identifies the set: equal for equal sets,
// different for different ones. It is the sorted name, value pairs, each
// string followed by a NUL; the zero Startup's Key is "".
func (s Startup) Key() string { return s.key }

// Params returns the parameters, keyed by the names sent to the server.
// The map is shared: callers must not modify it.
func (s Startup) Params() map[string]string { return s.params }

// IsZero reports whether s is the empty set.
func (s Startup) IsZero() bool { return s.key == "" }

// specialStartupNames are the startup packet's parameters that are not
// settings; PostgreSQL matches them case-sensitively (ProcessStartupPacket).
var specialStartupNames = []string{"database", "user", "options", "replication"}

// canonicalName folds a setting name to ASCII lower case, as PostgreSQL's
// guc_name_compare does, unless the name, or what it would fold to, is one
// the startup packet treats specially.
func canonicalName(name string) string {
	lower := asciiLower(name)
	if lower == name {
		return name
	}
	if slices.Contains(specialStartupNames, lower) || strings.HasPrefix(lower, "_pq_.") {
		return name
	}
	return lower
}

func asciiLower(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return 'A' <= r && r <= 'Z' })
	if i < 0 {
		return s
	}
	b := []byte(s)
	for j := i; j < len(b); j++ {
		if 'A' <= b[j] && b[j] <= 'Z' {
			b[j] += 'a' - 'A'
		}
	}
	return string(b)
}

// writeKeyString appends s and a NUL to a Key. A startup packet cannot carry
// a NUL, but a Go string can; escaping NUL as "\x01\x02" (and the escape
// byte itself as "\x01\x01") keeps keys of such strings distinct too.
func writeKeyString(b *strings.Builder, s string) {
	for {
		i := strings.IndexAny(s, "\x00\x01")
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		if s[i] == 0 {
			b.WriteString("\x01\x02")
		} else {
			b.WriteString("\x01\x01")
		}
		s = s[i+1:]
	}
	b.WriteString(s)
	b.WriteByte(0)
}

// StartupRejectedError is the error of a checkout whose server refused to
// open a connection with the checkout's startup parameters: an unknown
// setting, an invalid value, or a setting the pool's user may not set or
// that cannot be set at connection start. The server is fine; the client's
// parameters are not. Err is the connect error, which wraps the server's
// *pgconn.PgError.
type StartupRejectedError struct {
	Startup Startup
	Err     error
}

func (e *StartupRejectedError) Error() string { return e.Err.Error() }

func (e *StartupRejectedError) Unwrap() error { return e.Err }

// IsStartupRejected reports whether err is, or wraps, a
// *StartupRejectedError. Such an error says nothing about the server's
// health: callers must not ban a replica for it, and should pass its
// *pgconn.PgError (errors.As) to the client as the server sent it.
func IsStartupRejected(err error) bool {
	var e *StartupRejectedError
	return errors.As(err, &e)
}

// startupRejected reports whether connecting with st failed because the
// server refused one of st's parameters. PostgreSQL applies startup
// parameters after authentication and the database's checks
// (process_startup_options in InitPostgres) and fails the connection with
// the SQLSTATE of the setting's error. PostgreSQL 15 sends, for example:
//
//	22023  invalid value for parameter "work_mem": "bogus"
//	22023  1 kB is outside the valid range for parameter "work_mem" (64 .. 2147483647)
//	22023  role "nosuch" does not exist (role, session_authorization)
//	42704  unrecognized configuration parameter "nosuch"
//	42602  invalid configuration parameter name "bad-name.x"
//	42601  invalid command-line argument for server process: -x (options)
//	42601  -c work_mem requires a value (options)
//	42501  permission denied to set parameter "log_statement"
//	55P02  parameter "shared_buffers" cannot be changed without restarting the server
//	55P02  parameter "autovacuum" cannot be changed now
//	25001  SET TRANSACTION ISOLATION LEVEL must be called before any query
//
// A setting's check hook picks its own SQLSTATE; besides class 22 (the
// default) the core ones use class 25 (transaction_isolation,
// transaction_read_only), 0A000 (features missing from the build or on a
// hot standby), 42704 and 42501, which are all classified as rejections.
//
// 42501 is also the code of a missing CONNECT privilege, and 0A000 of a
// protocol version the server does not support: problems of the pool, not
// of the client. They are classified as rejections all the same when st is
// not empty, because the other mistake is worse: a client must not be able
// to get a replica banned by sending a superuser-only setting. A pool with
// such a problem still fails its connections with the zero Startup
// (min_size, Params) and its health checks, which are never classified so.
func startupRejected(st Startup, err error) bool {
	if st.IsZero() {
		return false
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "25":
		return true
	}
	switch pe.Code {
	case wire.FeatureNotSupported, wire.InsufficientPrivilege, wire.SyntaxError,
		wire.InvalidName, wire.UndefinedObject, wire.CantChangeRuntimeParam:
		return true
	}
	return false
}
