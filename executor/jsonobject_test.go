package executor

import "testing"

// TestMergeJSONBObjects: partial jsonb objects merge into jsonb's key
// order (shorter keys first, then by bytes of the decoded key), the later
// partial's value winning for a key both have; strings with escapes,
// commas and brackets inside keys and values are read whole.
func TestMergeJSONBObjects(t *testing.T) {
	cases := []struct{ cur, v, want string }{
		{`{"a": 1}`, `{"b": 2}`, `{"a": 1, "b": 2}`},
		{`{"bb": 1, "ccc": [1, 2]}`, `{"a": {"x": "}, ]"}}`, `{"a": {"x": "}, ]"}, "bb": 1, "ccc": [1, 2]}`},
		{`{"k": "old", "z": null}`, `{"k": "new"}`, `{"k": "new", "z": null}`},
		// "\\" decodes to 1 byte, "\"q" to 2, "\u00e9" to 2 (0xc3 0xa9, after 0x22).
		{`{"\"q": true}`, `{"\\": false, "\u00e9": 1.5e+10}`, `{"\\": false, "\"q": true, "\u00e9": 1.5e+10}`},
		{`{}`, `{"a, b": "c, d"}`, `{"a, b": "c, d"}`},
	}
	for _, tc := range cases {
		got, err := mergeJSONBObjects([]byte(tc.cur), []byte(tc.v), false)
		if err != nil || string(got) != tc.want {
			t.Errorf("merge(%s, %s) = %s, %v; want %s", tc.cur, tc.v, got, err, tc.want)
		}
	}
	got, err := mergeJSONBObjects([]byte("\x01"+`{"b": 1}`), []byte("\x01"+`{"a": 2}`), true)
	if err != nil || string(got) != "\x01"+`{"a": 2, "b": 1}` {
		t.Errorf("binary merge = %q, %v", got, err)
	}
	for _, bad := range []string{`{"a": 1`, `{"a" 1}`, `["a"]`, `{"a": "x}`} {
		if _, err := mergeJSONBObjects([]byte(`{"z": 0}`), []byte(bad), false); err == nil {
			t.Errorf("merge with %s: no error", bad)
		}
	}
	if got, err := appendJSONObject([]byte(`{ "a" : 1 }`), []byte(`{ "b" : [1, 2] }`)); err != nil || string(got) != `{ "a" : 1, "b" : [1, 2] }` {
		t.Errorf("appendJSONObject = %s, %v", got, err)
	}
}
