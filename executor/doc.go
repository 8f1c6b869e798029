// Package executor combines the answers of several shards into the one
// answer a single PostgreSQL server would have given.
//
// # Merge
//
// A Merger reads the DataRows of one statement from each shard (Rows) and
// writes one result. Its Spec comes from the router:
//
//   - no ORDER BY and no aggregates: rows stream through shard after shard,
//     with OFFSET and LIMIT applied by the proxy (memory: one row);
//   - ORDER BY: a streaming k-way merge over the shards' sorted results
//     (memory: one row per shard); shards got LIMIT limit+offset;
//   - aggregates, GROUP BY, DISTINCT: partial results combine per group
//     (count and sum add, min/max compare, bool_and/bool_or, avg from hidden
//     sum and count columns with numeric_div's result scale), then sort and
//     limit (memory: one entry per group).
//
// Values are ordered like PostgreSQL orders them — integers, floats (NaN
// above Infinity), numeric (exact decimals, binary and text), C-collation
// text, uuid, bool, date/time types in DateStyle ISO — in text and binary
// formats. A type the merge cannot order exactly is refused with 0A000,
// never ordered approximately. Hidden columns the router appended (ORDER BY
// or avg helpers not in the select list) are stripped from RowDescription
// and every DataRow.
package executor
