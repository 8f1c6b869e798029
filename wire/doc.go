// Package wire frames PostgreSQL protocol messages for the proxy's hot path.
//
// A message is a type byte, a big-endian int32 length that counts itself,
// and a body (the startup-phase messages have no type byte). Reader returns
// bodies that point into its buffer, valid until the next read, so relaying
// a message costs no allocation; Error builds every ErrorResponse the proxy
// itself sends, so SQLSTATE codes live in one place: codes_gen.go, generated
// from PostgreSQL's errcodes.txt by internal/gencodes, names each of them.
//
// See the "Frontend/Backend Protocol" chapter of the PostgreSQL docs,
// sections "Message Formats" and "Message Flow".
package wire
