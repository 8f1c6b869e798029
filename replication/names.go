package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Names are the publication and slot a task uses when the user names them
// (RESHARD src dst publication slot; data-sync -publication -slot). The zero
// value is the task's own: a publication FOR ALL TABLES and a slot per
// source shard, both named <task>_<shard>, created by Copy and dropped by
// Drop.
type Names struct {
	// Publication is a publication that exists on every source shard. Only
	// its tables are copied and streamed, and Drop leaves it in place.
	Publication string
	// Slot names the permanent slot of each source shard: Slot itself
	// with one source shard, Slot_<shard> with several. Copy creates it,
	// or reuses it when it exists (a logical pgoutput slot of the shard's
	// database); Drop drops it either way.
	Slot string
}

func (n Names) String() string {
	pub, slot := "the task's own", "the task's own"
	if n.Publication != "" {
		pub = strconv.Quote(n.Publication)
	}
	if n.Slot != "" {
		slot = strconv.Quote(n.Slot)
	}
	return "publication " + pub + ", slot " + slot
}

// maxNameLen is PostgreSQL's limit on identifiers and slot names
// (NAMEDATALEN - 1).
const maxNameLen = 63

// UseNames makes the task use the publication and slot of n. It only checks
// the names' syntax; CheckNames (and Copy, through Check) checks them
// against the source shards. Call it before Copy.
func (t *Task) UseNames(n Names) error {
	if n.Publication != "" && len(n.Publication) > maxNameLen {
		return fmt.Errorf("publication name %q is longer than %d bytes", n.Publication, maxNameLen)
	}
	if n.Slot != "" {
		if err := validSlotName(n.Slot, len(t.src.Shards)); err != nil {
			return err
		}
	}
	t.names = n
	return nil
}

// Names returns the names given to UseNames.
func (t *Task) Names() Names { return t.names }

// SlotNames returns the permanent slot of every source shard.
func (t *Task) SlotNames() []string {
	out := make([]string, len(t.src.Shards))
	for s := range out {
		out[s] = t.slotName(s)
	}
	return out
}

// Publications returns the publication the stream of every source shard
// uses.
func (t *Task) Publications() []string {
	out := make([]string, len(t.src.Shards))
	for s := range out {
		out[s] = t.publication(s)
	}
	return out
}

// validSlotName checks a slot name given for a source with sources shards:
// lower-case letters, digits and underscores, as PostgreSQL requires, and
// at most 63 bytes once the shard suffix is added.
func validSlotName(name string, sources int) error {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("slot name %q: only lower-case letters, digits and underscores are allowed", name)
		}
	}
	if longest := namedSlot(name, sources-1, sources); len(longest) > maxNameLen {
		return fmt.Errorf("slot name %q: %q is longer than %d bytes", name, longest, maxNameLen)
	}
	return nil
}

// namedSlot is the slot named base on source shard s of sources.
func namedSlot(base string, s, sources int) string {
	if sources == 1 {
		return base
	}
	return base + "_" + strconv.Itoa(s)
}

// CheckNames checks the names given to UseNames on every source shard
// (checkNames); Manager.StartNamed runs it so that a wrong name is reported
// at once rather than by the task.
func (t *Task) CheckNames(ctx context.Context) error {
	var errs []error
	for s := range t.src.Shards {
		conn, err := t.connectSource(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, t.checkNames(ctx, conn, s)...)
		conn.Close(ctx)
	}
	if len(errs) > 0 {
		return fmt.Errorf("replication: check: %w", errors.Join(errs...))
	}
	return nil
}

// checkNames reports, for source shard s, a slot of the task's name that
// exists but cannot be used (not a logical pgoutput slot of this database,
// or a temporary one), and a named publication that is missing or does not
// publish what the copy copies: every change (insert, update, delete,
// truncate) of whole rows, under the leaf partitions' own names.
func (t *Task) checkNames(ctx context.Context, conn *pgx.Conn, s int) []error {
	desc := shardDesc("source", t.src, s)
	slot := t.slotName(s)
	var errs []error
	var typ, plugin, db, cur string
	var temporary bool
	err := conn.QueryRow(ctx, `SELECT slot_type, coalesce(plugin, ''), coalesce(database, ''), temporary, current_database()
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&typ, &plugin, &db, &temporary, &cur)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // Copy creates it
	case err != nil:
		errs = append(errs, fmt.Errorf("%s: slot %s: %w", desc, slot, err))
	case typ != "logical":
		errs = append(errs, fmt.Errorf("%s: slot %q exists and is a %s slot; the task needs a logical slot (pgoutput): drop it or choose another name", desc, slot, typ))
	case plugin != "pgoutput":
		errs = append(errs, fmt.Errorf("%s: slot %q exists and uses plugin %q; the task needs pgoutput: drop it or choose another name", desc, slot, plugin))
	case db != cur:
		errs = append(errs, fmt.Errorf("%s: slot %q exists in database %q, not %q: drop it or choose another name", desc, slot, db, cur))
	case temporary:
		errs = append(errs, fmt.Errorf("%s: slot %q is a temporary slot of another session: choose another name", desc, slot))
	}
	pub := t.names.Publication
	if pub == "" {
		return errs
	}
	var viaRoot, all bool
	var tables int
	err = conn.QueryRow(ctx, `SELECT p.pubviaroot, p.pubinsert AND p.pubupdate AND p.pubdelete AND p.pubtruncate,
		(SELECT count(*) FROM pg_publication_tables pt WHERE pt.pubname = p.pubname)
		FROM pg_publication p WHERE p.pubname = $1`, pub).Scan(&viaRoot, &all, &tables)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return append(errs, fmt.Errorf("%s: publication %q does not exist; create it on every source shard or leave it out (the task then publishes all tables)", desc, pub))
	case err != nil:
		return append(errs, fmt.Errorf("%s: publication %q: %w", desc, pub, err))
	case viaRoot:
		errs = append(errs, fmt.Errorf("%s: publication %q has publish_via_partition_root = true; resharding copies and streams leaf partitions: recreate it with publish_via_partition_root = false", desc, pub))
	case !all:
		errs = append(errs, fmt.Errorf("%s: publication %q does not publish every kind of change; ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')", desc, pub, quoteIdent(pub)))
	case tables == 0:
		errs = append(errs, fmt.Errorf("%s: publication %q publishes no tables", desc, pub))
	}
	// Row filters and column lists (PostgreSQL 15) would make the stream
	// send less than the copy copied.
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return append(errs, fmt.Errorf("%s: %w", desc, err))
	}
	if version < 150000 {
		return errs
	}
	var filtered []string
	err = conn.QueryRow(ctx, `SELECT coalesce(array_agg(format('%I.%I', n.nspname, c.relname) ORDER BY n.nspname, c.relname), '{}')::text[]
		FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
			JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE p.pubname = $1 AND (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL)`, pub).Scan(&filtered)
	if err != nil {
		return append(errs, fmt.Errorf("%s: publication %q: %w", desc, pub, err))
	}
	if len(filtered) > 0 {
		errs = append(errs, fmt.Errorf("%s: publication %q has a row filter or column list on %s; the copy copies whole tables, so the stream would miss changes: publish these tables whole",
			desc, pub, strings.Join(filtered, ", ")))
	}
	return errs
}
