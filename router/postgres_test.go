package router

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestRewrittenSQLOnPostgres prepares every statement the router rewrites
// on a real server: it must be valid, return the client's columns under the
// client's names, followed by exactly Merge.HiddenColumns more.
func TestRewrittenSQLOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	c := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE accounts (id bigint PRIMARY KEY, name text, country text,
		balance numeric, active bool, created_at timestamptz, parent bigint)`); err != nil {
		t.Fatal(err)
	}
	r := newTestRouter(t, nil)
	fields := func(sql string) []string {
		t.Helper()
		sd, err := conn.Prepare(ctx, "", sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var names []string
		for _, f := range sd.Fields {
			names = append(names, f.Name)
		}
		return names
	}
	for _, tc := range mergeCases {
		if tc.want == nil || tc.want.Rewritten == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			plan, err := route(r, tc.sql, nil, nil, Hints{})
			if err != nil {
				t.Fatal(err)
			}
			m := plan.Merge
			client, shard := fields(tc.sql), fields(m.Rewritten)
			if len(shard) != len(client)+m.HiddenColumns || !slices.Equal(shard[:len(client)], client) {
				t.Fatalf("%s\nclient columns %q\nshard columns  %q (%d hidden)", m.Rewritten, client, shard, m.HiddenColumns)
			}
		})
	}
	t.Run("InsertSQL", func(t *testing.T) {
		s, err := r.Analyze("INSERT INTO accounts (id, name) VALUES ($1, $2), ($3, upper($4)) ON CONFLICT (id) DO UPDATE SET name = $5")
		if err != nil {
			t.Fatal(err)
		}
		sql, ps, err := s.InsertSQL([]int{1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, sql, "3", "x", "y"); err != nil || !slices.Equal(ps, []int{2, 3, 4}) {
			t.Fatalf("%s %v: %v", sql, ps, err)
		}
	})
}
