package pool

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/wire"
)

// TestNewStartup checks which parameter sets share a Key.
func TestNewStartup(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b map[string]string
		same bool
	}{
		{"empty is zero", nil, map[string]string{}, true},
		{"order does not matter", map[string]string{"DateStyle": "ISO", "TimeZone": "UTC"},
			map[string]string{"TimeZone": "UTC", "DateStyle": "ISO"}, true},
		{"setting names ignore case", map[string]string{"DateStyle": "ISO"}, map[string]string{"datestyle": "ISO"}, true},
		{"values do not", map[string]string{"DateStyle": "ISO"}, map[string]string{"DateStyle": "iso"}, false},
		// PostgreSQL takes "Options" for a setting (which does not exist).
		{"options is exact", map[string]string{"options": "-c work_mem=1MB"},
			map[string]string{"Options": "-c work_mem=1MB"}, false},
		{"a pair is not a name", map[string]string{"a": "b"}, map[string]string{"ab": ""}, false},
		{"pairs do not run together", map[string]string{"a": "b", "c": "d"},
			map[string]string{"a": "b\x00c\x00d"}, false},
		{"escapes do not collide", map[string]string{"a": "\x00"}, map[string]string{"a": "\x01\x02"}, false},
		{"the zero set differs from an empty value", nil, map[string]string{"search_path": ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewStartup(tc.a), NewStartup(tc.b)
			if same := a.Key() == b.Key(); same != tc.same {
				t.Fatalf("keys %q and %q: same = %v, want %v", a.Key(), b.Key(), same, tc.same)
			}
		})
	}
}

func TestNewStartupParams(t *testing.T) {
	in := map[string]string{"DateStyle": "ISO", "Options": "x", "_PQ_.x": "y", "extra_float_digits": "3"}
	st := NewStartup(in)
	in["DateStyle"] = "German"
	want := map[string]string{"datestyle": "ISO", "Options": "x", "_PQ_.x": "y", "extra_float_digits": "3"}
	if got := st.Params(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("params %v, want %v", got, want)
	}
	if st.IsZero() || !NewStartup(nil).IsZero() || NewStartup(nil).Params() != nil {
		t.Fatal("IsZero is wrong")
	}
	// Of two spellings of one setting, the one that sorts last wins,
	// whatever the map's order.
	for range 20 {
		st := NewStartup(map[string]string{"DateStyle": "ISO", "datestyle": "German", "DATESTYLE": "SQL"})
		if got := st.Params()["datestyle"]; got != "German" {
			t.Fatalf("datestyle %q, want German", got)
		}
	}
}

func TestStartupRejected(t *testing.T) {
	st := NewStartup(map[string]string{"work_mem": "bogus"})
	wrap := func(code string) error {
		return fmt.Errorf("server x: connect: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	for _, tc := range []struct {
		st   Startup
		err  error
		want bool
	}{
		{st, wrap(wire.InvalidParameterValue), true},
		{st, wrap(wire.UndefinedObject), true},
		{st, wrap(wire.InvalidName), true},
		{st, wrap(wire.SyntaxError), true},
		{st, wrap(wire.InsufficientPrivilege), true},
		{st, wrap(wire.CantChangeRuntimeParam), true},
		{st, wrap(wire.ActiveSQLTransaction), true},
		{st, wrap(wire.FeatureNotSupported), true},
		{st, wrap(wire.InvalidPassword), false},    // password authentication failed
		{st, wrap(wire.InvalidCatalogName), false}, // database does not exist
		{st, wrap(wire.TooManyConnections), false}, // too many connections
		{st, wrap(wire.CannotConnectNow), false},   // the database system is starting up
		{st, errors.New("dial tcp: connection refused"), false},
		{Startup{}, wrap(wire.InvalidParameterValue), false},
		{Startup{}, wrap(wire.InsufficientPrivilege), false},
	} {
		if got := startupRejected(tc.st, tc.err); got != tc.want {
			t.Errorf("startupRejected(%q, %v) = %v, want %v", tc.st.Key(), tc.err, got, tc.want)
		}
	}
	err := fmt.Errorf("checkout: %w", &StartupRejectedError{Startup: st, Err: wrap(wire.InvalidParameterValue)})
	var pe *pgconn.PgError
	if !IsStartupRejected(err) || !errors.As(err, &pe) || pe.Code != wire.InvalidParameterValue {
		t.Fatalf("IsStartupRejected = %v, PgError %v", IsStartupRejected(err), pe)
	}
	if IsStartupRejected(wrap(wire.InvalidParameterValue)) {
		t.Fatal("a bare PgError is not a rejection: only the pool knows the Startup")
	}
}

// TestParamCacheBound: the cache keeps at most maxCachedParams Startups
// besides the zero one, dropping the least recently used.
func TestParamCacheBound(t *testing.T) {
	var c paramCache
	c.add("", map[string]string{"DateStyle": "ISO, MDY"})
	hot := NewStartup(map[string]string{"DateStyle": "German"}).Key()
	c.add(hot, map[string]string{"DateStyle": "German, DMY"})
	for i := range 10 * maxCachedParams {
		c.add(NewStartup(map[string]string{"application_name": fmt.Sprint(i)}).Key(), map[string]string{})
		c.get(hot)
		if len(c.keys) > maxCachedParams {
			t.Fatalf("%d keys cached", len(c.keys))
		}
	}
	if c.get("")["DateStyle"] != "ISO, MDY" {
		t.Fatal("the zero Startup's entry was evicted")
	}
	if c.get(hot)["DateStyle"] != "German, DMY" {
		t.Fatal("a recently used entry was evicted")
	}
	if c.get(NewStartup(map[string]string{"application_name": "0"}).Key()) != nil {
		t.Fatal("the oldest entry was kept")
	}
}
