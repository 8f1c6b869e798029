package executor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Date and time values in the text format PostgreSQL writes with DateStyle
// ISO (src/backend/utils/adt/datetime.c, EncodeDateOnly, EncodeTimeOnly,
// EncodeDateTime, EncodeTimezone): "2024-01-02", "13:04:05.123456",
// "2024-01-02 13:04:05+05:30", years beyond 9999 with more digits, " BC"
// after years before 1, and "infinity"/"-infinity". Each is read into the
// integer PostgreSQL stores — days, or microseconds, since 2000-01-01, with
// the time zone offset applied — and compared as it does (date_cmp,
// time_cmp, timestamp_cmp, timetz_cmp). Other DateStyles are an error,
// never a guess.

const (
	usecsPerSec    = 1_000_000
	usecsPerMinute = 60 * usecsPerSec
	usecsPerHour   = 60 * usecsPerMinute
	usecsPerDay    = 24 * usecsPerHour
	postgresEpochJ = 2451545 // date2j(2000, 1, 1)
)

// date2j is PostgreSQL's date2j: the Julian day of a proleptic Gregorian
// date whose year is astronomical (1 BC is 0).
func date2j(year, month, day int64) int64 {
	if month > 2 {
		month++
		year += 4800
	} else {
		month += 13
		year += 4799
	}
	century := year / 100
	julian := year*365 - 32167
	julian += year/4 - century + century/4
	julian += 7834*month/256 + day
	return julian
}

// daysInMonth of a proleptic Gregorian astronomical year.
func daysInMonth(year, month int64) int64 {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// isoInfinity maps "infinity" and "-infinity" to the extremes PostgreSQL
// stores for them.
func isoInfinity(s string) (int64, bool) {
	switch s {
	case "infinity":
		return math.MaxInt64, true
	case "-infinity":
		return math.MinInt64, true
	}
	return 0, false
}

// parseISODate reads "YYYY-MM-DD" (four or more year digits) and returns
// the days since 2000-01-01, given whether " BC" followed.
func parseISODate(s string, bc bool) (int64, error) {
	y, rest, ok := strings.Cut(s, "-")
	if !ok || len(y) < 4 || len(rest) != 5 || rest[2] != '-' {
		return 0, fmt.Errorf("not an ISO date")
	}
	year, ok1 := digits(y)
	month, ok2 := digits(rest[:2])
	day, ok3 := digits(rest[3:])
	if !ok1 || !ok2 || !ok3 || year > 1e7 || month < 1 || month > 12 {
		return 0, fmt.Errorf("not an ISO date")
	}
	if bc {
		year = 1 - year
	}
	if day < 1 || day > daysInMonth(year, month) {
		return 0, fmt.Errorf("not an ISO date")
	}
	return date2j(year, month, day) - postgresEpochJ, nil
}

// parseISOTime reads "HH:MM:SS[.ffffff]" (up to 24:00:00) into
// microseconds.
func parseISOTime(s string) (int64, error) {
	if len(s) < 8 || s[2] != ':' || s[5] != ':' {
		return 0, fmt.Errorf("not an ISO time")
	}
	h, ok1 := digits(s[:2])
	m, ok2 := digits(s[3:5])
	sec, frac, ok3 := seconds(s[6:])
	if !ok1 || !ok2 || !ok3 || m > 59 || sec > 60 {
		return 0, fmt.Errorf("not an ISO time")
	}
	t := h*usecsPerHour + m*usecsPerMinute + sec*usecsPerSec + frac
	if t > usecsPerDay {
		return 0, fmt.Errorf("not an ISO time")
	}
	return t, nil
}

// seconds reads "SS[.f…]" with at most six fraction digits.
func seconds(s string) (sec, usec int64, ok bool) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if len(whole) != 2 {
		return 0, 0, false
	}
	if sec, ok = digits(whole); !ok {
		return 0, 0, false
	}
	if !hasFrac {
		return sec, 0, true
	}
	if len(frac) == 0 || len(frac) > 6 {
		return 0, 0, false
	}
	f, ok := digits(frac)
	if !ok {
		return 0, 0, false
	}
	for i := len(frac); i < 6; i++ {
		f *= 10
	}
	return sec, f, true
}

// digits reads a non-empty run of ASCII digits (at most 18).
func digits(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseZone reads "+HH[:MM[:SS]]" or "-…" and returns PostgreSQL's zone:
// seconds west of UTC (the negated offset).
func parseZone(s string) (int64, error) {
	if len(s) < 3 || (s[0] != '+' && s[0] != '-') {
		return 0, fmt.Errorf("not an ISO time zone")
	}
	var parts [3]int64
	fields := strings.Split(s[1:], ":")
	if len(fields) > 3 {
		return 0, fmt.Errorf("not an ISO time zone")
	}
	for i, f := range fields {
		v, ok := digits(f)
		if !ok || len(f) != 2 || (i > 0 && v > 59) {
			return 0, fmt.Errorf("not an ISO time zone")
		}
		parts[i] = v
	}
	off := parts[0]*3600 + parts[1]*60 + parts[2]
	if s[0] == '+' {
		return -off, nil
	}
	return off, nil
}

// splitZone splits "13:04:05.5+05:30" into the time and the zone.
func splitZone(s string) (string, string, bool) {
	i := strings.LastIndexAny(s, "+-")
	if i < 8 {
		return "", "", false
	}
	return s[:i], s[i:], true
}

// textDate returns a date's days since 2000-01-01.
func textDate(s string) (int64, error) {
	if v, ok := isoInfinity(s); ok {
		return v, nil
	}
	d, bc := strings.CutSuffix(s, " BC")
	return parseISODate(d, bc)
}

// textTimestamp returns a timestamp's (or, with zone, a timestamptz's)
// microseconds since 2000-01-01 00:00 (UTC).
func textTimestamp(s string, zone bool) (int64, error) {
	if v, ok := isoInfinity(s); ok {
		return v, nil
	}
	s, bc := strings.CutSuffix(s, " BC")
	d, t, ok := strings.Cut(s, " ")
	if !ok {
		return 0, fmt.Errorf("not an ISO timestamp")
	}
	days, err := parseISODate(d, bc)
	if err != nil {
		return 0, err
	}
	var z int64
	if zone {
		var zs string
		if t, zs, ok = splitZone(t); !ok {
			return 0, fmt.Errorf("not an ISO timestamp with time zone")
		}
		if z, err = parseZone(zs); err != nil {
			return 0, err
		}
	}
	us, err := parseISOTime(t)
	if err != nil {
		return 0, err
	}
	return days*usecsPerDay + us + z*usecsPerSec, nil
}

// timetz is PostgreSQL's TimeTzADT: local time and zone (seconds west).
type timetz struct{ time, zone int64 }

// cmp is timetz_cmp_internal: by the UTC instant, then by zone.
func (a timetz) cmp(b timetz) int {
	if c := cmpInt64(a.time+a.zone*usecsPerSec, b.time+b.zone*usecsPerSec); c != 0 {
		return c
	}
	return cmpInt64(a.zone, b.zone)
}

func textTimetz(s string) (timetz, error) {
	t, zs, ok := splitZone(s)
	if !ok {
		return timetz{}, fmt.Errorf("not an ISO time with time zone")
	}
	us, err := parseISOTime(t)
	if err != nil {
		return timetz{}, err
	}
	z, err := parseZone(zs)
	if err != nil {
		return timetz{}, err
	}
	return timetz{us, z}, nil
}

// binaryTimetz decodes timetz_send: int64 microseconds, int32 zone.
func binaryTimetz(b []byte) (timetz, error) {
	if len(b) != 12 {
		return timetz{}, fmt.Errorf("invalid binary timetz of %d bytes", len(b))
	}
	return timetz{int64(binary.BigEndian.Uint64(b)), int64(int32(binary.BigEndian.Uint32(b[8:])))}, nil
}

// textOrder compares two values read into integers by parse, naming the
// DateStyle the proxy reads in its error.
func textOrder(parse func(string) (int64, error)) compareFunc {
	return func(a, b []byte) (int, error) {
		x, err := parse(string(a))
		if err != nil {
			return 0, dateStyleError(a, err)
		}
		y, err := parse(string(b))
		if err != nil {
			return 0, dateStyleError(b, err)
		}
		return cmpInt64(x, y), nil
	}
}

func dateStyleError(v []byte, err error) error {
	return fmt.Errorf("cannot compare %q: %w (the proxy merges dates and times in DateStyle ISO only)", v, err)
}

func cmpTextTimetz(a, b []byte) (int, error) {
	x, err := textTimetz(string(a))
	if err != nil {
		return 0, dateStyleError(a, err)
	}
	y, err := textTimetz(string(b))
	if err != nil {
		return 0, dateStyleError(b, err)
	}
	return x.cmp(y), nil
}

func cmpBinaryTimetz(a, b []byte) (int, error) {
	x, err := binaryTimetz(a)
	if err != nil {
		return 0, err
	}
	y, err := binaryTimetz(b)
	if err != nil {
		return 0, err
	}
	return x.cmp(y), nil
}
