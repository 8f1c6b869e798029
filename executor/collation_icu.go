//go:build !noicu

package executor

// ICU collations, as PostgreSQL 15 uses them for a collation (or a
// database) whose provider is ICU: ucol_open of the locale string
// (pg_locale.c, make_icu_collator: with ICU 54 or later the attributes of
// the string, such as "und-u-ks-level2", are ICU's to parse), then, in a
// UTF8 database, ucol_strcollUTF8 over the strings' bytes (varlena.c,
// varstr_cmp), and the version PostgreSQL records for the collation
// (get_collation_actual_version: ucol_getVersion and u_versionToString).
// The proxy links the same ICU the shards' PostgreSQL does only if it is
// built on the same OS release; the frontend checks the versions.
//
// Building needs libicu-dev (pkg-config icu-i18n icu-uc); the build tag
// noicu leaves ICU out (collation_noicu.go), and ICU collations are then
// refused.

/*
#cgo pkg-config: icu-i18n icu-uc
#include <stdlib.h>
#include <unicode/ucol.h>
#include <unicode/uversion.h>

static UCollator *sg_ucol_open(const char *loc, int *status) {
	UErrorCode st = U_ZERO_ERROR;
	UCollator *c = ucol_open(loc, &st);
	*status = (int)st;
	if (U_FAILURE(st)) {
		return NULL;
	}
	return c;
}

// sg_ucol_cmp compares with ucol_strcollUTF8 and returns -1, 0 or 1, or
// sgFailed plus the error code (so that no status escapes to Go's heap).
// An empty Go slice has no address: a NULL pointer stands for "".
#define sgFailed 2
static int sg_ucol_cmp(const UCollator *c, const char *a, int alen, const char *b, int blen) {
	UErrorCode st = U_ZERO_ERROR;
	UCollationResult r = ucol_strcollUTF8(c, a ? a : "", alen, b ? b : "", blen, &st);
	if (U_FAILURE(st)) {
		return sgFailed + (int)st;
	}
	return (int)r;
}

static void sg_ucol_version(const UCollator *c, char *buf) {
	UVersionInfo v;
	ucol_getVersion(c, v);
	u_versionToString(v, buf);
}

static const char *sg_u_error_name(int status) {
	return u_errorName((UErrorCode)status);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// icuAvailable says whether the proxy was built with ICU.
const icuAvailable = true

// icuCollator is an ICU collator opened for one locale string. Collators
// are never closed: there are as many as distinct ICU locales the proxy
// met. Comparing does not change a collator (ucol_strcollUTF8 takes a
// const UCollator, and ICU4C's const functions are safe to call from
// several threads on one object, unlike ucol_setAttribute, which the
// proxy never calls); opening one is the expensive part, so the process
// keeps one per locale and shares it.
type icuCollator struct {
	locale  string
	coll    *C.UCollator
	version string
}

// icuCollators caches the collators opened by locale, for the process.
var icuCollators sync.Map // string → *icuCollator

// openICU returns the collator of locale, opened as PostgreSQL opens it.
// ICU falls back to its root collation for a locale it has no data for
// (a warning, which PostgreSQL ignores too); the frontend's version check
// and probe compare what the proxy and the server then do.
func openICU(locale string) (*icuCollator, error) {
	if c, ok := icuCollators.Load(locale); ok {
		return c.(*icuCollator), nil
	}
	cloc := C.CString(locale)
	defer C.free(unsafe.Pointer(cloc))
	var status C.int
	coll := C.sg_ucol_open(cloc, &status)
	if coll == nil {
		return nil, fmt.Errorf("ucol_open(%q): %s", locale, C.GoString(C.sg_u_error_name(status)))
	}
	var buf [C.U_MAX_VERSION_STRING_LENGTH]C.char
	C.sg_ucol_version(coll, &buf[0])
	c := &icuCollator{locale: locale, coll: coll, version: C.GoString(&buf[0])}
	got, loaded := icuCollators.LoadOrStore(locale, c)
	if loaded {
		C.ucol_close(coll)
	}
	return got.(*icuCollator), nil
}

// strcoll compares UTF-8 strings a and b (-1, 0, +1). Go memory may be
// passed to C for the duration of a call as long as it holds no Go
// pointers.
func (c *icuCollator) strcoll(a, b []byte) (int, error) {
	r := C.sg_ucol_cmp(c.coll, cbytes(a), C.int(len(a)), cbytes(b), C.int(len(b)))
	if r >= C.sgFailed {
		return 0, fmt.Errorf("ucol_strcollUTF8 in locale %q: %s", c.locale, C.GoString(C.sg_u_error_name(r-C.sgFailed)))
	}
	return int(r), nil
}

// cbytes is the address of b's first byte, or nil when b is empty.
func cbytes(b []byte) *C.char {
	if len(b) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}
