package router

import (
	"testing"
)

// FuzzAnalyze feeds arbitrary SQL to Analyze and routes what it accepts with
// arbitrary parameters in both formats and with hints: neither may panic,
// and every error must be a *wire.Error a client can be sent.
func FuzzAnalyze(f *testing.F) {
	for _, cases := range [][]mergeCase{mergeCases, collectCases, windowCases} {
		for _, tc := range cases {
			f.Add(tc.sql, []byte("3"), false)
		}
	}
	for _, sql := range []string{
		"SELECT * FROM accounts WHERE id = $1",
		"SELECT * FROM accounts WHERE id = ANY($1)",
		"INSERT INTO accounts (id, name) VALUES ($1, 'a'), ($1, 'b')",
		"UPDATE accounts SET id = $1 WHERE id = $1",
		"/* shard: 1 */ SELECT 1",
		"COPY accounts (id) FROM STDIN",
		"SELECT * FROM items",
		"BEGIN; SELECT * FROM accounts WHERE id = $1; COMMIT",
		"WITH w AS (SELECT $1::int AS n) INSERT INTO accounts (id, name) SELECT n, 'x' FROM w ON CONFLICT (id) DO NOTHING",
		"INSERT INTO accounts SELECT *, NULL FROM orders WHERE account_id = $1 ORDER BY 1 LIMIT 3",
	} {
		f.Add(sql, []byte("{1,2}"), false)
		f.Add(sql, int8Binary(7), true)
	}
	r := newTestRouter(f, testCatalog)
	f.Fuzz(func(t *testing.T, sql string, param []byte, binary bool) {
		s, err := r.Analyze(sql)
		if err != nil {
			if errCode(err)[0] == 'n' { // "not a wire.Error"
				t.Fatalf("%q: %v", sql, err)
			}
			return
		}
		format := []int16{0}
		if binary {
			format[0] = 1
		}
		ps := [][]byte{param, param, param, nil, param, param}
		for _, h := range []Hints{{}, {SearchPath: []string{"tenant_a"}}, {ShardingKey: strp(string(param))}} {
			p, err := s.Route(ps, format, h)
			if err != nil {
				if errCode(err)[0] == 'n' {
					t.Fatalf("%q: %v", sql, err)
				}
				continue
			}
			if len(p.Shards) == 0 && (p.Kind != Parts || len(p.Parts) < 2) {
				t.Fatalf("%q: plan %v has no shards", sql, p)
			}
		}
	})
}
