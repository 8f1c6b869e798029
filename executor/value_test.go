package executor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

func TestTextComparators(t *testing.T) {
	tests := []struct {
		oid  uint32
		a, b string
		want int
	}{
		{oidInt4, "-5", "3", -1},
		{oidInt8, "9223372036854775807", "-9223372036854775808", 1},
		{oidFloat8, "NaN", "Infinity", 1},
		{oidFloat8, "-Infinity", "-1e308", -1},
		{oidFloat8, "NaN", "NaN", 0},
		{oidNumeric, "10.5", "9.99999", 1},
		{oidNumeric, "-0.001", "0", -1},
		{oidNumeric, "NaN", "Infinity", 1},
		{oidNumeric, "1.10", "1.1", 0},
		{oidText, "abc", "abd", -1},
		{oidUUID, "00000000-0000-0000-0000-000000000001", "ffffffff-0000-0000-0000-000000000000", -1},
		{oidBool, "f", "t", -1},
		{oidDate, "2024-01-02", "2023-12-31", 1},
		{oidDate, "infinity", "2023-12-31", 1},
		{oidTimestamptz, "2024-11-03 01:30:00-04", "2024-11-03 01:10:00-05", -1},
		{oidTimestamptz, "2024-01-01 00:00:00.5+00", "2024-01-01 00:00:00.25+00", 1},
		{oidTimestamp, "2024-01-01 10:00:00", "2024-01-01 09:59:59.999999", 1},
	}
	for _, tc := range tests {
		f, err := comparator(tc.oid, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f([]byte(tc.a), []byte(tc.b))
		if err != nil {
			t.Fatalf("%d %q %q: %v", tc.oid, tc.a, tc.b, err)
		}
		if got != tc.want {
			t.Errorf("%d: cmp(%q, %q) = %d, want %d", tc.oid, tc.a, tc.b, got, tc.want)
		}
	}
	if _, err := comparator(114, 0); err == nil {
		t.Fatal("json ordering should be refused")
	}
}

// TestNumericAgainstPostgres checks binary numeric decoding/encoding and
// numeric division (avg) against a real server.
func TestNumericAgainstPostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	values := []string{"0", "1", "-1", "0.0001", "12345.6789", "-98765432109876543210.0123456789", "1e-20", "100000000", "3.14159265358979323846", "NaN", "Infinity", "-Infinity", "0.50", "10000", "99999999.99990000"}
	for _, v := range values {
		// Binary: decode PostgreSQL's encoding, compare text, re-encode.
		var raw []byte
		var text string
		rows, err := conn.Query(ctx, "SELECT $1::numeric, $1::numeric::text", pgx.QueryResultFormats{1, 0}, v)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			raw = append([]byte{}, rows.RawValues()[0]...)
			text = string(rows.RawValues()[1])
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		d, err := decodeBinaryNumeric(raw)
		if err != nil {
			t.Fatal(err)
		}
		if d.String() != text {
			t.Errorf("%s: decoded %q, server text %q", v, d.String(), text)
		}
		p, err := parseDecimal(text)
		if err != nil {
			t.Fatal(err)
		}
		if enc := encodeBinaryNumeric(p); fmt.Sprint(enc) != fmt.Sprint(raw) {
			t.Errorf("%s: encoded %v, server %v", v, enc, raw)
		}
	}
	// Division scale and rounding, as avg() does it.
	r := rand.New(rand.NewPCG(1, 2))
	nums := []string{"1", "2", "3", "10", "7", "-7", "0.1", "123456789.123", "0.000003", "5000000000000", "-0.5", "1e-10", "33.3333"}
	for i := 0; i < 300; i++ {
		a := nums[r.IntN(len(nums))]
		b := fmt.Sprint(1 + r.IntN(100000))
		if i%3 == 0 {
			b = nums[r.IntN(len(nums))]
		}
		var want string
		if err := conn.QueryRow(ctx, "SELECT ($1::numeric / $2::numeric)::text", a, b).Scan(&want); err != nil {
			t.Fatalf("%s/%s: %v", a, b, err)
		}
		x, _ := parseDecimal(a)
		y, _ := parseDecimal(b)
		if got := divideNumeric(x, y).String(); got != want {
			t.Errorf("%s / %s = %s, PostgreSQL says %s", a, b, got, want)
		}
	}
}
