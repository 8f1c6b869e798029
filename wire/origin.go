package wire

import "strings"

// Where PostgreSQL raises the errors the proxy answers in its place.
//
// A server's ErrorResponse ends with the source file, line and function
// that raised it (fields F, L and R): psql prints them as LOCATION under
// \set VERBOSITY verbose, and drivers keep them (pgx's PgError.File, Line
// and Routine, pgjdbc's ServerErrorMessage). Where the proxy answers a
// client itself with an error that PostgreSQL gives in the same situation —
// an unknown prepared statement or portal, a malformed Bind, a failed
// login, a full server, a statement in an aborted transaction — it sends
// the fields of PostgreSQL 15.18 too (read off the server: see
// TestOriginsMatchPostgres), so that the error is the server's down to
// them; so do its notices (the WARNING of a COMMIT outside a transaction). Errors of the proxy's own (the 0A000 refusals, routing, pooling)
// get none: they have no place in PostgreSQL's source. A server's error
// that the proxy relays keeps the fields the server sent (More).

// origin is where PostgreSQL raises one error: its SQLSTATE and message,
// and the F, L and R fields it sends. In message, one % stands for what
// PostgreSQL formats into it (a name, a number); a message without one is
// matched whole.
type origin struct {
	code, message       string
	file, line, routine string
}

// origins are PostgreSQL 15.18's, for the errors the proxy makes in its
// place. Where PostgreSQL raises an error in several places (a portal
// missing at Execute or at Describe), the one the proxy meets most often is
// listed.
var origins = []origin{
	{InvalidSQLStatementName, `prepared statement "%" does not exist`, "prepare.c", "451", "FetchPreparedStatement"},
	{InvalidSQLStatementName, `unnamed prepared statement does not exist`, "postgres.c", "1616", "exec_bind_message"},
	{DuplicatePreparedStatement, `prepared statement "%" already exists`, "prepare.c", "412", "StorePreparedStatement"},
	{InvalidCursorName, `portal "%" does not exist`, "postgres.c", "2071", "exec_execute_message"},
	{InvalidCursorName, `cursor "%" does not exist`, "portalcmds.c", "187", "PerformPortalFetch"},
	{DuplicateCursor, `cursor "%" already exists`, "portalmem.c", "186", "CreatePortal"},
	{ObjectNotInPrerequisiteState, `cursor can only scan forward`, "pquery.c", "940", "PortalRunSelect"},
	{SyntaxError, `cannot insert multiple commands into a prepared statement`, "postgres.c", "1419", "exec_parse_message"},
	{ProtocolViolation, `bind message supplies %`, "postgres.c", "1674", "exec_bind_message"},
	{ProtocolViolation, `bind message has % parameters`, "postgres.c", "1668", "exec_bind_message"},
	{ProtocolViolation, `invalid frontend message type %`, "postgres.c", "446", "SocketBackend"},
	{ProtocolViolation, `invalid startup packet layout: expected terminator as last byte`, "postmaster.c", "2334", "ProcessStartupPacket"},
	{NoActiveSQLTransaction, `% can only be used in transaction blocks`, "xact.c", "3587", "CheckTransactionBlock"},
	{InFailedSQLTransaction, `current transaction is aborted, commands ignored until end of transaction block`, "postgres.c", "1081", "exec_simple_query"},
	{UndefinedParameter, `there is no parameter $%`, "parse_expr.c", "838", "transformParamRef"},
	{InvalidTextRepresentation, `invalid input syntax for type numeric: %`, "numeric.c", "6896", "set_var_from_str"},
	{InvalidCatalogName, `database "%" does not exist`, "postinit.c", "948", "InitPostgres"},
	{TooManyConnections, `sorry, too many clients already`, "proc.c", "357", "InitProcess"},
	{AdminShutdown, `terminating connection due to administrator command`, "postgres.c", "3211", "ProcessInterrupts"},
	{InvalidPassword, `password authentication failed for user "%"`, "auth.c", "334", "auth_failed"},
	{ActiveSQLTransaction, `there is already a transaction in progress`, "xact.c", "3789", "BeginTransactionBlock"},
	{NoActiveSQLTransaction, `there is no transaction in progress`, "xact.c", "3987", "EndTransactionBlock"},
	{InvalidSavepointSpecification, `savepoint "%" does not exist`, "xact.c", "4428", "RollbackToSavepoint"},
	// COPY FROM STDIN data that the proxy splits across shards.
	{BadCopyFileFormat, `COPY file signature not recognized`, "copyfromparse.c", "198", "ReceiveCopyBinaryHeader"},
	{BadCopyFileFormat, `invalid COPY file header (missing flags)`, "copyfromparse.c", "203", "ReceiveCopyBinaryHeader"},
	{BadCopyFileFormat, `invalid COPY file header (missing length)`, "copyfromparse.c", "218", "ReceiveCopyBinaryHeader"},
	{BadCopyFileFormat, `unexpected EOF in COPY data`, "copyfromparse.c", "1902", "CopyReadBinaryAttribute"},
	{BadCopyFileFormat, `unterminated CSV quoted field`, "copyfromparse.c", "1807", "CopyReadAttributesCSV"},
	{BadCopyFileFormat, `missing data for column "%"`, "copyfromparse.c", "902", "NextCopyFrom"},
	{BadCopyFileFormat, `row field count is %, expected %`, "copyfromparse.c", "987", "NextCopyFrom"},
	// The merges of aggregates across shards (executor), as the
	// aggregate's own function raises them on one server.
	{NumericValueOutOfRange, `money out of range`, "cash.c", "96", "cash_pl_cash"},
	{DatetimeFieldOverflow, `interval out of range`, "timestamp.c", "3208", "interval_pl"},
	{StringDataLengthMismatch, `cannot AND bit strings of different sizes`, "varbit.c", "1259", "bit_and"},
	{StringDataLengthMismatch, `cannot OR bit strings of different sizes`, "varbit.c", "1300", "bit_or"},
	{StringDataLengthMismatch, `cannot XOR bit strings of different sizes`, "varbit.c", "1340", "bitxor"},
	{ArraySubscriptError, `cannot accumulate arrays of different dimensionality`, "arrayfuncs.c", "5623", "accumArrayResultArr"},
	{NumericValueOutOfRange, `value out of range: overflow`, "float.c", "87", "float_overflow_error"},
}

// Location is where PostgreSQL raises an error that it raises in more than
// one place with the same message: the proxy's code that answers for one
// of them names it (Error.At) rather than taking origins' choice.
type Location struct{ file, line, routine string }

// The places of PostgreSQL 15.18 that origins does not choose.
var (
	// AtRollbackOutside: ROLLBACK outside a transaction block or in an
	// implicit one (WARNING 25P01; origins has COMMIT's).
	AtRollbackOutside = &Location{"xact.c", "4110", "UserAbortTransactionBlock"}
	// AtCommitImplicit: COMMIT inside the implicit transaction of a
	// multi-statement Query (WARNING 25P01; origins has that of a COMMIT
	// outside any).
	AtCommitImplicit = &Location{"xact.c", "3908", "EndTransactionBlock"}
	// AtIntervalDays, AtIntervalTime: interval addition overflowing its
	// days or its time (22008; origins has the months').
	AtIntervalDays = &Location{"timestamp.c", "3215", "interval_pl"}
	AtIntervalTime = &Location{"timestamp.c", "3222", "interval_pl"}
	// AtDescribePortal: Describe of an unknown portal (34000; origins
	// has Execute's).
	AtDescribePortal = &Location{"postgres.c", "2669", "exec_describe_portal_message"}
	// AtRelease: RELEASE of an unknown savepoint (3B001; origins has
	// ROLLBACK TO's).
	AtRelease = &Location{"xact.c", "4317", "ReleaseSavepoint"}
)

// locationOf returns where PostgreSQL raises e, a proxy-made error or
// notice: e.At, else the place origins gives; nil when it has none.
func locationOf(e *Error) *Location {
	if e.At != nil {
		return e.At
	}
	if o := originOf(e); o != nil {
		return &Location{o.file, o.line, o.routine}
	}
	return nil
}

// originOf returns where PostgreSQL raises e, or nil when e is not one of
// origins.
func originOf(e *Error) *origin {
	for i := range origins {
		o := &origins[i]
		if o.code != e.Code {
			continue
		}
		if matchMessage(o.message, e.Message) {
			return o
		}
	}
	return nil
}

// matchMessage reports whether msg is pattern with each % standing for a
// non-empty text.
func matchMessage(pattern, msg string) bool {
	before, after, wild := strings.Cut(pattern, "%")
	if !wild {
		return msg == pattern
	}
	if !strings.HasPrefix(msg, before) {
		return false
	}
	rest := msg[len(before):]
	for i := 1; i <= len(rest); i++ {
		if matchMessage(after, rest[i:]) {
			return true
		}
	}
	return false
}
