package replication

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// table is one published table of a source shard and where its rows go.
type table struct {
	schema, name string
	// rootSchema and rootName name the table whose rule applies: for a
	// leaf partition the root of its partition tree (the table the config
	// names), else the table itself.
	rootSchema, rootName string
	columns              []string // copied columns in catalog order: not dropped, not generated
	identity             byte     // relreplident: d(efault), i(ndex), f(ull), n(othing)
	keyColumns           []string // the replica identity's columns (empty for full and nothing)
	rule                 rule
	keyIndex             int // index of rule.column in columns, for sharded tables
}

func (tb *table) String() string { return tb.schema + "." + tb.name }

func (tb *table) ident() string { return qualified(tb.schema, tb.name) }

// partition reports whether the table is a leaf partition.
func (tb *table) partition() bool { return tb.rootSchema != tb.schema || tb.rootName != tb.name }

// describe names the table in messages, with its root when it is a partition.
func (tb *table) describe() string {
	if tb.partition() {
		return fmt.Sprintf("%s (partition of %s.%s)", tb, tb.rootSchema, tb.rootName)
	}
	return tb.String()
}

// loadTables lists the ordinary tables of a source shard outside the system
// schemas, which is what a FOR ALL TABLES publication publishes, with their
// destination rules.
//
// With declarative partitioning the rows live in the leaf partitions
// (relkind 'r', relispartition); the partitioned tables above them (relkind
// 'p') hold none and are not listed. The publication publishes the leaves
// under their own names (publish_via_partition_root is off), so each leaf is
// copied and streamed to the same leaf on the destination, which SchemaSync
// creates with the whole partition tree. A leaf takes the rule of the root
// of its tree, however deep, as the router routes the root's name; the
// leaves have the root's column names.
//
// With a publication given to UseNames, only the tables it publishes are
// listed (pg_publication_tables, which lists the leaves of a published
// partitioned table, since checkNames refuses publish_via_partition_root).
func (t *Task) loadTables(ctx context.Context, conn *pgx.Conn) ([]*table, error) {
	rows, err := conn.Query(ctx, `
SELECT n.nspname, c.relname, coalesce(rn.nspname, n.nspname), coalesce(r.relname, c.relname), c.relreplident,
	ARRAY(SELECT a.attname FROM pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum)::text[],
	ARRAY(SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))
		ORDER BY a.attnum)::text[]
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	LEFT JOIN pg_class r ON c.relispartition AND r.oid = pg_partition_root(c.oid)
	LEFT JOIN pg_namespace rn ON rn.oid = r.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence = 'p'
	AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname <> ALL ($1::text[]) AND n.nspname NOT LIKE 'pg\_%'
	AND ($2::text = '' OR EXISTS (SELECT 1 FROM pg_publication_tables pt
		WHERE pt.pubname = $2 AND pt.schemaname = n.nspname AND pt.tablename = c.relname))
ORDER BY 1, 2`, ownSchemas, t.names.Publication)
	if err != nil {
		return nil, err
	}
	var tables []*table
	for rows.Next() {
		tb := &table{}
		var ident string
		if err := rows.Scan(&tb.schema, &tb.name, &tb.rootSchema, &tb.rootName, &ident, &tb.columns, &tb.keyColumns); err != nil {
			return nil, err
		}
		tb.identity = ident[0]
		tables = append(tables, tb)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, tb := range tables {
		if tb.rule, err = ruleFor(t.dst, tb.rootSchema, tb.rootName, tb.columns); err != nil {
			if tb.partition() {
				err = fmt.Errorf("partition %s: %w", tb, err)
			}
			return nil, err
		}
		tb.keyIndex = slices.Index(tb.columns, tb.rule.column)
	}
	return tables, nil
}

// ruleTable returns the table whose rule applies to the streamed relation
// m: its partition root when m is a partition, else m itself. Owned tables
// know it from loadTables; for the others (omni tables of another source
// shard, tables that are new since the stream started) the source's catalog
// says, so that a new partition of a sharded table is not mistaken for an
// omni table.
func (r *reader) ruleTable(ctx context.Context, m *pglogrepl.RelationMessage) (schema, name string, err error) {
	if tb := r.tables[m.Namespace+"."+m.RelationName]; tb != nil {
		return tb.rootSchema, tb.rootName, nil
	}
	src, err := r.source(ctx)
	if err != nil {
		return "", "", err
	}
	// pg_partition_root is NULL for a relation that is not in a partition
	// tree: then m's own name applies. A relation that is not visible yet
	// was created by the transaction being streamed, whose commit the
	// walsender can send a moment before other sessions see it: wait for
	// it (a relation dropped since never shows up; after a bound, its own
	// name applies).
	deadline := time.Now().Add(relationVisibleWait)
	for {
		var visible bool
		var rs, rn *string
		err = src.QueryRow(ctx, `SELECT c.oid IS NOT NULL, n.nspname, r.relname
			FROM (SELECT $1::oid AS id) x LEFT JOIN pg_class c ON c.oid = x.id
			LEFT JOIN pg_class r ON r.oid = pg_partition_root(x.id) LEFT JOIN pg_namespace n ON n.oid = r.relnamespace`,
			m.RelationID).Scan(&visible, &rs, &rn)
		if err != nil {
			return "", "", fmt.Errorf("relation %s.%s: find its partition root: %w", m.Namespace, m.RelationName, err)
		}
		switch {
		case rs != nil && rn != nil:
			return *rs, *rn, nil
		case visible || time.Now().After(deadline):
			return m.Namespace, m.RelationName, nil
		}
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// relationVisibleWait bounds the wait for a streamed relation the source
// does not show yet (ruleTable).
const relationVisibleWait = 2 * time.Second

// checkIdentity returns an error when the stream could not apply UPDATE and
// DELETE for the table: no replica identity, or a sharding key outside it
// (then an UPDATE that moves a row between shards carries no old key).
//
// A partition is checked with its root's rule but its own replica identity:
// its changes are published under its own name and carry its identity. Its
// primary key is the root's (which must include the partition key), but
// ALTER TABLE … REPLICA IDENTITY does not recurse to partitions.
func checkIdentity(tb *table) error {
	hint := "set REPLICA IDENTITY FULL"
	if tb.partition() {
		hint += " on every partition"
	}
	switch {
	case tb.identity == 'f':
		return nil
	case tb.identity == 'n' || len(tb.keyColumns) == 0:
		return fmt.Errorf("table %s has no primary key or replica identity index; add one or %s", tb.describe(), hint)
	case tb.rule.place == placeSharded && !slices.Contains(tb.keyColumns, tb.rule.column):
		return fmt.Errorf("table %s: sharding column %q is not part of the replica identity (%v); "+
			"an UPDATE of it could not find the old row; include it in the primary key or %s",
			tb.describe(), tb.rule.column, tb.keyColumns, hint)
	}
	return nil
}
