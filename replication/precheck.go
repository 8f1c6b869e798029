package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// checkServers reports what would stop the task later, before it starts:
// a user that is not a superuser (publications FOR ALL TABLES, replication
// origins and session_replication_role need one), a slot or publication
// that does not fit (checkNames), a source without a free
// replication slot or WAL sender, a destination without room for one
// replication origin per source shard, and tables whose columns differ
// between the source shards or from a destination table that already
// exists. Every problem names its shard and table.
func (t *Task) checkServers(ctx context.Context) []error {
	var errs []error
	var want map[string][]string // source shard 0's tables: columns with types
	for s := range t.src.Shards {
		desc := shardDesc("source", t.src, s)
		conn, err := t.connectSource(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, checkSuperuser(ctx, conn, desc)...)
		errs = append(errs, t.checkNames(ctx, conn, s)...)
		var slotExists bool
		var freeSlots, freeSenders int
		err = conn.QueryRow(ctx, `SELECT
	EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
	current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots),
	current_setting('max_wal_senders')::int - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')`,
			t.slotName(s)).Scan(&slotExists, &freeSlots, &freeSenders)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", desc, err))
		} else {
			if !slotExists && freeSlots < 1 {
				errs = append(errs, fmt.Errorf("%s: no free replication slot (max_replication_slots is reached); the task needs one per source shard, and one more while a copy is redone", desc))
			}
			if freeSenders < 1 {
				errs = append(errs, fmt.Errorf("%s: no free WAL sender (max_wal_senders is reached); the task needs one per source shard", desc))
			}
		}
		cols, err := tableColumns(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", desc, err))
			continue
		}
		if want == nil {
			want = cols
			continue
		}
		errs = append(errs, compareTables(want, cols, shardDesc("source", t.src, 0), desc, true)...)
	}
	for d := range t.dst.Shards {
		desc := shardDesc("destination", t.dst, d)
		conn, err := t.connectDest(ctx, d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, checkSuperuser(ctx, conn, desc)...)
		var free int
		err = conn.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int
	- (SELECT count(*) FROM pg_replication_origin WHERE roname NOT LIKE $1)`, strings.ReplaceAll(t.Name, "_", `\_`)+`\_%`).Scan(&free)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", desc, err))
		} else if free < len(t.src.Shards) {
			errs = append(errs, fmt.Errorf("%s: room for %d replication origins (max_replication_slots less the origins in use); the task needs one per source shard: %d",
				desc, max(free, 0), len(t.src.Shards)))
		}
		cols, err := tableColumns(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", desc, err))
			continue
		}
		if want != nil {
			errs = append(errs, compareTables(want, cols, shardDesc("source", t.src, 0), desc, false)...)
		}
	}
	return errs
}

func checkSuperuser(ctx context.Context, conn *pgx.Conn, desc string) []error {
	var user string
	var super bool
	if err := conn.QueryRow(ctx, `SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&user, &super); err != nil {
		return []error{fmt.Errorf("%s: %w", desc, err)}
	}
	if !super {
		return []error{fmt.Errorf("%s: user %q is not a superuser; resharding needs one (publications FOR ALL TABLES, replication origins, session_replication_role)", desc, user)}
	}
	return nil
}

// tableColumns returns the tables (ordinary and partitioned) outside the
// system and bookkeeping schemas, by schema.table, each with its columns
// as "name type" in column order.
func tableColumns(ctx context.Context, conn *pgx.Conn) (map[string][]string, error) {
	rows, err := conn.Query(ctx, `
SELECT n.nspname || '.' || c.relname,
	ARRAY(SELECT quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum)::text[]
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
	AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname <> ALL ($1::text[]) AND n.nspname NOT LIKE 'pg\_%'`, ownSchemas)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	var name string
	var cols []string
	_, err = pgx.ForEachRow(rows, []any{&name, &cols}, func() error {
		out[name] = slices.Clone(cols)
		return nil
	})
	return out, err
}

// compareTables reports the tables of got whose columns differ from
// want's, and with all set, the tables one side lacks. A destination may
// lack tables (schema sync creates them) but not have them different.
func compareTables(want, got map[string][]string, wantDesc, gotDesc string, all bool) []error {
	var errs []error
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		g, ok := got[name]
		switch {
		case !ok && all:
			errs = append(errs, fmt.Errorf("%s: table %s is missing (it exists on %s)", gotDesc, name, wantDesc))
		case ok && !slices.Equal(want[name], g):
			errs = append(errs, fmt.Errorf("%s: table %s has columns (%s), but on %s (%s)",
				gotDesc, name, strings.Join(g, ", "), wantDesc, strings.Join(want[name], ", ")))
		}
	}
	if all {
		for name := range got {
			if _, ok := want[name]; !ok {
				errs = append(errs, fmt.Errorf("%s: table %s is not on %s, where the schema is taken from", gotDesc, name, wantDesc))
			}
		}
	}
	return errs
}
