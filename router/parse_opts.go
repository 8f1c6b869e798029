package router

// The parser with standard_conforming_strings off.
//
// pg_query_go parses as a server with standard_conforming_strings on: in
// 'a\\b' a backslash is data. A session that turned it off (SET
// standard_conforming_strings = off, as PostgreSQL's own regression suite
// does) means a\b by the same text, and a key or constant the proxy reads
// from the tree, or writes back into a rewritten statement, must be that.
// libpg_query takes the setting as a parser option, which pg_query_go does
// not expose; this calls the C function itself (linked from pg_query_go's
// parser package, which the router imports).

/*
#include <stdlib.h>

typedef struct {
	char* message;
	char* funcname;
	char* filename;
	int lineno;
	int cursorpos;
	char* context;
} sgQueryError;

typedef struct {
	size_t len;
	char* data;
} sgQueryProtobuf;

typedef struct {
	sgQueryProtobuf parse_tree;
	char* stderr_buffer;
	sgQueryError* error;
} sgQueryProtobufParseResult;

// Declared as libpg_query's pg_query.h declares them (PgQuery… types of
// the same layout).
sgQueryProtobufParseResult pg_query_parse_protobuf_opts(const char* input, int parser_options);
void pg_query_free_protobuf_parse_result(sgQueryProtobufParseResult result);

// PG_QUERY_DISABLE_STANDARD_CONFORMING_STRINGS in pg_query.h.
#define SG_DISABLE_STANDARD_CONFORMING_STRINGS 32
*/
import "C"

import (
	"fmt"
	"unsafe"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"
	"google.golang.org/protobuf/proto"
)

// parseNonStandardStrings parses sql as PostgreSQL does with
// standard_conforming_strings off.
func parseNonStandardStrings(sql string) (*pg_query.ParseResult, error) {
	in := C.CString(sql)
	defer C.free(unsafe.Pointer(in))
	res := C.pg_query_parse_protobuf_opts(in, C.SG_DISABLE_STANDARD_CONFORMING_STRINGS)
	defer C.pg_query_free_protobuf_parse_result(res)
	if e := res.error; e != nil {
		return nil, &parser.Error{
			Message:   C.GoString(e.message),
			Funcname:  C.GoString(e.funcname),
			Filename:  C.GoString(e.filename),
			Lineno:    int(e.lineno),
			Cursorpos: int(e.cursorpos),
			Context:   C.GoString(e.context),
		}
	}
	tree := &pg_query.ParseResult{}
	if err := proto.Unmarshal(C.GoBytes(unsafe.Pointer(res.parse_tree.data), C.int(res.parse_tree.len)), tree); err != nil {
		return nil, fmt.Errorf("router: decode parse tree: %w", err)
	}
	return tree, nil
}
