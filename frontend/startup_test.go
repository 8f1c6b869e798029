package frontend

import (
	"reflect"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

func TestParseStartup(t *testing.T) {
	tests := []struct {
		name    string
		pkt     string
		want    *startup
		errCode string
	}{
		{"user only", "user\x00bob\x00\x00", &startup{user: "bob", database: "bob", params: map[string]string{}}, ""},
		{"params and options", "user\x00bob\x00database\x00app\x00application_name\x00psql\x00options\x00-c search_path=a,b --statement-timeout=5s -cwork_mem=1MB\x00\x00",
			&startup{user: "bob", database: "app", params: map[string]string{"application_name": "psql", "search_path": "a,b", "statement_timeout": "5s", "work_mem": "1MB"}}, ""},
		{"escaped space", "user\x00bob\x00options\x00-c application_name=a\\ b\x00\x00",
			&startup{user: "bob", database: "bob", params: map[string]string{"application_name": "a b"}}, ""},
		{"no user", "database\x00app\x00\x00", nil, wire.InvalidAuthorizationSpecification},
		{"replication", "user\x00bob\x00replication\x00database\x00\x00", nil, wire.FeatureNotSupported},
		{"unterminated", "user\x00bob", nil, wire.ProtocolViolation},
		{"bad option", "user\x00bob\x00options\x00-x\x00\x00", nil, wire.FeatureNotSupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStartup([]byte(tc.pkt))
			if tc.errCode != "" {
				e, ok := wire.AsError(err)
				if !ok || e.Code != tc.errCode {
					t.Fatalf("want SQLSTATE %s, got %v", tc.errCode, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v want %+v", got, tc.want)
			}
		})
	}
}

// TestSettingsWords: scanEffects flags a query for parsing when one of its
// statements starts with SET, RESET, DISCARD or DEALLOCATE.
func TestSettingsWords(t *testing.T) {
	tests := map[string]bool{
		"SET x = 1":                        true,
		"  /* c */ reset all":              true,
		"-- hi\nDISCARD ALL":               true,
		"select 1; Set search_path to a":   true,
		"deallocate all":                   true,
		"SELECT 1":                         false,
		"UPDATE t SET x = 1":               false,
		"settle":                           false,
		"select 'a;b'":                     false,
		"/* unterminated":                  false,
		"SELECT set_config('a','b',false)": false,
	}
	for sql, want := range tests {
		if got := scanEffects([]byte(sql))&effSettings != 0; got != want {
			t.Errorf("%q: got %v want %v", sql, got, want)
		}
	}
}

func TestSessionOps(t *testing.T) {
	ops, err := sessionOps("SET search_path TO a, b; SET LOCAL work_mem = '1MB'; RESET timezone; SET shardgate.shard = 1; DISCARD ALL")
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 5 || ops[0].kind != opSet || ops[0].name != "search_path" || ops[1].kind != opLocal || ops[1].name != "work_mem" ||
		ops[2].kind != opReset || ops[2].name != "timezone" || ops[3].kind != opHint || ops[3].stmt != "1" || ops[4].kind != opDiscardAll {
		t.Fatalf("ops %+v", ops)
	}
	if ops[0].stmt != "SET search_path TO a, b" {
		t.Fatalf("stmt %q", ops[0].stmt)
	}
}

// FuzzParseStartup: the startup packet comes from untrusted clients; it
// must never panic.
func FuzzParseStartup(f *testing.F) {
	f.Add([]byte("user\x00bob\x00database\x00app\x00\x00"))
	f.Add([]byte("user\x00bob\x00options\x00-c a=b --c=d \\\x00\x00"))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStartup(b)
	})
}
