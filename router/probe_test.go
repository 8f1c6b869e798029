package router

import (
	"strings"
	"testing"

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
		"DECLARE c CURSOR FOR SELECT * FROM mystery",
		"SELECT * INTO copy FROM mystery",
		"INSERT INTO invoices (id, tenant_id) SELECT id, 1 FROM mystery",
	} {
		if p, err := route(r, sql, nil, nil, Hints{}); err == nil || errCode(err) != wire.FeatureNotSupported {
			t.Errorf("%s: plan %v, error %v; want 0A000", sql, p, err)
		}
	}
	if p, err := route(r, "SELECT * FROM mystery", nil, nil, Hints{Shard: intp(1)}); err != nil || p.Kind != Direct || p.Shards[0] != 1 {
		t.Errorf("hinted: plan %v, error %v", p, err)
	}
}
