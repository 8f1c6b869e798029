package router

import (
	"encoding/binary"
	"strconv"

	"github.com/shardgate/shardgate/router/sharding"
)

// Kind says what the executor does with a statement.
type Kind uint8

const (
	// Direct sends the statement to the one shard in Plan.Shards and relays
	// its answer unchanged.
	Direct Kind = iota + 1
	// Multi sends the statement to the shards in Plan.Shards, a proper
	// subset of the database's shards, and combines their answers (Merge,
	// InsertRows).
	Multi
	// All sends the statement to every shard and combines their answers: a
	// fan-out read, a write without a sharding key, a multi-row INSERT whose
	// rows span every shard, DDL, or COPY FROM split by row (Plan.Copy).
	All
	// OmniRead reads only omni tables, which hold the same rows on every
	// shard: the executor sends it to any one shard of Plan.Shards, chosen at
	// random.
	OmniRead
	// OmniWrite writes an omni table: the executor sends it to every shard
	// and gives the client one shard's answer (row count, RETURNING rows),
	// as the rows are the same everywhere.
	OmniWrite
	// Any names no table (SELECT 1, SELECT now()): any one shard answers.
	Any
	// Session changes or reads session state (SET, RESET, SHOW, DISCARD,
	// LISTEN, FETCH, …). The frontend tracks it and replays it on the
	// servers it uses; Plan.Shards lists every shard.
	Session
	// Transaction is transaction control (BEGIN, COMMIT, ROLLBACK,
	// SAVEPOINT, PREPARE TRANSACTION, …). The executor opens or ends the
	// transaction on the shards the transaction touches.
	Transaction
	// Parts is a text of several statements that need different shards
	// (or a merge): each statement of Plan.Parts is routed and run on its
	// own, in one implicit transaction, as PostgreSQL runs a
	// multi-statement Query.
	Parts
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Direct:
		return "Direct"
	case Multi:
		return "Multi"
	case All:
		return "All"
	case OmniRead:
		return "OmniRead"
	case OmniWrite:
		return "OmniWrite"
	case Any:
		return "Any"
	case Session:
		return "Session"
	case Transaction:
		return "Transaction"
	case Parts:
		return "Parts"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Plan is where a statement goes for one set of parameter values, and what
// the executor must do with the answers. Plans are read-only: Route returns
// the same *Plan to every caller when routing does not depend on parameters.
type Plan struct {
	Kind Kind
	// Parts are the statements of a Parts plan, in order, each its own
	// text.
	Parts []string
	// Shards are the target shards in increasing order. For OmniRead and Any
	// they are the candidates the executor picks one of; for Session and
	// Transaction, every shard.
	Shards []int
	// Write is true when the statement may change data or schema or takes
	// row locks (INSERT, UPDATE, DELETE, MERGE, DDL, COPY FROM, SELECT … FOR
	// UPDATE, SELECT INTO): it must run on primaries.
	Write bool
	// Merge says how to combine the rows of a SELECT answered by several
	// shards. It is nil when the rows are simply concatenated in any order
	// (no ORDER BY, LIMIT, aggregate or DISTINCT) and whenever one shard
	// answers. It is shared by every Plan of the statement.
	Merge *Merge
	// InsertRows is set for a multi-row INSERT … VALUES whose rows go to
	// different shards: shard → indexes of its rows (0-based, in VALUES
	// order). Statement.InsertSQL builds the per-shard statement.
	InsertRows map[int][]int
	// Copy is set for COPY … FROM STDIN: the format options and, when rows
	// are split by sharding key (Kind All), the key column.
	Copy *Copy
	// InsertSelect is set for INSERT … SELECT into a sharded table (Kind
	// All: its rows may go to any shard): where its SELECT runs and how
	// the rows are sent on.
	InsertSelect *InsertSelect
	// CopyOut is set for COPY (query) TO STDOUT whose rows are merged
	// across shards: the shards run Merge.Rewritten, a SELECT, and the
	// rows go to the client as COPY data (copyout.go).
	CopyOut *CopyOut

	one [1]int // backing array of Shards for a Direct plan
}

// Column is the position of a column in the rows that shards return. A
// non-negative Column counts from the first column (0 is the first); a
// negative one counts from the end (-1 is the last). Columns after a `*` in
// the select list, and the hidden columns the router appends, are given from
// the end because the width of `*` is known only from RowDescription.
type Column int

// NoColumn is no column (its Index is negative in any row).
const NoColumn Column = -1 << 30

// Index returns the 0-based position of c in a row of n columns.
func (c Column) Index(n int) int {
	if c < 0 {
		return n + int(c)
	}
	return int(c)
}

// Merge is how the executor combines the rows of a SELECT answered by
// several shards. It runs these steps in order:
//
//  1. Grouped: rows whose GroupBy columns are equal (NULLs equal to each
//     other, as in GROUP BY) become one row; each Aggregate column combines
//     the per-shard partial results; AggAvg divides its sum by its count.
//     An aggregate query without GROUP BY has no GroupBy columns: all rows
//     combine into one.
//  2. Having: rows failing any condition are dropped.
//  3. Outer: one shard computes the expressions over aggregates of each
//     remaining row, and drops the rows that fail the rest of HAVING.
//  4. Distinct: duplicate rows (over the visible columns) are dropped; with
//     DistinctOn, only the first row of each DistinctOn key in OrderBy
//     order is kept.
//  5. OrderBy: rows are sorted. When the statement is not Grouped, each
//     shard already returns its rows in this order and a k-way merge
//     suffices.
//  6. Offset rows are skipped, then at most Limit rows are returned.
//  7. The last HiddenColumns columns are removed from RowDescription and
//     from every row.
//
// Values compare as PostgreSQL compares them for the column's type (from
// RowDescription). Text compares by the column's collation; the router
// cannot know it, so the executor must use the database's collation (C
// collation compares bytes).
type Merge struct {
	// OrderBy are the sort keys, most significant first.
	OrderBy []SortKey
	// Limit and Offset are nil when absent (LIMIT ALL and LIMIT NULL are
	// absent). Shards receive LIMIT Limit+Offset and no OFFSET, or no LIMIT
	// at all when Grouped; the executor applies both.
	Limit, Offset *Expr
	// Grouped is true for a query with aggregates or GROUP BY.
	Grouped bool
	// GroupBy are the columns that identify a group: every output column
	// that is not an aggregate, and the hidden GROUP BY expressions that the
	// select list lacks.
	GroupBy []Column
	// Aggregates are the aggregate columns to combine.
	Aggregates []Aggregate
	// Having are conditions ANDed together, evaluated by the executor after
	// grouping; shards receive the query without HAVING.
	Having []Cond
	// SortedBy, set when aggregates are DISTINCT or an aggregate collects
	// its values in an ORDER BY (string_agg(x, ',' ORDER BY y)), is the
	// order of the shards' rows: the GroupBy columns ascending, NULLs
	// last, then the DISTINCT value (ascending, NULLs last) or the
	// collecting aggregates' ORDER BY keys in their own directions.
	// Shards group by the value or the keys as well; the executor merges
	// their sorted rows, folds each Distinct aggregate once per value of a
	// group (distinct.go) and appends each row's partial collection to its
	// group's (collect.go).
	SortedBy []SortKey
	// Tagged is set when DISTINCT aggregates dedupe several values (or
	// FILTERs): shards group their rows by grouping sets, the query's
	// groups alone and with each value, and tag each row with its set
	// (multidistinct.go). SortedBy is then the GroupBy columns, the tag,
	// and the values; each Aggregate combines only the rows of its Tag.
	Tagged *Tagged
	// Outer, when set, computes what shards cannot: the select list items
	// that are expressions over aggregates, the ORDER BY keys that are, and
	// the HAVING terms that Having cannot express.
	Outer *Outer
	// Distinct is SELECT DISTINCT over the visible columns.
	Distinct bool
	// DistinctOn are the DISTINCT ON columns.
	DistinctOn []Column
	// Dedup is a UNION (without ALL) across shards: each shard returns
	// its rows of the union deduplicated and sorted by OrderBy, which
	// holds every output column (the client's ORDER BY keys first), and
	// the executor drops each row equal to the one before it, before
	// OFFSET and LIMIT.
	Dedup bool
	// SetOp, when not 0, is the top operation of a set operation with
	// INTERSECT or EXCEPT in it, or a UNION under a UNION ALL, across
	// shards (union.go: setOpMerge): each shard returns the rows of every
	// query, the query's number (1, 2, …) in the last hidden column, sorted
	// by OrderBy, which holds every output column (the client's ORDER BY
	// keys first); the executor counts each run of equal rows per query,
	// computes from those counts how often the whole operation keeps the
	// row (SetSteps) and sends it that often, before OFFSET and LIMIT.
	SetOp SetOp
	// SetSteps is the set operation's tree in postfix order: a step with
	// a Leaf pushes the count of that query (0-based), one without pops
	// two counts and pushes what its operation makes of them.
	SetSteps []SetStep
	// OrderAll: a UNION, INTERSECT or EXCEPT whose first query's select
	// list has *, which the router cannot count: the rows are sorted by
	// every visible output column in order (the executor adds them to
	// OrderBy once it has the RowDescription; the shards sort by the
	// whole row).
	OrderAll bool
	// WithTies, when not 0, is FETCH FIRST … ROWS WITH TIES: after Limit
	// rows, the executor sends the rows equal to the last one by the
	// first WithTies keys of OrderBy (the client's ORDER BY; a UNION's
	// OrderBy has more). Shards get FETCH FIRST Limit+Offset ROWS WITH
	// TIES.
	WithTies int
	// Windows are select list items whose window function the executor
	// computes over the merged rows (proxywindow.go): row numbers and
	// ranks in OrderBy order, whose first WindowOrder keys are the
	// window's (a rank's peers are equal by them), and totals over all
	// rows (Func an aggregate), combined from the first row of every
	// shard. They are computed before Offset and Limit.
	Windows     []Window
	WindowOrder int
	// HiddenColumns is how many columns at the end of each row the router
	// added (ORDER BY, GROUP BY or HAVING expressions missing from the select
	// list, the count of an avg); the executor strips them.
	HiddenColumns int
	// HiddenFormats, when not nil, says per hidden column which visible
	// column's result format it takes in the extended protocol (NoColumn:
	// text, when the client's Bind lists a format per column); a value
	// the executor copies into that column must arrive in its format.
	HiddenFormats []Column
	// Rewritten is the SQL to send to shards instead of the client's, or ""
	// when the client's statement is sent as is. It uses the same parameters.
	Rewritten string
	// CountName, when set, makes the merge the client's SELECT count(*)
	// [AS name] FROM (subquery) s, the shape ORMs count a query's rows
	// with: the shards run the subquery (Rewritten), the other fields merge
	// its rows as for the subquery alone, and the client gets one row, the
	// number of rows merged, as a bigint column of that name.
	CountName string
	// Exists, with CountName, makes it the client's SELECT EXISTS
	// (subquery) [AS name]: one boolean row, whether the merge yields a
	// row (it stops at the first).
	Exists bool
	// Probe, when set, is the only field: the statement names a table
	// the router cannot place, and runs on every shard as written only so
	// that the shards' error (42P01 for a table that does not exist) is
	// the client's. When every shard answers without an error, the
	// executor discards their rows and answers Probe, a 0A000.
	Probe error
	// ParseOnly goes with Probe for a statement that writes, or that the
	// router refuses: the shards only Parse it (as the extended protocol's
	// unnamed statement, closed again), which analyses it — every
	// relation, column, function and type resolved — and runs nothing. A
	// shard's error is the client's; when every shard parses it, Probe
	// is.
	ParseOnly bool
	// ProbeSQL, for a ParseOnly probe of COPY (query) TO, is what the
	// shards parse instead: the query, after one space for each character
	// of the client's text before it, so that an error's position is the
	// one PostgreSQL gives.
	ProbeSQL string
	// ProbeRelation, for a ParseOnly probe of COPY of a table, is the
	// table's name, which the shards look up as $1::regclass instead:
	// PostgreSQL's error for a table (or schema) that does not exist, as
	// COPY's, without a position.
	ProbeRelation string
}

// SetOp is a set operation the executor computes from the shards' rows.
type SetOp uint8

const (
	SetIntersect SetOp = iota + 1
	SetIntersectAll
	SetExcept
	SetExceptAll
	SetUnion
	SetUnionAll
)

// SetStep is one step of Merge.SetSteps: the count of query Leaf when Op
// is 0, else operation Op over the two counts before it.
type SetStep struct {
	Op   SetOp
	Leaf int
}

// Outer is a statement that computes, for one combined row (group) of a
// grouped query, the values that only the combined aggregates determine:
// max(x) - min(x), count(*)::int, round(avg(x), 2), CASE WHEN count(*) > 0
// …, a HAVING term like sum(x) > 2 * count(*). Its expressions are the
// client's, with each aggregate, GROUP BY expression and column reference
// replaced by a column of __shardgate_in, a one-row relation of the
// row's Inputs; the row passes HAVING when the statement returns a row.
// Running it on a server gives every operator, function, cast, result
// type, NULL and error (22012 division by zero) PostgreSQL's own.
//
// The executor prepares it on one shard as
//
//	WITH __shardgate_in(i1, …, in) AS MATERIALIZED (SELECT $1, …, $n) <SQL>
//
// with parameter k of the type and format of the shards' column
// Inputs[k-1] (an avg's as avg's result: numeric, or float8 over floats),
// cast to the column's type modifier when it has one, and executes it once
// per row. Result column k goes into column Outputs[k-1] of the row, in
// that column's format: shards return a placeholder there, CASE WHEN
// false THEN expr END, of the expression's type and collation (the
// executor replaces its RowDescription field with the statement's).
type Outer struct {
	SQL     string
	Inputs  []Column
	Outputs []Column
}

// Tagged says how the rows of shards grouping by several grouping sets
// are told apart.
type Tagged struct {
	// Column is the hidden tag column: GROUPING() over the values that
	// have a set (an int4), 0 when none has.
	Column Column
	// Plain is the tag of the rows of the query's groups alone.
	Plain int64
	// Sets are the other tags, each with the column of the value its
	// rows are grouped by too.
	Sets []TaggedSet
}

// TaggedSet is one grouping set of a DISTINCT value.
type TaggedSet struct {
	Tag   int64
	Value Column
	// More are the further columns of the set of a row value (a, b),
	// whose rows are grouped by each of its fields.
	More []Column
}

// SortKey is one ORDER BY item.
type SortKey struct {
	Column     Column
	Desc       bool
	NullsFirst bool // PostgreSQL's default: NULLS LAST for ASC, NULLS FIRST for DESC
}

// AggFunc is an aggregate function the executor can combine across shards.
type AggFunc uint8

const (
	// AggCount adds the shards' counts.
	AggCount AggFunc = iota + 1
	// AggSum adds the shards' sums, ignoring NULLs; all NULL gives NULL.
	AggSum
	// AggMin keeps the least non-NULL value.
	AggMin
	// AggMax keeps the greatest non-NULL value.
	AggMax
	// AggAvg is avg(x), sent to shards as sum(x) in its column plus count(x)
	// in Aggregate.Count: the result is the total sum divided by the total
	// count (NULL when the count is 0), typed numeric when the sum column is
	// int8 or numeric, float8 when it is float4 or float8, interval for
	// interval, as PostgreSQL's avg is. RowDescription must say so.
	AggAvg
	// AggBoolAnd is bool_and and every: false if any shard says false.
	AggBoolAnd
	// AggBoolOr is bool_or: true if any shard says true.
	AggBoolOr
	// AggStringAgg is string_agg(x, sep): the partial strings are joined,
	// each preceded by its row's separator (Aggregate.Sep) but the first.
	AggStringAgg
	// AggArrayAgg is array_agg(x): the partial arrays are concatenated
	// along their first dimension.
	AggArrayAgg
	// AggJSONAgg is json_agg(x) and json_agg_strict(x): the partial
	// arrays are concatenated with ", ", and "\n " before a non-null
	// element when x is an array or a composite (Aggregate.Structured).
	AggJSONAgg
	// AggJSONBAgg is jsonb_agg(x) and jsonb_agg_strict(x): the partial
	// arrays are concatenated with ", ".
	AggJSONBAgg
	// AggBitAnd, AggBitOr and AggBitXor are bit_and, bit_or and bit_xor
	// of integers or bit strings: the partials combine with the operator.
	AggBitAnd
	AggBitOr
	AggBitXor
	// AggStddevSamp (stddev, stddev_samp), AggStddevPop, AggVarSamp
	// (variance, var_samp) and AggVarPop are computed from the shards'
	// moments of x (Aggregate.Moments, variance.go): exactly as
	// numeric_stddev_internal does for integer and numeric x, by
	// float8_combine and the float8 final functions for real and double
	// precision x.
	AggStddevSamp
	AggStddevPop
	AggVarSamp
	AggVarPop
	// AggCorr through AggRegrSYY are corr, covar_pop, covar_samp and the
	// regr_ aggregates but regr_count, computed from the shards' states
	// of float8_regr_accum (Aggregate.Regression, regression.go).
	// AggRegrCount adds the shards' regr_count as counts.
	AggCorr
	AggCovarPop
	AggCovarSamp
	AggRegrAvgX
	AggRegrAvgY
	AggRegrIntercept
	AggRegrR2
	AggRegrSlope
	AggRegrSXX
	AggRegrSXY
	AggRegrSYY
	AggRegrCount
	// AggJSONObjectAgg is json_object_agg(k, v): the partial objects'
	// pairs one after another. AggJSONBObjectAgg is jsonb_object_agg(k,
	// v): the partial objects' pairs merged, a key's last value winning,
	// in jsonb's key order.
	AggJSONObjectAgg
	AggJSONBObjectAgg
)

// String returns the SQL name of the aggregate.
func (f AggFunc) String() string {
	switch f {
	case AggCount:
		return "count"
	case AggSum:
		return "sum"
	case AggMin:
		return "min"
	case AggMax:
		return "max"
	case AggAvg:
		return "avg"
	case AggBoolAnd:
		return "bool_and"
	case AggBoolOr:
		return "bool_or"
	case AggStringAgg:
		return "string_agg"
	case AggArrayAgg:
		return "array_agg"
	case AggJSONAgg:
		return "json_agg"
	case AggJSONBAgg:
		return "jsonb_agg"
	case AggBitAnd:
		return "bit_and"
	case AggBitOr:
		return "bit_or"
	case AggBitXor:
		return "bit_xor"
	case AggStddevSamp:
		return "stddev_samp"
	case AggStddevPop:
		return "stddev_pop"
	case AggVarSamp:
		return "var_samp"
	case AggVarPop:
		return "var_pop"
	}
	if name, ok := regressionNames[f]; ok {
		return name
	}
	return "AggFunc(" + strconv.Itoa(int(f)) + ")"
}

// Aggregate is an aggregate column of a grouped SELECT.
type Aggregate struct {
	Column Column
	Func   AggFunc
	Count  Column // AggAvg only: the hidden count(x) column
	// Distinct is count, sum, avg or bit_xor(DISTINCT x), or a collecting
	// aggregate with DISTINCT: combined once per x (Merge.SortedBy).
	Distinct bool
	// Tag, when Merge.Tagged is set, is the tag of the rows whose
	// partials this aggregate combines.
	Tag int64
	// Sep is, for AggStringAgg, the hidden column of the separator that
	// precedes every value of the row's partial string.
	Sep Column
	// Structured is, for AggJSONAgg, the hidden boolean column that says
	// whether x is an array or a composite, which json_agg sets apart
	// with a newline.
	Structured Column
	// Moments are, for the stddev and variance aggregates, the hidden
	// columns of the shards' partial moments of x.
	Moments Moments
	// Regression is, for AggCorr through AggRegrSYY, the hidden columns
	// of the shards' states of float8_regr_accum.
	Regression Regression
}

// Cond is a HAVING condition: Column Op Value.
type Cond struct {
	Column Column
	Op     string // =, <>, <, <=, >, >=
	Value  Expr
}

// Expr is a constant or a parameter in a Merge: a LIMIT, an OFFSET or the
// right-hand side of a HAVING condition.
type Expr struct {
	// Param is the 1-based parameter number ($n), or 0 for a constant.
	Param int
	// Const is the constant's text form; ignored when Param is set.
	Const string
	// Null is true for a NULL constant.
	Null bool
}

// Value returns the expression's value for the given Bind parameters:
// its bytes (nil for NULL) and their format (0 text, 1 binary).
func (e *Expr) Value(params [][]byte, formats []int16) ([]byte, int16) {
	if e.Param == 0 {
		if e.Null {
			return nil, 0
		}
		return []byte(e.Const), 0
	}
	i := e.Param - 1
	if i >= len(params) {
		return nil, 0
	}
	return params[i], paramFormat(formats, i)
}

// Int returns the expression as a LIMIT or OFFSET count; ok is false for
// NULL, which means no limit. It fails as PostgreSQL would for a value that
// is not a bigint.
func (e *Expr) Int(params [][]byte, formats []int16) (n int64, ok bool, err error) {
	v, format := e.Value(params, formats)
	if v == nil {
		return 0, false, nil
	}
	var k sharding.Key
	if format == 1 {
		k, err = sharding.DecodeBinaryKey(sharding.Bigint, v)
	} else {
		k, err = sharding.ParseKey(sharding.Bigint, string(v))
	}
	if err != nil {
		return 0, false, keyError(err)
	}
	return k.Int(), true, nil
}

// Copy describes COPY … FROM STDIN.
type Copy struct {
	// Format is text, csv or binary.
	Format string
	// Delimiter, Null, Quote and Escape are the options as given, or ""
	// for the format's default.
	Delimiter, Null, Quote, Escape string
	// Header is true when the first line is a header (text and csv).
	Header bool
	// Column is the position of the sharding key in each row when rows are
	// split between shards (Kind All), or -1 when every row goes to every
	// target shard.
	Column int
	// Table is the table's name as PostgreSQL's COPY errors name it (not
	// schema-qualified); KeyName is the sharding key column's name and
	// Fields the number of columns each row has, when rows are split:
	// the proxy's own errors about a row (its key field missing) are the
	// server's.
	Table   string
	KeyName string
	Fields  int

	key *keyFunc
}

// Shard returns the shard of a row whose sharding key field is value (nil
// for NULL), as text for the text and csv formats (after unescaping) or as
// the binary field. It is valid only when Column >= 0.
func (c *Copy) Shard(value []byte) (int, error) {
	var format int16
	if c.Format == "binary" {
		format = 1
	}
	k, err := decodeKey(c.key.typ, value, format)
	if err != nil {
		return 0, keyError(err)
	}
	s, err := c.key.fn.Shard(k)
	if err != nil {
		return 0, noShardError(c.key, k, err)
	}
	return s, nil
}

// Hints are the session's routing overrides, from SET shardgate.shard, SET
// shardgate.sharding_key and search_path. A comment hint in the statement
// (/* shard: N */, /* sharding_key: V */) takes precedence over them.
type Hints struct {
	Shard       *int     // route every statement to this shard
	ShardingKey *string  // route every statement to this key's shard
	SearchPath  []string // the session's search_path, first schema first
	// Cursor reports whether the proxy holds the cursor of that name
	// itself (a cursor over several shards): a FETCH, MOVE or CLOSE of it
	// in a text of several statements makes each statement run on its
	// own, so that the proxy answers it.
	Cursor func(name string) bool
}

// paramFormat returns the format of parameter i as Bind gives it: no
// formats means text, one format applies to all.
func paramFormat(formats []int16, i int) int16 {
	switch len(formats) {
	case 0:
		return 0
	case 1:
		return formats[0]
	}
	if i < len(formats) {
		return formats[i]
	}
	return 0
}

// int32At reads a big-endian int32 at b[i:], reporting false when b is too
// short.
func int32At(b []byte, i int) (int32, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(b[i:])), true
}
