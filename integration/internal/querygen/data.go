package querygen

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// dataBatch is how many rows one INSERT of Data carries.
const dataBatch = 25

// Data returns the INSERT statements that fill the schema: a few hundred
// rows drawn from each column's values, so that every value recurs on
// several shards, with NULL in every nullable column (shard_key included),
// and one row in five a copy of an earlier row but for its id and, half
// the time, its shard_key, so that equal rows and groups span shards.
// lookup gets one row per code. The same seed gives the same statements.
func Data(seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var out []string
	for _, t := range tables {
		rows := tableRows(rng, &t)
		for start := 0; start < len(rows); start += dataBatch {
			end := min(start+dataBatch, len(rows))
			out = append(out, insert(&t, rows[start:end]))
		}
	}
	return out
}

// tableRows draws the rows of t, each a list of SQL literals: id, then
// t's columns.
func tableRows(rng *rand.Rand, t *table) [][]string {
	if t.name == "lookup" {
		var rows [][]string
		for i, code := range t.cols[0].values {
			rows = append(rows, []string{strconv.Itoa(i + 1), code,
				t.cols[1].values[i%len(t.cols[1].values)], t.cols[2].values[i%len(t.cols[2].values)]})
		}
		return rows
	}
	rows := make([][]string, 0, t.rows)
	for i := range t.rows {
		id := strconv.Itoa(i + 1)
		if i > 0 && rng.IntN(5) == 0 {
			row := append([]string{id}, rows[rng.IntN(len(rows))][1:]...)
			if rng.IntN(2) == 0 {
				row[1] = value(rng, t, &t.cols[0])
			}
			rows = append(rows, row)
			continue
		}
		row := []string{id}
		for c := range t.cols {
			row = append(row, value(rng, t, &t.cols[c]))
		}
		rows = append(rows, row)
	}
	return rows
}

// value draws a literal of column c of table t: NULL t.nulls percent of
// the time (the sharding key less often), else one of c.values.
func value(rng *rand.Rand, t *table, c *column) string {
	nulls := t.nulls
	if c.key {
		nulls = 3
	}
	if rng.IntN(100) < nulls {
		return "NULL"
	}
	return c.values[rng.IntN(len(c.values))]
}

// insert is the INSERT of rows into t, columns named.
func insert(t *table, rows [][]string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.name + " (id")
	for _, c := range t.cols {
		b.WriteString(", " + c.name)
	}
	b.WriteString(") VALUES ")
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + strings.Join(r, ", ") + ")")
	}
	return b.String()
}
