package executor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// regressionKindsInOrder are the aggregates of float8_regr_accum's state
// the merge finishes.
var regressionKindsInOrder = []AggKind{AggCorr, AggCovarPop, AggCovarSamp, AggRegrAvgX, AggRegrAvgY,
	AggRegrIntercept, AggRegrR2, AggRegrSlope, AggRegrSXX, AggRegrSXY, AggRegrSYY}

// regressionCalls is the select list of every kind over (y, x).
func regressionCalls() string {
	var calls []string
	for _, k := range regressionKindsInOrder {
		calls = append(calls, k.String()+"(y, x)")
	}
	return strings.Join(calls, ", ")
}

// randomPair is a (y, x) pair of SQL float8 literals (or NULL): small
// integers and halves, whose sums are exact, or values of random
// magnitude, rarely NaN or an infinity when special is set.
func randomPair(r *rand.Rand, special bool) (string, string) {
	one := func() string {
		switch n := r.IntN(40); {
		case n == 0:
			return "NULL"
		case n == 1 && special:
			return []string{"NaN", "Infinity", "-Infinity"}[r.IntN(3)]
		case n < 16:
			return fmt.Sprint(float64(r.IntN(41)-20) / 2)
		default:
			return formatFloat8((r.Float64()*200 - 100) * math.Pow(10, float64(r.IntN(7)-3)))
		}
	}
	return one(), one()
}

// TestRegressionAgainstPostgres compares corr, covar_ and regr_ computed
// from the partial states of up to three "shards", as the merge does,
// with PostgreSQL's own over the same rows: NULL exactly where PostgreSQL
// answers NULL, a group on one shard byte for byte, others within 1e-9 of
// PostgreSQL's answer (the rows are added in another order; so a NaN's
// sign bit may differ).
func TestRegressionAgainstPostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 12))
	for i := 0; i < 400; i++ {
		n := i % 6
		if i >= 60 {
			n = r.IntN(25)
		}
		var ys, xs []string
		var shards []int32
		for j := 0; j < n; j++ {
			y, x := randomPair(r, i%5 == 4)
			ys, xs = append(ys, y), append(xs, x)
			shards = append(shards, int32(r.IntN(3)))
		}
		switch i % 11 {
		case 3: // a vertical line: every x equal
			for j := range xs {
				xs[j] = "2.5"
			}
		case 7: // a horizontal line
			for j := range ys {
				ys[j] = "-4"
			}
		}
		checkRegression(t, ctx, conn, seed, ys, xs, shards)
	}
}

func checkRegression(t *testing.T, ctx context.Context, conn *pgx.Conn, seed uint64, ys, xs []string, shards []int32) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, y %v, x %v on shards %v: %s", seed, ys, xs, shards, fmt.Sprintf(format, args...))
	}
	var ss []string
	for _, s := range shards {
		ss = append(ss, fmt.Sprint(s))
	}
	args := [][]byte{[]byte(pgArray(ys)), []byte(pgArray(xs)), []byte(pgArray(ss))}
	from := "FROM unnest($1::float8[], $2::float8[], $3::int4[]) AS u(y, x, s)"
	binaryFormats := make([]int16, 6+len(regressionKindsInOrder))
	for i := range binaryFormats {
		binaryFormats[i] = 1
	}
	// The partials, as the shards' columns compute them, in binary: the
	// state, then the client's calls.
	part := conn.PgConn().ExecParams(ctx, "SELECT regr_count(y, x), regr_avgx(y, x), regr_avgy(y, x), regr_sxx(y, x), regr_syy(y, x), regr_sxy(y, x), "+
		regressionCalls()+" "+from+" GROUP BY s", args, nil, nil, binaryFormats).Read()
	whole := conn.PgConn().ExecParams(ctx, "SELECT "+regressionCalls()+" "+from, args, nil, nil, binaryFormats[6:]).Read()
	if part.Err != nil {
		fail("partials: %v", part.Err)
	}
	if whole.Err != nil {
		fail("whole: %v", whole.Err)
	}
	m := &Merger{cols: []Column{{OID: oidFloat8, Format: 1}, {OID: oidInt8, Format: 1},
		{OID: oidFloat8, Format: 1}, {OID: oidFloat8, Format: 1}, {OID: oidFloat8, Format: 1}, {OID: oidFloat8, Format: 1}, {OID: oidFloat8, Format: 1}}}
	for k, kind := range regressionKindsInOrder {
		a := Agg{Col: 0, Kind: kind, Regression: Regression{Count: 1, AvgX: 2, AvgY: 3, SXX: 4, SYY: 5, SXY: 6}}
		st := &regrState{}
		for _, row := range part.Rows {
			if err := m.addRegression(st, a, append([][]byte{row[6+k]}, row[:6]...)); err != nil {
				fail("%v: %v", kind, err)
			}
		}
		got, want := st.result(kind, true), whole.Rows[0][k]
		switch {
		case (got == nil) != (want == nil):
			fail("%v: got %v, PostgreSQL %v", kind, float8Of(got), float8Of(want))
		case got == nil, bytes.Equal(got, want):
		case st.parts == 1:
			fail("%v: one shard's rows: got %v, PostgreSQL %v", kind, float8Of(got), float8Of(want))
		default:
			g, w := float8Of(got), float8Of(want)
			if !(math.IsNaN(g) && math.IsNaN(w)) && !(math.Abs(g-w) <= 1e-9*math.Max(1, math.Abs(w))) {
				fail("%v: got %v, PostgreSQL %v", kind, g, w)
			}
		}
	}
}

func float8Of(b []byte) float64 {
	if len(b) != 8 {
		return math.NaN()
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b))
}

// TestRegressionCombine checks the combination and final functions on
// partials whose results are known exactly, the NULL cases and the
// overflow error.
func TestRegressionCombine(t *testing.T) {
	m := &Merger{cols: []Column{{OID: oidFloat8}, {OID: oidInt8}, {OID: oidFloat8}, {OID: oidFloat8}, {OID: oidFloat8}, {OID: oidFloat8}, {OID: oidFloat8}}}
	a := Agg{Col: 0, Regression: Regression{Count: 1, AvgX: 2, AvgY: 3, SXX: 4, SYY: 5, SXY: 6}}
	// row is a shard's partial of rows with these means and sums of
	// squared deviations.
	row := func(result string, n int64, avgX, avgY, sxx, syy, sxy float64) [][]byte {
		out := [][]byte{[]byte(result), []byte(fmt.Sprint(n))}
		for _, f := range []float64{avgX, avgY, sxx, syy, sxy} {
			out = append(out, []byte(formatFloat8(f)))
		}
		return out
	}
	none := [][]byte{nil, []byte("0"), nil, nil, nil, nil, nil}
	// (y, x): (1, 1), (3, 2) on one shard and (2, 3) on another: N 3, Sx 6,
	// Sy 6, Sxx 2, Syy 2, Sxy 1.
	apart := [][][]byte{row("x", 2, 1.5, 2, 0.5, 2, 1), row("x", 1, 3, 2, 0, 0, 0)}
	tests := []struct {
		name string
		rows [][][]byte
		want map[AggKind]string // "": NULL
	}{
		{"no rows", [][][]byte{none, none}, map[AggKind]string{AggCorr: "", AggRegrSXX: "", AggRegrAvgX: "", AggCovarPop: ""}},
		{"one partial is the shard's answer", [][][]byte{row("0.25", 2, 1, 1, 1, 1, 1), none}, map[AggKind]string{AggCorr: "0.25", AggRegrSXY: "0.25"}},
		{"two partials", apart, map[AggKind]string{
			AggRegrSXX: "2", AggRegrSYY: "2", AggRegrSXY: "1", AggRegrAvgX: "2", AggRegrAvgY: "2",
			AggCovarPop: formatFloat8(1.0 / 3), AggCovarSamp: "0.5", AggCorr: "0.5", AggRegrR2: "0.25",
			AggRegrSlope: "0.5", AggRegrIntercept: "1"}},
		// x 2 everywhere: a vertical line.
		{"vertical", [][][]byte{row("x", 1, 2, 1, 0, 0, 0), row("x", 1, 2, 3, 0, 0, 0)}, map[AggKind]string{
			AggCorr: "", AggRegrR2: "", AggRegrSlope: "", AggRegrIntercept: "", AggRegrSXX: "0", AggRegrSYY: "2", AggCovarSamp: "0"}},
		// y 5 everywhere: a horizontal line.
		{"horizontal", [][][]byte{row("x", 1, 1, 5, 0, 0, 0), row("x", 1, 3, 5, 0, 0, 0)}, map[AggKind]string{
			AggCorr: "", AggRegrR2: "1", AggRegrSlope: "0", AggRegrIntercept: "5", AggRegrSYY: "0"}},
		{"infinite input", [][][]byte{row("NaN", 1, math.Inf(1), 1, math.NaN(), 0, math.NaN()), row("x", 1, 3, 5, 0, 0, 0)}, map[AggKind]string{
			AggRegrAvgX: "Infinity", AggRegrAvgY: "3", AggRegrSYY: "8", AggRegrSXX: "NaN", AggCorr: "NaN", AggRegrSlope: "NaN"}},
	}
	for _, tc := range tests {
		for kind, want := range tc.want {
			a.Kind = kind
			st := &regrState{}
			for _, r := range tc.rows {
				if err := m.addRegression(st, a, r); err != nil {
					t.Fatal(err)
				}
			}
			if got := string(st.result(kind, false)); got != want {
				t.Errorf("%s %v: got %q, want %q", tc.name, kind, got, want)
			}
		}
	}
	// covar_samp of one row is NULL (only a shard's own answer has it).
	if _, ok := (&regrState{n: 1, parts: 2}).final(AggCovarSamp); ok {
		t.Error("covar_samp of one row is not NULL")
	}
	// float8_regr_combine's overflow: finite inputs whose Sxx, Syy, Sxy or
	// Sx overflows.
	for _, rows := range [][][][]byte{
		{row("0", 1, 1e200, 0, 0, 0, 0), row("0", 1, -1e200, 0, 0, 0, 0)},
		{row("0", 1, 0, 1e200, 0, 0, 0), row("0", 1, 0, -1e200, 0, 0, 0)},
		{row("0", 1, 1e308, 0, 0, 0, 0), row("0", 1, 1e308, 0, 0, 0, 0)},
	} {
		st := &regrState{}
		var err error
		for _, r := range rows {
			if err = m.addRegression(st, a, r); err != nil {
				break
			}
		}
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.NumericValueOutOfRange || we.Message != "value out of range: overflow" {
			t.Errorf("overflow of %q: %v", rows, err)
		}
	}
}
