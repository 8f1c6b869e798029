package frontend

import "testing"

// TestStateStrings checks every state's name, and that an unknown value
// is named rather than panicking.
func TestStateStrings(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{ClientIdle.String(), "idle"},
		{ClientClosed.String(), "closed"},
		{ClientState(42).String(), "ClientState(42)"},
		{ClientState(-1).String(), "ClientState(-1)"},
		{boundShards.String(), "shards"},
		{binding(9).String(), "binding(9)"},
		{pipe(0).String(), "rest"},
		{(pipeUnsynced | pipeSkipping).String(), "unsynced|skipping"},
		{(pipeErrored | 0x80).String(), "errored|pipe(0x80)"},
		{reqInternal.String(), "internal"},
		{reqKind(77).String(), "reqKind(77)"},
		{opDeallocAll.String(), "deallocate-all"},
		{opKind(99).String(), "opKind(99)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	var p pipe
	p.set(pipeUnsynced|pipeDropping, true)
	p.set(pipeUnsynced, false)
	if p != pipeDropping || !p.has(pipeDropping) || p.has(pipeDropping|pipeErrored) {
		t.Errorf("set/has: %v", p)
	}
}

func TestOutsideTxOnly(t *testing.T) {
	for sql, want := range map[string]bool{
		"VACUUM accounts":                        true,
		"vacuum (analyze) accounts":              true,
		"ANALYZE accounts":                       false,
		"/* x */ DISCARD ALL":                    true,
		"DISCARD TEMP":                           false,
		"CREATE INDEX CONCURRENTLY i ON t (a)":   true,
		"CREATE INDEX i ON t (a)":                false,
		"DROP INDEX CONCURRENTLY i":              true,
		"DROP TABLE t":                           false,
		"CREATE DATABASE d":                      true,
		"ALTER SYSTEM SET work_mem = '1MB'":      true,
		"ALTER TABLE t ADD COLUMN b int":         false,
		"REINDEX (CONCURRENTLY) TABLE t":         true,
		"REINDEX TABLE t":                        false,
		"CLUSTER":                                true,
		"CLUSTER t USING i":                      false,
		"COMMIT PREPARED 'x'":                    true,
		"COMMIT":                                 false,
		"SELECT 1":                               false,
		"ALTER DATABASE d SET TABLESPACE ts":     true,
		"ALTER DATABASE d SET work_mem TO '1MB'": false,
	} {
		if got := outsideTxOnly(sql); got != want {
			t.Errorf("outsideTxOnly(%q) = %v, want %v", sql, got, want)
		}
	}
}
