package replication

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// table is one published table of a source shard and where its rows go.
type table struct {
	schema, name string
	columns      []string // copied columns in catalog order: not dropped, not generated
	identity     byte     // relreplident: d(efault), i(ndex), f(ull), n(othing)
	keyColumns   []string // the replica identity's columns (empty for full and nothing)
	rule         rule
	keyIndex     int // index of rule.column in columns, for sharded tables
}

func (tb *table) String() string { return tb.schema + "." + tb.name }

func (tb *table) ident() string { return qualified(tb.schema, tb.name) }

// loadTables lists the ordinary tables of a source shard outside the system
// schemas, which is what a FOR ALL TABLES publication publishes, with their
// destination rules.
func (t *Task) loadTables(ctx context.Context, conn *pgx.Conn) ([]*table, error) {
	rows, err := conn.Query(ctx, `
SELECT n.nspname, c.relname, c.relreplident,
	ARRAY(SELECT a.attname FROM pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum)::text[],
	ARRAY(SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))
		ORDER BY a.attnum)::text[]
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence = 'p'
	AND n.nspname NOT IN ('pg_catalog', 'information_schema', $1) AND n.nspname NOT LIKE 'pg\_%'
ORDER BY 1, 2`, bookkeepingSchema)
	if err != nil {
		return nil, err
	}
	var tables []*table
	for rows.Next() {
		tb := &table{}
		var ident string
		if err := rows.Scan(&tb.schema, &tb.name, &ident, &tb.columns, &tb.keyColumns); err != nil {
			return nil, err
		}
		tb.identity = ident[0]
		tables = append(tables, tb)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, tb := range tables {
		if tb.rule, err = ruleFor(t.dst, tb.schema, tb.name, tb.columns); err != nil {
			return nil, err
		}
		tb.keyIndex = slices.Index(tb.columns, tb.rule.column)
	}
	return tables, nil
}

// checkIdentity returns an error when the stream could not apply UPDATE and
// DELETE for the table: no replica identity, or a sharding key outside it
// (then an UPDATE that moves a row between shards carries no old key).
func checkIdentity(tb *table) error {
	switch {
	case tb.identity == 'f':
		return nil
	case tb.identity == 'n' || len(tb.keyColumns) == 0:
		return fmt.Errorf("table %s has no primary key or replica identity index; add one or set REPLICA IDENTITY FULL", tb)
	case tb.rule.place == placeSharded && !slices.Contains(tb.keyColumns, tb.rule.column):
		return fmt.Errorf("table %s: sharding column %q is not part of the replica identity (%v); "+
			"an UPDATE of it could not find the old row; include it in the primary key or set REPLICA IDENTITY FULL",
			tb, tb.rule.column, tb.keyColumns)
	}
	return nil
}
