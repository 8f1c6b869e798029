package executor

// The C library's collation, as PostgreSQL uses it for a collation whose
// provider is libc: newlocale with LC_COLLATE_MASK, then strcoll_l
// (src/backend/utils/adt/pg_locale.c, pg_newlocale_from_collation, and
// varlena.c, varstr_cmp). The proxy is built with cgo already (pg_query_go),
// so this costs no new dependency.

/*
#define _GNU_SOURCE
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#ifdef __APPLE__
#include <xlocale.h>
#endif
#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

static locale_t sg_newlocale(const char *name) {
	return newlocale(LC_COLLATE_MASK, name, (locale_t)0);
}

static int sg_strcoll(const char *a, const char *b, locale_t loc) {
	return strcoll_l(a, b, loc);
}

// sg_libc_version is what PostgreSQL reports as the version of a libc
// collation on glibc (get_collation_actual_version), or NULL elsewhere.
static const char *sg_libc_version(void) {
#ifdef __GLIBC__
	return gnu_get_libc_version();
#else
	return NULL;
#endif
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// libcLocale is a locale_t opened for LC_COLLATE. Locales are never freed:
// there are as many as distinct collation names the proxy met, and a
// locale_t may be used from any thread.
type libcLocale struct {
	name string
	loc  C.locale_t
}

// libcLocales caches the locales opened by name, for the process.
var libcLocales sync.Map // string → *libcLocale

// openLibcLocale returns the locale name for LC_COLLATE, or an error when
// the C library does not know it (the locale is not installed on the
// proxy's machine).
func openLibcLocale(name string) (*libcLocale, error) {
	if l, ok := libcLocales.Load(name); ok {
		return l.(*libcLocale), nil
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	loc, err := C.sg_newlocale(cname)
	if loc == nil {
		return nil, fmt.Errorf("newlocale(LC_COLLATE_MASK, %q): %v", name, err)
	}
	l, loaded := libcLocales.LoadOrStore(name, &libcLocale{name: name, loc: loc})
	if loaded {
		C.freelocale(loc)
	}
	return l.(*libcLocale), nil
}

// strcoll compares two NUL-terminated strings held in Go memory: a and b
// each end with a 0 byte. Go memory may be passed to C for the duration of
// a call as long as it holds no Go pointers.
func (l *libcLocale) strcoll(a, b []byte) int {
	return int(C.sg_strcoll((*C.char)(unsafe.Pointer(&a[0])), (*C.char)(unsafe.Pointer(&b[0])), l.loc))
}

// LibcVersion returns the version of the proxy's C library the way
// PostgreSQL reports the version of a libc collation on glibc
// (gnu_get_libc_version, e.g. "2.36"), or "" when the proxy is not built
// against glibc.
func LibcVersion() string {
	v := C.sg_libc_version()
	if v == nil {
		return ""
	}
	return C.GoString(v)
}
