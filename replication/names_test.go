package replication

import (
	"strings"
	"testing"

	"github.com/shardgate/shardgate/config"
)

func TestUseNames(t *testing.T) {
	src := func(n int) *config.Database {
		return &config.Database{Name: "app", Shards: make([]config.Shard, n)}
	}
	dst := &config.Database{Name: "app_new", Shards: make([]config.Shard, 2)}
	for _, tc := range []struct {
		name    string
		sources int
		names   Names
		slots   []string // want, when valid
		pubs    []string
		err     string // substring of the error, when invalid
	}{
		{name: "own", sources: 2, slots: []string{"sg_app_to_app_new_0", "sg_app_to_app_new_1"},
			pubs: []string{"sg_app_to_app_new_0", "sg_app_to_app_new_1"}},
		{name: "one source", sources: 1, names: Names{Publication: "Accounts Pub", Slot: "my_slot1"},
			slots: []string{"my_slot1"}, pubs: []string{"Accounts Pub"}},
		{name: "several sources", sources: 3, names: Names{Slot: "s"},
			slots: []string{"s_0", "s_1", "s_2"}, pubs: []string{"sg_app_to_app_new_0", "sg_app_to_app_new_1", "sg_app_to_app_new_2"}},
		{name: "63 bytes", sources: 1, names: Names{Slot: strings.Repeat("a", 63)}, slots: []string{strings.Repeat("a", 63)},
			pubs: []string{"sg_app_to_app_new_0"}},
		{name: "too long with suffix", sources: 2, names: Names{Slot: strings.Repeat("a", 62)}, err: "longer than 63"},
		{name: "too long with two-digit suffix", sources: 11, names: Names{Slot: strings.Repeat("a", 61)}, err: "longer than 63"},
		{name: "upper case", sources: 1, names: Names{Slot: "MySlot"}, err: "lower-case"},
		{name: "dash", sources: 1, names: Names{Slot: "my-slot"}, err: "lower-case"},
		{name: "long publication", sources: 1, names: Names{Publication: strings.Repeat("p", 64)}, err: "longer than 63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := New(src(tc.sources), dst, "u", "p", nil)
			if err != nil {
				t.Fatal(err)
			}
			err = task.UseNames(tc.names)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("UseNames(%+v) = %v, want an error with %q", tc.names, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := task.SlotNames(); strings.Join(got, ",") != strings.Join(tc.slots, ",") {
				t.Errorf("slots %v, want %v", got, tc.slots)
			}
			if got := task.Publications(); strings.Join(got, ",") != strings.Join(tc.pubs, ",") {
				t.Errorf("publications %v, want %v", got, tc.pubs)
			}
		})
	}
}
