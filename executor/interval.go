package executor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// interval is PostgreSQL's Interval: months, days and microseconds, kept
// apart because a month and a day have no fixed length.
type interval struct {
	months, days int64 // int32 in PostgreSQL
	usecs        int64
}

// cmp is interval_cmp (src/backend/utils/adt/timestamp.c): intervals
// compare by their span, interval_cmp_value, with a month counted as 30
// days and a day as 24 hours — so '1 mon' equals '30 days' and '1 day'
// equals '24:00:00'. PostgreSQL forms the span in 128 bits; here it is
// compared as days plus the rest of a day, which fits in 64.
func (a interval) cmp(b interval) int {
	ad, ar := a.span()
	bd, br := b.span()
	if c := cmpInt64(ad, bd); c != 0 {
		return c
	}
	return cmpInt64(ar, br)
}

// span returns months*30 + days + floor(usecs / day) and the remainder
// (0 <= rest < a day): together, the 128-bit span of interval_cmp_value.
func (a interval) span() (days, rest int64) {
	q, r := a.usecs/usecsPerDay, a.usecs%usecsPerDay
	if r < 0 {
		q, r = q-1, r+usecsPerDay
	}
	return a.months*30 + a.days + q, r
}

// binaryInterval decodes interval_send: int64 microseconds, int32 days,
// int32 months.
func binaryInterval(b []byte) (interval, error) {
	if len(b) != 16 {
		return interval{}, fmt.Errorf("invalid binary interval of %d bytes", len(b))
	}
	return interval{
		usecs:  int64(binary.BigEndian.Uint64(b)),
		days:   int64(int32(binary.BigEndian.Uint32(b[8:]))),
		months: int64(int32(binary.BigEndian.Uint32(b[12:]))),
	}, nil
}

// textInterval reads an interval in any of the four IntervalStyles
// PostgreSQL writes (datetime.c, EncodeInterval): postgres ("1 year 2 mons
// -3 days +04:05:06.5"), postgres_verbose ("@ 1 year 2 mons 3 days ago"),
// sql_standard ("1-2", "3 4:05:06", "+1-2 -3 +4:05:06") and iso_8601
// ("P1Y2M3DT4H5M6.5S"), and PostgreSQL 17's "infinity". Each writes every
// field exactly, so the value read is the one stored.
func textInterval(s string) (interval, error) {
	var v interval
	var err error
	switch {
	case s == "infinity":
		return interval{math.MaxInt32, math.MaxInt32, math.MaxInt64}, nil
	case s == "-infinity":
		return interval{math.MinInt32, math.MinInt32, math.MinInt64}, nil
	case strings.HasPrefix(s, "@"):
		v, err = verboseInterval(s)
	case strings.HasPrefix(s, "P"):
		v, err = isoInterval(s)
	case strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyz"):
		v, err = postgresInterval(s)
	default:
		v, err = sqlInterval(s)
	}
	if err != nil {
		return interval{}, fmt.Errorf("cannot read interval %q: %w", s, err)
	}
	return v, nil
}

// unitField maps the unit words of the postgres styles to the field they
// set and its scale.
func unitField(v *interval, unit string, n int64) bool {
	switch strings.TrimSuffix(unit, "s") {
	case "year":
		v.months += 12 * n
	case "mon":
		v.months += n
	case "day":
		v.days += n
	case "hour":
		v.usecs += n * usecsPerHour
	case "min":
		v.usecs += n * usecsPerMinute
	default:
		return false
	}
	return true
}

// signed reads an optionally signed integer.
func signed(s string) (int64, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	n, ok := digits(s)
	if neg {
		n = -n
	}
	return n, ok
}

// clock reads "[+|-]H:MM:SS[.ffffff]" (any number of hour digits) into
// microseconds.
func clock(s string) (int64, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	h, rest, ok := strings.Cut(s, ":")
	if !ok || len(rest) < 5 || rest[2] != ':' {
		return 0, false
	}
	hours, ok1 := digits(h)
	mins, ok2 := digits(rest[:2])
	sec, frac, ok3 := seconds(rest[3:])
	if !ok1 || !ok2 || !ok3 || hours > math.MaxInt64/usecsPerHour {
		return 0, false
	}
	// The magnitude in unsigned arithmetic: the most negative time has no
	// positive counterpart.
	mag := uint64(hours)*usecsPerHour + uint64(mins*usecsPerMinute+sec*usecsPerSec+frac)
	switch {
	case neg && mag <= 1<<63:
		return int64(-mag), true
	case !neg && mag < 1<<63:
		return int64(mag), true
	}
	return 0, false
}

// postgresInterval reads IntervalStyle postgres: "N unit" pairs, then an
// optional clock.
func postgresInterval(s string) (interval, error) {
	var v interval
	f := strings.Fields(s)
	for i := 0; i < len(f); i++ {
		if strings.Contains(f[i], ":") && i == len(f)-1 {
			t, ok := clock(f[i])
			if !ok {
				return v, fmt.Errorf("bad time %q", f[i])
			}
			v.usecs += t
			continue
		}
		n, ok := signed(f[i])
		if !ok || i+1 >= len(f) || !unitField(&v, f[i+1], n) {
			return v, fmt.Errorf("bad field %q", f[i])
		}
		i++
	}
	return v, nil
}

// verboseInterval reads IntervalStyle postgres_verbose: "@", "N unit"
// pairs (seconds with a fraction), "0" for zero, and "ago", which negates
// every field.
func verboseInterval(s string) (interval, error) {
	var v interval
	f := strings.Fields(strings.TrimPrefix(s, "@"))
	ago := len(f) > 0 && f[len(f)-1] == "ago"
	if ago {
		f = f[:len(f)-1]
	}
	if len(f) == 1 && f[0] == "0" {
		return v, nil
	}
	for i := 0; i+1 < len(f); i += 2 {
		if u := strings.TrimSuffix(f[i+1], "s"); u == "sec" {
			neg := strings.HasPrefix(f[i], "-")
			sec, frac, ok := verboseSeconds(strings.TrimPrefix(f[i], "-"))
			if !ok {
				return v, fmt.Errorf("bad seconds %q", f[i])
			}
			t := sec*usecsPerSec + frac
			if neg {
				t = -t
			}
			v.usecs += t
			continue
		}
		n, ok := signed(f[i])
		if !ok || !unitField(&v, f[i+1], n) {
			return v, fmt.Errorf("bad field %q", f[i])
		}
	}
	if len(f)%2 != 0 {
		return v, fmt.Errorf("unpaired field")
	}
	if ago {
		v = interval{-v.months, -v.days, -v.usecs}
	}
	return v, nil
}

// verboseSeconds reads seconds without zero padding: "6", "6.5", "0.25".
func verboseSeconds(s string) (int64, int64, bool) {
	whole, _, _ := strings.Cut(s, ".")
	if len(whole) == 1 {
		s = "0" + s
	}
	if len(whole) > 2 {
		n, ok := digits(whole)
		if !ok {
			return 0, 0, false
		}
		sec, frac, ok := seconds("00" + s[len(whole):])
		return n + sec, frac, ok
	}
	return seconds(s)
}

// isoInterval reads IntervalStyle iso_8601: "P", then signed numbers with
// the units Y, M, D, and after "T" H, M and S (with a fraction).
func isoInterval(s string) (interval, error) {
	var v interval
	s = strings.TrimPrefix(s, "P")
	timePart := false
	for len(s) > 0 {
		if s[0] == 'T' {
			timePart = true
			s = s[1:]
			continue
		}
		i := strings.IndexAny(s, "YMDHS")
		if i <= 0 {
			return v, fmt.Errorf("bad field %q", s)
		}
		num, unit := s[:i], s[i]
		s = s[i+1:]
		if unit == 'S' {
			neg := strings.HasPrefix(num, "-")
			sec, frac, ok := verboseSeconds(strings.TrimPrefix(num, "-"))
			if !ok || !timePart {
				return v, fmt.Errorf("bad seconds %q", num)
			}
			t := sec*usecsPerSec + frac
			if neg {
				t = -t
			}
			v.usecs += t
			continue
		}
		n, ok := signed(num)
		if !ok {
			return v, fmt.Errorf("bad field %q", num)
		}
		switch {
		case unit == 'Y' && !timePart:
			v.months += 12 * n
		case unit == 'M' && !timePart:
			v.months += n
		case unit == 'D' && !timePart:
			v.days += n
		case unit == 'H' && timePart:
			v.usecs += n * usecsPerHour
		case unit == 'M' && timePart:
			v.usecs += n * usecsPerMinute
		default:
			return v, fmt.Errorf("bad unit %c", unit)
		}
	}
	return v, nil
}

// sqlInterval reads IntervalStyle sql_standard: "0"; "[-]Y-M";
// "[-]D H:MM:SS"; "[-]H:MM:SS"; or, with fields of mixed signs or both
// year-month and day-time fields, "±Y-M ±D ±H:MM:SS".
func sqlInterval(s string) (interval, error) {
	var v interval
	if s == "0" {
		return v, nil
	}
	f := strings.Fields(s)
	if len(f) == 3 {
		ym, ok1 := yearMonth(f[0])
		d, ok2 := signed(f[1])
		t, ok3 := clock(f[2])
		if !ok1 || !ok2 || !ok3 {
			return v, fmt.Errorf("bad sql_standard interval")
		}
		return interval{ym, d, t}, nil
	}
	neg := strings.HasPrefix(s, "-")
	if neg {
		f[0] = f[0][1:]
	}
	var ok bool
	switch {
	case len(f) == 2:
		var d, t int64
		d, ok = digits(f[0])
		if ok {
			t, ok = clock(f[1])
		}
		v = interval{0, d, t}
	case len(f) == 1 && strings.Contains(f[0], ":"):
		v.usecs, ok = clock(f[0])
	case len(f) == 1:
		v.months, ok = yearMonth(f[0])
	}
	if !ok || strings.HasPrefix(f[len(f)-1], "-") || strings.HasPrefix(f[0], "+") {
		return v, fmt.Errorf("bad sql_standard interval")
	}
	if neg {
		v = interval{-v.months, -v.days, -v.usecs}
	}
	return v, nil
}

// yearMonth reads "[±]Y-M" into months; the sign applies to both.
func yearMonth(s string) (int64, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	y, m, ok := strings.Cut(s, "-")
	if !ok {
		return 0, false
	}
	years, ok1 := digits(y)
	months, ok2 := digits(m)
	if !ok1 || !ok2 {
		return 0, false
	}
	n := years*12 + months
	if neg {
		n = -n
	}
	return n, true
}

func cmpTextInterval(a, b []byte) (int, error) {
	x, err := textInterval(string(a))
	if err != nil {
		return 0, err
	}
	y, err := textInterval(string(b))
	if err != nil {
		return 0, err
	}
	return x.cmp(y), nil
}

func cmpBinaryInterval(a, b []byte) (int, error) {
	x, err := binaryInterval(a)
	if err != nil {
		return 0, err
	}
	y, err := binaryInterval(b)
	if err != nil {
		return 0, err
	}
	return x.cmp(y), nil
}
