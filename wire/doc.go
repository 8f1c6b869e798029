// Package wire frames PostgreSQL protocol messages for the proxy's hot path,
// and builds the messages and errors the proxy sends itself.
//
// A message is a type byte, a big-endian int32 length that counts itself,
// and a body; the startup-phase packets (StartupMessage, SSLRequest,
// GSSENCRequest, CancelRequest) have no type byte. The package knows that
// framing and the few bodies the proxy must read or write; it imports
// nothing else of shardgate's, so that the client side, the server side
// and replication all frame alike.
//
// # Files
//
//   - reader.go: Reader, the framing of one connection's incoming bytes.
//   - build.go and rows.go: Append functions that append a message to the
//     caller's buffer and fill in its length (FinishMessage): Query,
//     ReadyForQuery, CommandComplete, ParameterStatus, RowDescription,
//     DataRow, ParameterDescription and the body-less ParseComplete,
//     BindComplete, CloseComplete, NoData and EmptyQueryResponse, with the
//     type OIDs and format codes they need; and CString, Uint16 and Uint32,
//     which split a field off a body.
//   - body.go: Body reads the fields of a body in order, as PostgreSQL's
//     pqformat.c does, and fails a short or malformed message with the
//     ERROR 08P01 and the message text PostgreSQL sends for it, so that
//     decoding a client's message is an error, never an index out of range.
//   - error.go: the SQLSTATE codes the proxy answers with, all PostgreSQL's
//     own (the proxy's reason goes into Detail or Hint); Error, which is
//     both a Go error and the ErrorResponse or NoticeResponse it encodes
//     to; ParseError, which reads a server's.
//
// # Reader
//
// A Reader wraps one connection in a bufio.Reader of a size its owner
// picks (16 KiB towards clients, 32 KiB towards servers). Next returns the
// next message whole, as raw bytes and as its body, both slices of the
// buffer valid until the next call: relaying a message costs no
// allocation and no copy beyond the socket read (BenchmarkReaderNext). A message larger than the buffer is
// read into a separate slice that grows as its bytes arrive, a megabyte at
// a time, so that a peer announcing a huge length cannot make the proxy
// allocate it up front; the slice is reused for the next large message
// unless it grew past 4 MiB.
//
// A length below four, or a body longer than the Reader's maximum (SetMax:
// limits.max_message_size for clients), is a FATAL 08P01 *Error: the
// stream cannot be trusted after it. A read error, such as a deadline set
// to interrupt a blocked read, loses nothing: the next Next goes on with
// the same message, whether it fits the buffer or not. PeekHeader and Copy
// let the relay stream a large message to another writer without holding
// it whole. Startup reads an untyped packet of at most MaxStartupPacket
// bytes, PostgreSQL's limit.
//
// A Reader, like the connection it reads, belongs to one goroutine at a
// time. FuzzReader feeds it arbitrary bytes (corpus in testdata/fuzz):
// it never panics, and every message it returns lies within the input.
//
// # Errors
//
// Every ErrorResponse the proxy sends is built from an *Error, so SQLSTATE
// codes live in one place; Fatal says whether the connection closes after
// it. AppendError writes both the localized (S) and the non-localized (V)
// severity; ParseError prefers V.
//
// See the "Frontend/Backend Protocol" chapter of the PostgreSQL docs:
// https://www.postgresql.org/docs/current/protocol-overview.html#PROTOCOL-MESSAGE-CONCEPTS,
// https://www.postgresql.org/docs/current/protocol-message-formats.html and
// https://www.postgresql.org/docs/current/protocol-error-fields.html; the
// codes are those of https://www.postgresql.org/docs/current/errcodes-appendix.html.
package wire
