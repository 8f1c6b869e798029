package admin

import (
	"slices"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

func TestReshardParse(t *testing.T) {
	for _, tc := range []struct {
		sql   string
		words []string
		args  []string
		code  string
	}{
		{sql: "RESHARD app app_new;", words: []string{"RESHARD"}, args: []string{"app", "app_new"}},
		{sql: `schema_sync "my db" app_new`, words: []string{"SCHEMA_SYNC"}, args: []string{"my db", "app_new"}},
		{sql: "COPY_DATA app app_new", words: []string{"COPY_DATA"}, args: []string{"app", "app_new"}},
		{sql: "COPY_DATA app app_new pub", words: []string{"COPY_DATA"}, args: []string{"app", "app_new", "pub"}},
		{sql: `RESHARD app app_new "My Pub" my_slot`, words: []string{"RESHARD"}, args: []string{"app", "app_new", "My Pub", "my_slot"}},
		{sql: "RESHARD app app_new pub slot extra", code: wire.SyntaxError},
		{sql: "cutover", words: []string{"CUTOVER"}},
		{sql: "CUTOVER 3", words: []string{"CUTOVER"}, args: []string{"3"}},
		{sql: "STOP_TASK 3", words: []string{"STOP_TASK"}, args: []string{"3"}},
		{sql: "show tasks", words: []string{"SHOW", "TASKS"}},
		{sql: "SHOW TABLE_COPIES", words: []string{"SHOW", "TABLE_COPIES"}},
		{sql: "SHOW REPLICATION", words: []string{"SHOW", "REPLICATION"}},
		{sql: "RESHARD app", code: wire.SyntaxError},
		{sql: "STOP_TASK", code: wire.SyntaxError},
		{sql: "CUTOVER 1 2", code: wire.SyntaxError},
	} {
		x, err := parse(tc.sql)
		if tc.code != "" {
			if e, ok := wire.AsError(err); !ok || e.Code != tc.code {
				t.Errorf("%s: error %v, want SQLSTATE %s", tc.sql, err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.sql, err)
			continue
		}
		if !slices.Equal(x.spec.words, tc.words) || !slices.Equal(x.args, tc.args) && len(x.args)+len(tc.args) > 0 {
			t.Errorf("%s: parsed %v %v", tc.sql, x.spec.words, x.args)
		}
	}
}
