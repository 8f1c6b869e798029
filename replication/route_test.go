package replication

import (
	"testing"

	"github.com/shardgate/shardgate/router/sharding"
)

// TestRuleKey checks that rule.key, which parses integers itself, gives
// the key (or the failure) sharding.ParseKey gives for the same text.
func TestRuleKey(t *testing.T) {
	inputs := []string{"0", "1", "-1", "42", "32767", "32768", "-32768", "-32769", "2147483647", "2147483648",
		"-2147483649", "999999999999999999", "-999999999999999999", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "0042", "-0", "", "-", "+7", " 7", "7 ", "0x1f", "1_000", "1.5", "abc"}
	for _, typ := range []sharding.Type{sharding.Bigint, sharding.Integer, sharding.Smallint, sharding.Text} {
		r := rule{typ: typ}
		for _, in := range inputs {
			t.Run(typ.String()+"/"+in, func(t *testing.T) {
				got, gotErr := r.key([]byte(in))
				want, wantErr := sharding.ParseKey(typ, in)
				if (gotErr != nil) != (wantErr != nil) || got != want {
					t.Fatalf("key(%q) = %v, %v; ParseKey: %v, %v", in, got, gotErr, want, wantErr)
				}
			})
		}
	}
}
