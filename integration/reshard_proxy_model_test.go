package integration

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// proxyModel is the state the acknowledged writes imply: per table, key →
// row text (proxyReshardTables' row expression). A key whose last write
// has an unknown outcome (the connection broke) leaves rows for
// uncertain, where it may be present at most once; the writer no longer
// touches it.
type proxyModel struct {
	rows      map[string]map[string]string
	uncertain map[string]map[string]bool
	pools     map[string]*keyPool // the keys of rows, to pick from
	// lostEvents are the payloads of events inserted with a sequence id
	// whose outcome is unknown: at most one row each may exist.
	lostEvents map[string]bool
}

// loadProxyModel reads the initial rows from the source shards (omni
// tables from shard 0).
func loadProxyModel(t *testing.T, ctx context.Context, srcs []*pgx.Conn) *proxyModel {
	m := &proxyModel{rows: map[string]map[string]string{}, uncertain: map[string]map[string]bool{},
		pools: map[string]*keyPool{}, lostEvents: map[string]bool{}}
	for _, tb := range proxyReshardTables {
		m.rows[tb.name], m.uncertain[tb.name], m.pools[tb.name] = map[string]string{}, map[string]bool{}, newKeyPool()
		conns := srcs
		if tb.omni {
			conns = srcs[:1]
		}
		for _, conn := range conns {
			rows := readRows(t, ctx, conn, tb.name, tb.key, tb.row)
			for k, r := range rows {
				m.set(tb.name, k, r)
			}
		}
	}
	return m
}

// readRows returns key → row text of table on conn.
func readRows(t *testing.T, ctx context.Context, conn *pgx.Conn, table, key, row string) map[string]string {
	t.Helper()
	out := map[string]string{}
	rs, _ := conn.Query(ctx, fmt.Sprintf("SELECT %s::text, %s FROM %s", key, row, table))
	var k, r string
	if _, err := pgx.ForEachRow(rs, []any{&k, &r}, func() error {
		if _, dup := out[k]; dup {
			return fmt.Errorf("key %s twice", k)
		}
		out[k] = r
		return nil
	}); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}

func (m *proxyModel) set(table, key, row string) {
	m.rows[table][key] = row
	m.pools[table].add(key)
}

func (m *proxyModel) del(table, key string) {
	delete(m.rows[table], key)
	m.pools[table].remove(key)
}

// doubt marks keys of table uncertain.
func (m *proxyModel) doubt(table string, keys ...string) {
	for _, k := range keys {
		m.del(table, k)
		m.uncertain[table][k] = true
	}
}

// keyPool is a set of keys with a uniform random pick.
type keyPool struct {
	list []string
	at   map[string]int
}

func newKeyPool() *keyPool { return &keyPool{at: map[string]int{}} }

func (p *keyPool) add(k string) {
	if _, ok := p.at[k]; !ok {
		p.at[k] = len(p.list)
		p.list = append(p.list, k)
	}
}

func (p *keyPool) remove(k string) {
	i, ok := p.at[k]
	if !ok {
		return
	}
	last := p.list[len(p.list)-1]
	p.list[i], p.at[last] = last, i
	p.list = p.list[:len(p.list)-1]
	delete(p.at, k)
}

func (p *keyPool) pick(rng *rand.Rand) (string, bool) {
	if len(p.list) == 0 {
		return "", false
	}
	return p.list[rng.IntN(len(p.list))], true
}

// rowChecksum is an order-independent checksum of row texts: the sum of
// the first 8 bytes of their MD5s.
func rowChecksum(rows map[string]string, skip func(key, row string) bool) (n int, sum uint64) {
	for k, r := range rows {
		if skip != nil && skip(k, r) {
			continue
		}
		h := md5.Sum([]byte(r))
		n, sum = n+1, sum+binary.BigEndian.Uint64(h[:8])
	}
	return n, sum
}

// verifyProxyReshard compares the destination shards, read directly, with
// the model: per table the count and checksum of the rows whose outcome is
// known, each uncertain key at most once, every sharded row on the shard
// the destination's hash names, omni tables identical on every shard.
func verifyProxyReshard(t *testing.T, ctx context.Context, dsts []*pgx.Conn, m *proxyModel) {
	t.Helper()
	for _, tb := range proxyReshardTables {
		if tb.omni {
			verifyOmni(t, ctx, dsts, m, tb.name, tb.key, tb.row)
			continue
		}
		got := map[string]string{}
		dups, misplaced := 0, 0
		for d, conn := range dsts {
			for k, r := range readRows(t, ctx, conn, tb.name, tb.key, tb.row) {
				if _, ok := got[k]; ok {
					if dups++; dups <= 5 {
						t.Errorf("table %s: key %s on several destination shards", tb.name, k)
					}
				}
				got[k] = r
				id, err := strconv.ParseInt(k, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				if want := hashShard(id, len(dsts)); want != d {
					if misplaced++; misplaced <= 5 {
						t.Errorf("table %s: key %s on destination shard %d, the hash names shard %d", tb.name, k, d, want)
					}
				}
			}
		}
		verifyRows(t, m, tb.name, got)
	}
}

// verifyOmni checks that omni table name is the same on every destination
// shard and holds the model's rows.
func verifyOmni(t *testing.T, ctx context.Context, dsts []*pgx.Conn, m *proxyModel, name, key, row string) {
	t.Helper()
	uncertain := m.uncertain[name]
	wn, wsum := rowChecksum(m.rows[name], nil)
	var n0 int
	var s0 uint64
	for d, conn := range dsts {
		got := readRows(t, ctx, conn, name, key, row)
		// Identical everywhere, uncertain keys included.
		if n, s := rowChecksum(got, nil); d == 0 {
			n0, s0 = n, s
		} else if n != n0 || s != s0 {
			t.Errorf("omni table %s: destination shard %d has %d rows (checksum %x), shard 0 %d (%x)", name, d, n, s, n0, s0)
		}
		gn, gsum := rowChecksum(got, func(k, _ string) bool { return uncertain[k] })
		if gn != wn || gsum != wsum {
			t.Errorf("omni table %s on destination shard %d: %d rows (checksum %x), want %d (%x)", name, d, gn, gsum, wn, wsum)
		}
	}
	t.Logf("table %s: %d rows on each of %d shards (%d uncertain)", name, n0, len(dsts), len(uncertain))
}

// verifyRows compares got, the rows of sharded table name on all
// destination shards, with the model; on a mismatch it lists the
// differences.
func verifyRows(t *testing.T, m *proxyModel, name string, got map[string]string) {
	t.Helper()
	want, uncertain := m.rows[name], m.uncertain[name]
	// Rows whose outcome is unknown are left out of the comparison; an
	// event inserted with a sequence id in doubt has an unknown key, but
	// its payload.
	lostEvents := map[string]int{}
	skip := func(k, r string) bool {
		if uncertain[k] {
			return true
		}
		if _, known := want[k]; !known && name == "events" {
			if p := r[strings.IndexByte(r, '|')+1:]; m.lostEvents[p] {
				lostEvents[p]++
				return true
			}
		}
		return false
	}
	wn, wsum := rowChecksum(want, nil)
	gn, gsum := rowChecksum(got, skip)
	for p, n := range lostEvents {
		if n > 1 {
			t.Errorf("events: the insert of payload %q (outcome unknown) is there %d times", p, n)
		}
	}
	if gn == wn && gsum == wsum {
		t.Logf("table %s: %d rows match (checksum %x; %d keys uncertain, %d of them present)", name, gn, gsum, len(uncertain), len(got)-gn)
		return
	}
	t.Errorf("table %s: destination has %d rows (checksum %x), the acknowledged writes %d (%x)", name, gn, gsum, wn, wsum)
	missing, wrong, extra := 0, 0, 0
	for k, r := range want {
		switch g, ok := got[k]; {
		case !ok:
			if missing++; missing <= 5 {
				t.Errorf("table %s: acknowledged row %q missing", name, r)
			}
		case g != r:
			if wrong++; wrong <= 5 {
				t.Errorf("table %s: row %q, want %q", name, g, r)
			}
		}
	}
	for k, r := range got {
		if _, ok := want[k]; !ok && !uncertain[k] && !(name == "events" && m.lostEvents[r[strings.IndexByte(r, '|')+1:]]) {
			if extra++; extra <= 5 {
				t.Errorf("table %s: unexpected row %q", name, r)
			}
		}
	}
	t.Errorf("table %s: %d rows missing, %d different, %d unexpected", name, missing, wrong, extra)
}
