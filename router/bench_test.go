package router

import (
	"testing"
)

// BenchmarkAnalyzeRoute is the hot path of a prepared statement: the text is
// cached, the key arrives in Bind.
func BenchmarkAnalyzeRoute(b *testing.B) {
	r := newTestRouter(b, nil)
	const sql = "SELECT * FROM accounts WHERE id = $1"
	ps := params(42)
	if _, err := r.Analyze(sql); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := r.Analyze(sql)
		if err != nil {
			b.Fatal(err)
		}
		p, err := s.Route(ps, nil, Hints{})
		if err != nil || p.Kind != Direct {
			b.Fatal(p, err)
		}
	}
}

// BenchmarkAnalyzeRouteBinary is the same with a binary int8 key, as pgx
// sends it.
func BenchmarkAnalyzeRouteBinary(b *testing.B) {
	r := newTestRouter(b, nil)
	const sql = "SELECT * FROM accounts WHERE id = $1"
	ps, formats := params(int8Binary(42)), []int16{1}
	b.ReportAllocs()
	for b.Loop() {
		s, err := r.Analyze(sql)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Route(ps, formats, Hints{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRouteText routes a text key (hashing its bytes).
func BenchmarkRouteText(b *testing.B) {
	r := newTestRouter(b, nil)
	s, err := r.Analyze("UPDATE users SET name = $2 WHERE email = $1")
	if err != nil {
		b.Fatal(err)
	}
	ps := params("someone@example.com", "x")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Route(ps, nil, Hints{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRouteInsert routes a single-row INSERT.
func BenchmarkRouteInsert(b *testing.B) {
	r := newTestRouter(b, nil)
	s, err := r.Analyze("INSERT INTO accounts (id, name, balance) VALUES ($1, $2, $3)")
	if err != nil {
		b.Fatal(err)
	}
	ps := params(42, "x", 10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Route(ps, nil, Hints{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRouteFanOut routes a fan-out SELECT with a merge: one Plan.
func BenchmarkRouteFanOut(b *testing.B) {
	r := newTestRouter(b, nil)
	s, err := r.Analyze("SELECT id FROM accounts WHERE balance > $1 ORDER BY id LIMIT 10")
	if err != nil {
		b.Fatal(err)
	}
	ps := params(0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Route(ps, nil, Hints{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnalyzeUncached is the cost of a cache miss: parse and analyze.
func BenchmarkAnalyzeUncached(b *testing.B) {
	r := newTestRouter(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		s, err := r.analyze("SELECT a.id, o.total FROM accounts a JOIN orders o ON o.account_id = a.id WHERE a.id = $1 ORDER BY o.total DESC LIMIT 10", true)
		if err != nil || s == nil {
			b.Fatal(err)
		}
	}
}
