package executor

import (
	"bytes"
	"context"
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

var momentKinds = []AggKind{AggStddevSamp, AggStddevPop, AggVarSamp, AggVarPop}

// randomNumeric is a value of random sign, magnitude and display scale:
// integers, values with trailing zeros, tiny and huge ones.
func randomNumeric(r *rand.Rand) string {
	digits := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		return b.String()
	}
	var s string
	switch r.IntN(8) {
	case 0:
		s = fmt.Sprint(r.IntN(1000))
	case 1:
		s = fmt.Sprint(r.Int64())
	case 2:
		s = "0." + strings.Repeat("0", r.IntN(30)) + digits(1+r.IntN(8))
	case 3:
		s = digits(1+r.IntN(40)) + "." + digits(r.IntN(12))
	case 4:
		s = fmt.Sprintf("%d.%s", r.IntN(100), digits(r.IntN(3))+strings.Repeat("0", r.IntN(4)))
	case 5:
		s = "1" + strings.Repeat("0", r.IntN(200))
	case 6:
		s = fmt.Sprintf("%d.5", r.IntN(10))
	default:
		s = digits(1+r.IntN(6)) + "." + digits(1+r.IntN(6))
	}
	s = strings.TrimSuffix(s, ".")
	if r.IntN(3) == 0 {
		s = "-" + s
	}
	return s
}

// TestNumericMomentsAgainstPostgres compares stddev and variance computed
// from partial moments, as the merge does, with PostgreSQL's own over the
// same values, in text and binary: random values split over up to three
// "shards", every count from 0 up.
func TestNumericMomentsAgainstPostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 11))
	const cases = 400
	for i := 0; i < cases; i++ {
		n := i % 6
		if i >= 60 {
			n = r.IntN(25)
		}
		typ := "numeric"
		if i%7 == 3 {
			typ = []string{"int2", "int4", "int8"}[i%3]
		}
		var vals []string
		var shards []int32
		for j := 0; j < n; j++ {
			v := randomNumeric(r)
			switch typ {
			case "int8":
				v = fmt.Sprint(r.Int64() >> r.IntN(64))
			case "int2", "int4":
				v = fmt.Sprint(r.IntN(2000) - 1000)
			}
			if typ == "numeric" && r.IntN(40) == 0 {
				v = []string{"NaN", "Infinity", "-Infinity"}[r.IntN(3)]
			}
			vals = append(vals, v)
			shards = append(shards, int32(r.IntN(3)))
		}
		if i%11 == 5 && n > 1 {
			for j := range vals {
				vals[j] = vals[0] // all equal: a zero numerator
			}
		}
		checkNumericMoments(t, ctx, conn, seed, typ, vals, shards)
	}
}

func checkNumericMoments(t *testing.T, ctx context.Context, conn *pgx.Conn, seed uint64, typ string, vals []string, shards []int32) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, %s values %v on shards %v: %s", seed, typ, vals, shards, fmt.Sprintf(format, args...))
	}
	// The partials, as the shards' hidden columns compute them.
	partials := fmt.Sprintf("SELECT count(v), sum(v::numeric)::text, sum(v::numeric * v::numeric)::text FROM unnest($1::%s[], $2::int4[]) AS u(v, s) GROUP BY s", typ)
	rows, err := conn.Query(ctx, partials, vals, shards)
	if err != nil {
		fail("%v", err)
	}
	var total int64
	var sum, sumSq *decimal
	for rows.Next() {
		var c int64
		var s, sq *string
		if err := rows.Scan(&c, &s, &sq); err != nil {
			fail("%v", err)
		}
		total += c
		for _, p := range []struct {
			text *string
			to   **decimal
		}{{s, &sum}, {sq, &sumSq}} {
			if p.text == nil {
				continue
			}
			d, err := parseDecimal(*p.text)
			if err != nil {
				fail("%v", err)
			}
			if *p.to != nil {
				d = (*p.to).add(d)
			}
			*p.to = &d
		}
	}
	if err := rows.Err(); err != nil {
		fail("%v", err)
	}
	whole := fmt.Sprintf("SELECT stddev_samp(v), stddev_pop(v), var_samp(v), var_pop(v) FROM unnest($1::%s[]) AS u(v)", typ)
	for _, format := range []int16{0, 1} {
		res := conn.PgConn().ExecParams(ctx, whole, [][]byte{[]byte(pgArray(vals))}, nil, nil, []int16{format}).Read()
		if res.Err != nil {
			fail("%v", res.Err)
		}
		for k, kind := range momentKinds {
			want := res.Rows[0][k]
			d, ok := numericMoment(kind, total, sum, sumSq)
			var got []byte
			switch {
			case !ok:
			case format == 1:
				got = encodeBinaryNumeric(d)
			default:
				got = []byte(d.String())
			}
			if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
				fail("%v in format %d: got %q, PostgreSQL %q", kind, format, got, want)
			}
		}
	}
}

// pgArray is vals as an array literal.
func pgArray(vals []string) string {
	return "{" + strings.Join(vals, ",") + "}"
}

// TestFloatMomentsCombine checks the float accumulator's combination and
// final functions on partials whose results are known exactly.
func TestFloatMomentsCombine(t *testing.T) {
	m := &Merger{cols: []Column{{OID: oidFloat8}, {OID: oidInt8}, {OID: oidFloat8}, {OID: oidFloat8}}}
	a := Agg{Col: 0, Moments: Moments{Count: 1, Avg: 2, VarPop: 3}}
	row := func(result string, n int64, avg, varPop float64) [][]byte {
		return [][]byte{[]byte(result), []byte(fmt.Sprint(n)), []byte(formatFloat8(avg)), []byte(formatFloat8(varPop))}
	}
	tests := []struct {
		name string
		rows [][][]byte
		want map[AggKind]string // nil value: NULL
	}{
		{"no rows", nil, map[AggKind]string{AggVarPop: "", AggStddevSamp: ""}},
		{"one partial is the shard's answer", [][][]byte{row("7.5", 1, 3, 0), {nil, []byte("0"), nil, nil}}, map[AggKind]string{AggVarPop: "7.5"}},
		// {1, 3} and {5}: N 3, mean 3, Sxx 8.
		{"two partials", [][][]byte{row("x", 2, 2, 1), row("x", 1, 5, 0)}, map[AggKind]string{AggVarPop: formatFloat8(8.0 / 3), AggVarSamp: "4", AggStddevSamp: "2", AggStddevPop: formatFloat8(math.Sqrt(8.0 / 3))}},
		{"infinite input", [][][]byte{row("NaN", 2, math.Inf(1), math.NaN()), row("0", 1, 5, 0)}, map[AggKind]string{AggVarPop: "NaN", AggStddevSamp: "NaN"}},
	}
	for _, tc := range tests {
		for kind, want := range tc.want {
			a.Kind = kind
			st := &momentState{float: true}
			for _, r := range tc.rows {
				if err := m.addMoments(st, a, r); err != nil {
					t.Fatal(err)
				}
			}
			got := string(st.floatResult(kind, false))
			if got != want {
				t.Errorf("%s %v: got %q, want %q", tc.name, kind, got, want)
			}
		}
	}
	// float8_combine's overflow: finite inputs whose Sxx overflows.
	st := &momentState{float: true}
	a.Kind = AggVarPop
	for _, r := range [][][]byte{row("0", 1, 1e200, 0), row("0", 1, -1e200, 0)} {
		if err := m.addMoments(st, a, r); err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.NumericValueOutOfRange {
				t.Fatalf("overflow: %v", err)
			}
			return
		}
	}
	t.Fatal("no overflow error")
}
