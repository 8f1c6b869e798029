package router

import (
	"encoding/binary"
	"slices"
	"strconv"
	"testing"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/router/sharding"
	"github.com/shardgate/shardgate/wire"
)

const nShards = 3

// testDB is a 3-shard database with every kind of sharding rule.
func testDB() *config.Database {
	def := 2
	s := func(v string) *string { return &v }
	return &config.Database{
		Name:   "app",
		Shards: make([]config.Shard, nShards),
		ShardedTables: []config.ShardedTable{
			{Table: "accounts", Column: "id", Type: "bigint", Function: "hash"},
			{Table: "orders", Column: "account_id", Type: "bigint", Function: "hash"},
			{Table: "users", Column: "email", Type: "text", Function: "hash"},
			{Table: "devices", Column: "id", Type: "uuid", Function: "hash"},
			{Table: "regions", Column: "code", Type: "text", Function: "list", Mapping: []config.ShardMapping{
				{Values: []string{"us", "ca"}, Shard: 0}, {Values: []string{"eu"}, Shard: 1}}},
			{Table: "events", Column: "day", Type: "integer", Function: "range", DefaultShard: &def, Mapping: []config.ShardMapping{
				{To: s("100"), Shard: 0}, {From: s("100"), To: s("200"), Shard: 1}}},
			{Table: "audit.log", Column: "account_id", Type: "bigint", Function: "hash"},
			{Column: "tenant_id", Type: "bigint"},
		},
		ShardedSchemas: []config.ShardedSchema{{Schema: "tenant_a", Shard: 1}, {Schema: "tenant_b", Shard: 2}},
		OmniTables:     []string{"countries", "public.settings"},
	}
}

// testCatalog knows the columns of a few tables, as a shard's catalog would.
func testCatalog(schema, table string) []string {
	switch table {
	case "accounts":
		return []string{"id", "name", "country", "balance"}
	case "invoices":
		return []string{"id", "tenant_id", "total"}
	case "notes":
		return []string{"id", "body"}
	}
	return nil
}

func newTestRouter(t testing.TB, catalog ColumnOrder) *Router {
	t.Helper()
	r, err := New(testDB(), catalog)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Expected shards, computed as PostgreSQL's hash partitioning does.
func intShard(v int64) int {
	return sharding.Partition(sharding.Combine(0, sharding.HashInt64(v)), nShards)
}
func textShard(s string) int {
	return sharding.Partition(sharding.Combine(0, sharding.HashText(s)), nShards)
}
func uuidShard(s string) int {
	u, err := sharding.ParseUUID(s)
	if err != nil {
		panic(err)
	}
	return sharding.Partition(sharding.Combine(0, sharding.HashUUID(u)), nShards)
}

// shards returns the sorted, deduplicated shards.
func shards(s ...int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// params converts test values to Bind parameters: integers and strings in
// text format, []byte as is, nil as NULL.
func params(vs ...any) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		switch v := v.(type) {
		case nil:
		case int:
			out[i] = []byte(strconv.Itoa(v))
		case int64:
			out[i] = []byte(strconv.FormatInt(v, 10))
		case string:
			out[i] = []byte(v)
		case []byte:
			out[i] = v
		default:
			panic("params: unsupported value")
		}
	}
	return out
}

func int8Binary(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func int4Binary(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func intp(v int) *int           { return &v }
func strp(v string) *string     { return &v }
func errCode(err error) string {
	if e, ok := wire.AsError(err); ok {
		return e.Code
	}
	return "not a wire.Error: " + err.Error()
}
