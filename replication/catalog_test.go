package replication

import (
	"strings"
	"testing"
)

// TestCheckIdentity: a partition is checked with its root's rule and its
// own replica identity, and the error names the root.
func TestCheckIdentity(t *testing.T) {
	sharded := rule{place: placeSharded, column: "id"}
	leaf := func(identity byte, key ...string) *table {
		return &table{schema: "public", name: "events_2024", rootSchema: "public", rootName: "events",
			identity: identity, keyColumns: key, rule: sharded}
	}
	for _, tc := range []struct {
		name string
		tb   *table
		want string // substring of the error; empty: no error
	}{
		{"ordinary", &table{schema: "public", name: "t", rootSchema: "public", rootName: "t", identity: 'd', keyColumns: []string{"id"}, rule: sharded}, ""},
		{"partition key includes sharding column", leaf('d', "created", "id"), ""},
		{"partition full", leaf('f'), ""},
		{"partition without key", leaf('d'), "public.events_2024 (partition of public.events) has no primary key"},
		{"partition key without sharding column", leaf('d', "created", "seq"),
			`public.events_2024 (partition of public.events): sharding column "id" is not part of the replica identity`},
		{"partition hint", leaf('n'), "REPLICA IDENTITY FULL on every partition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkIdentity(tc.tb)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("checkIdentity: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("checkIdentity: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
