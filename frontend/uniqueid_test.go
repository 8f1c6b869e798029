package frontend

import "testing"

func TestExpandUniqueIDs(t *testing.T) {
	n := int64(0)
	next := func() int64 { n++; return 100 + n }
	tests := map[string]string{
		"SELECT shardgate.unique_id()":                                            "SELECT 101",
		"INSERT INTO t VALUES (SHARDGATE.UNIQUE_ID ( ), 'shardgate.unique_id()')": "INSERT INTO t VALUES (102, 'shardgate.unique_id()')",
		"SELECT 1 -- shardgate.unique_id()":                                       "SELECT 1 -- shardgate.unique_id()",
		"SELECT $$shardgate.unique_id()$$, \"shardgate.unique_id()\"":             "SELECT $$shardgate.unique_id()$$, \"shardgate.unique_id()\"",
		"SELECT myshardgate.unique_id()":                                          "SELECT myshardgate.unique_id()",
		"SELECT shardgate.unique_id(), shardgate.unique_id()":                     "SELECT 103, 104",
		"SELECT E'it\\'s', shardgate.unique_id()":                                 "SELECT E'it\\'s', 105",
	}
	for in, want := range tests {
		n = 0
		switch in {
		case "INSERT INTO t VALUES (SHARDGATE.UNIQUE_ID ( ), 'shardgate.unique_id()')":
			n = 1
		case "SELECT shardgate.unique_id(), shardgate.unique_id()":
			n = 2
		case "SELECT E'it\\'s', shardgate.unique_id()":
			n = 4
		}
		if got := string(expandUniqueIDs([]byte(in), next)); got != want {
			t.Errorf("%q:\n got %q\nwant %q", in, got, want)
		}
	}
	if uniqueIDInParse([]byte("SELECT shardgate.unique_id()")) == nil {
		t.Error("Parse with unique_id accepted")
	}
	if uniqueIDInParse([]byte("SELECT 'shardgate.unique_id()'")) != nil {
		t.Error("literal refused")
	}
}

// TestMentionsUniqueID: the dot-anchored search finds the name in any case
// and at the text's edges, and nothing shorter or split.
func TestMentionsUniqueID(t *testing.T) {
	for sql, want := range map[string]bool{
		"shardgate.unique_id":                    true,
		"SELECT ShardGate.Unique_ID()":           true,
		"x.y.shardgate.unique_id":                true,
		"SELECT a.b, c.d, shardgate.unique_id()": true,
		"shardgate.unique_i":                     false,
		"hardgate.unique_id":                     false,
		"shardgate unique_id":                    false,
		"shardgate..unique_id":                   false,
		"SELECT 1":                               false,
		"":                                       false,
		".":                                      false,
	} {
		if got := mentionsUniqueID([]byte(sql)); got != want {
			t.Errorf("mentionsUniqueID(%q) = %v, want %v", sql, got, want)
		}
	}
}
