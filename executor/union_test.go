package executor

import (
	"reflect"
	"testing"
)

func TestDedupMerge(t *testing.T) {
	cols := []Column{{Name: "id", OID: oidInt8}, {Name: "name", OID: oidText}}
	// Each shard's rows are distinct and sorted by every column; rows of
	// different shards that are equal come together in the merge.
	a := [][]string{{"1", "a"}, {"2", "b"}, {"2", "c"}, {"NULL", "x"}, {"NULL", "NULL"}}
	b := [][]string{{"1", "a"}, {"2", "c"}, {"3", "c"}, {"NULL", "NULL"}}
	for _, tc := range []struct {
		name string
		spec Spec
		want [][]string
	}{
		{"all", Spec{OrderBy: []SortKey{{Col: 0}, {Col: 1}}, Limit: -1, Dedup: true},
			[][]string{{"1", "a"}, {"2", "b"}, {"2", "c"}, {"3", "c"}, {"NULL", "x"}, {"NULL", "NULL"}}},
		{"LIMIT OFFSET count kept rows", Spec{OrderBy: []SortKey{{Col: 0}, {Col: 1}}, Limit: 2, Offset: 1, Dedup: true},
			[][]string{{"2", "b"}, {"2", "c"}}},
		{"WITH TIES by the first key", Spec{OrderBy: []SortKey{{Col: 0}, {Col: 1}}, Limit: 2, Dedup: true, WithTies: 1},
			[][]string{{"1", "a"}, {"2", "b"}, {"2", "c"}}},
		{"WITH TIES by both keys", Spec{OrderBy: []SortKey{{Col: 0}, {Col: 1}}, Limit: 2, Dedup: true, WithTies: 2},
			[][]string{{"1", "a"}, {"2", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, tc.spec, cols, a, b); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWithTiesMerge(t *testing.T) {
	cols := []Column{{Name: "k", OID: oidInt8}, {Name: "id", OID: oidInt8}}
	a := [][]string{{"1", "1"}, {"2", "2"}, {"2", "3"}, {"3", "4"}}
	b := [][]string{{"2", "5"}, {"2", "6"}, {"4", "7"}}
	key := []SortKey{{Col: 0}}
	for _, tc := range []struct {
		name          string
		limit, offset int64
		want          []string // the ids
	}{
		{"ties after the limit", 2, 0, []string{"1", "2", "3", "5", "6"}},
		{"no ties", 1, 0, []string{"1"}},
		{"OFFSET then ties", 1, 1, []string{"2", "3", "5", "6"}},
		{"OFFSET past ties", 2, 4, []string{"6", "4"}},
		{"LIMIT 0", 0, 0, nil},
		{"past the end", 5, 5, []string{"4", "7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, Spec{OrderBy: key, Limit: tc.limit, Offset: tc.offset, WithTies: 1}, cols, a, b)
			var ids []string
			for _, r := range got {
				ids = append(ids, r[1])
			}
			if !reflect.DeepEqual(ids, tc.want) {
				t.Fatalf("got %v, want %v", ids, tc.want)
			}
		})
	}
}
