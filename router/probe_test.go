package router

import (
	"strings"
	"testing"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// TestRouteUnknownProbe: a SELECT naming a table the router cannot place
// runs on every shard as written, its plan carrying the refusal for when
// the shards answer; every other statement naming one is refused.
func TestRouteUnknownProbe(t *testing.T) {
	const refusal = "cannot tell whether table mystery is sharded by column tenant_id"
	r := newTestRouter(t, testCatalog)
	for _, sql := range []string{
		"SELECT * FROM mystery",
		"SELECT count(*), stddev(x) FROM mystery",
		"SELECT * FROM mystery m JOIN invoices i ON i.id = m.id",
		"SELECT 1; SELECT * FROM mystery",
	} {
		s, err := r.Analyze(sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if s.Count() > 1 {
			continue // run one by one: the parts are routed alone
		}
		p, err := s.Route(nil, nil, Hints{})
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if p.Kind != All || p.Write || p.Merge == nil || p.Merge.Probe == nil || p.Merge.Rewritten != "" {
			t.Fatalf("%s: plan %+v, want a probe on every shard", sql, p)
		}
		if !strings.Contains(p.Merge.Probe.Error(), refusal) || errCode(p.Merge.Probe) != wire.FeatureNotSupported {
			t.Errorf("%s: probe %v", sql, p.Merge.Probe)
		}
	}
	for _, sql := range []string{
		"SELECT * FROM mystery FOR UPDATE",
		"SELECT nextval('s') FROM mystery",
		"UPDATE mystery SET x = 1",
		"DELETE FROM mystery",
		"INSERT INTO mystery VALUES (1)",
		"INSERT INTO mystery SELECT * FROM accounts",
		"MERGE INTO mystery m USING accounts a ON m.x = a.id WHEN MATCHED THEN DELETE",
		"WITH d AS (DELETE FROM mystery RETURNING *) SELECT * FROM d",
		"DECLARE c CURSOR FOR SELECT * FROM mystery",
		"SELECT * INTO copy FROM mystery",
		"INSERT INTO invoices (id, tenant_id) SELECT id, 1 FROM mystery",
	} {
		checkParseProbe(t, r, sql, refusal)
	}
	// A refusal of the analysis is parsed first too, for a column that
	// does not exist.
	checkParseProbe(t, r, "INSERT INTO accounts (nosuch) VALUES (1)", "does not set its sharding column")
	// COPY has its table looked up, or its query parsed, after one space
	// for each character before the query.
	for sql, want := range map[string][2]string{
		"COPY mystery FROM STDIN":                           {`"mystery"`, ""},
		`COPY "My".mystery (x) TO STDOUT`:                   {`"My"."mystery"`, ""},
		"COPY ( SELECT (1) FROM mystery ) TO STDOUT":        {"", "      " + " SELECT (1) FROM mystery "},
		"COPY /* ( */ (SELECT 'é(' FROM mystery) TO STDOUT": {"", strings.Repeat(" ", 14) + "SELECT 'é(' FROM mystery"},
	} {
		checkParseProbe(t, r, sql, "cannot tell whether table")
		p, _ := r.mustRoute(t, sql)
		if p == nil || p.Merge == nil || p.Merge.ProbeRelation != want[0] || p.Merge.ProbeSQL != want[1] {
			t.Errorf("%s: probe %+v, want relation %q, SQL %q", sql, p, want[0], want[1])
		}
	}
	// Statements Parse does not analyse stay refused at once.
	for _, sql := range []string{"DO 'BEGIN END'"} {
		if p, err := r.mustRoute(t, sql); err == nil || errCode(err) != wire.FeatureNotSupported {
			t.Errorf("%s: plan %v, error %v; want 0A000", sql, p, err)
		}
	}
	if p, err := route(r, "SELECT * FROM mystery", nil, nil, Hints{Shard: intp(1)}); err != nil || p.Kind != Direct || p.Shards[0] != 1 {
		t.Errorf("hinted: plan %v, error %v", p, err)
	}
}

// mustRoute routes sql, failing the test when it does not analyze.
func (r *Router) mustRoute(t *testing.T, sql string) (*Plan, error) {
	t.Helper()
	s, err := r.Analyze(sql)
	if err != nil {
		return nil, err
	}
	return s.Route(nil, nil, Hints{})
}

// checkParseProbe requires sql to be parsed on every shard, with a
// refusal mentioning refusal for when they accept it.
func checkParseProbe(t *testing.T, r *Router, sql, refusal string) {
	t.Helper()
	p, err := r.mustRoute(t, sql)
	if err != nil {
		t.Errorf("%s: %v, want a parse probe", sql, err)
		return
	}
	if p.Kind != All || p.Write || p.Merge == nil || !p.Merge.ParseOnly || p.Merge.Probe == nil {
		t.Errorf("%s: plan %+v, want a parse probe on every shard", sql, p)
		return
	}
	if !strings.Contains(p.Merge.Probe.Error(), refusal) || errCode(p.Merge.Probe) != wire.FeatureNotSupported {
		t.Errorf("%s: probe %v, want 0A000 %q", sql, p.Merge.Probe, refusal)
	}
}

// TestRouteProbeParts: a text of several statements with one the shards
// must probe runs statement by statement, each after one space for each
// character before it, so that the shards' error positions count from the
// start of the client's text.
func TestRouteProbeParts(t *testing.T) {
	r := newTestRouter(t, testCatalog)
	sql := "INSERT INTO accounts (id) VALUES (1); SELECT 'é'; BEGIN; INSERT INTO mystery VALUES (1)"
	p, err := r.mustRoute(t, sql)
	if err != nil || p.Kind != Parts || len(p.Parts) != 4 {
		t.Fatalf("plan %+v, error %v; want four parts", p, err)
	}
	want := []string{
		"INSERT INTO accounts (id) VALUES (1)",
		strings.Repeat(" ", 37) + " SELECT 'é'",
		" BEGIN",
		strings.Repeat(" ", 56) + " INSERT INTO mystery VALUES (1)",
	}
	for i, w := range want {
		if p.Parts[i] != w {
			t.Errorf("part %d: %q, want %q", i, p.Parts[i], w)
		}
	}
	// INSERT … SELECT the shards only parse may share a text.
	if p, err := r.mustRoute(t, "SELECT 1; INSERT INTO invoices (id, tenant_id) SELECT id, 1 FROM mystery"); err != nil || p.Kind != Parts {
		t.Errorf("INSERT … SELECT probe among others: plan %v, error %v", p, err)
	}
}

// TestRouteProbeOneShard: with one shard (and replicas, else the router
// is not asked) a statement naming an unknown table runs there as
// written.
func TestRouteProbeOneShard(t *testing.T) {
	db := &config.Database{Name: "app", Shards: make([]config.Shard, 1), ShardedTables: []config.ShardedTable{
		{Table: "accounts", Column: "id", Type: "bigint", Function: "hash"},
		{Column: "tenant_id", Type: "bigint"},
	}}
	r, err := New(db, testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := r.mustRoute(t, "DELETE FROM mystery"); err != nil || p.Kind != Direct || !p.Write || p.Merge != nil {
		t.Errorf("unknown table: plan %+v, error %v; want the write on shard 0", p, err)
	}
}

// TestRouteProbeExplain: EXPLAIN ANALYZE of a statement the shards would
// probe, which it would run, is parsed only; EXPLAIN alone goes to one
// shard, which runs nothing.
func TestRouteProbeExplain(t *testing.T) {
	r := newTestRouter(t, testCatalog)
	for _, sql := range []string{"EXPLAIN ANALYZE DELETE FROM mystery", "EXPLAIN (ANALYZE) SELECT * FROM mystery"} {
		checkParseProbe(t, r, sql, "cannot tell whether table mystery")
	}
	if p, err := r.mustRoute(t, "EXPLAIN DELETE FROM mystery"); err != nil || p.Kind != Direct {
		t.Errorf("EXPLAIN: plan %v, error %v; want one shard", p, err)
	}
}
