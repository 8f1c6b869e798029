package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestShardedCopyOutMerged: COPY (query) TO STDOUT of a query whose rows
// are merged across shards (ORDER BY, LIMIT, aggregates, set operations)
// writes, through the proxy, the same bytes, tag and errors as one
// PostgreSQL holding the same rows: text and CSV, headers, delimiters,
// quotes and escapes, FORCE_QUOTE, NULL strings, values that need escaping
// or quoting, and PostgreSQL's own errors about the options and the query
// (from a probe of the statement on one shard, positions included).
func TestShardedCopyOutMerged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, p, plain := twoShardsBesidePlain(t, ctx)
	fill := `INSERT INTO accounts VALUES (1, 'plain'), (2, E'tab\there'), (3, E'new\nline'), (4, E'back\\slash'),
		(5, 'comma, and "quote"'), (6, NULL), (7, E'\\.'), (8, ''), (9, 'é ü'), (10, 'NUL'), (11, E'cr\rx'), (12, 'semi;colon')`
	if err := cl.Exec(ctx, "plain", fill); err != nil {
		t.Fatal(err)
	}
	proxy, err := pgconn.Connect(ctx, p.AppURL("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close(ctx)
	if _, err := proxy.Exec(ctx, fill).ReadAll(); err != nil {
		t.Fatal(err)
	}
	direct, err := pgconn.Connect(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	stmts := []string{
		"COPY (SELECT id, email FROM accounts ORDER BY id) TO STDOUT",
		"COPY (SELECT id, email FROM accounts ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER)",
		`COPY (SELECT id, email AS "E-mail" FROM accounts ORDER BY id DESC) TO STDOUT (FORMAT csv, HEADER true, DELIMITER ';', QUOTE '''', ESCAPE '\', FORCE_QUOTE ("E-mail"), NULL 'NUL')`,
		"COPY (SELECT email FROM accounts ORDER BY id) TO STDOUT CSV",
		"COPY (SELECT email FROM accounts ORDER BY id) TO STDOUT (DELIMITER '|', NULL 'none', HEADER)",
		"COPY (SELECT count(*), max(email), min(id) FROM accounts) TO STDOUT",
		"COPY (SELECT id % 3 AS k, count(*), string_agg(email, ',' ORDER BY id) FROM accounts GROUP BY 1 ORDER BY 1) TO STDOUT (FORMAT text, HEADER true, DELIMITER '|')",
		"COPY (SELECT id FROM accounts WHERE id < 5 UNION SELECT id FROM accounts WHERE id > 7 ORDER BY 1 DESC) TO STDOUT",
		"COPY (SELECT * FROM accounts ORDER BY id LIMIT 3 OFFSET 2) TO STDOUT CSV FORCE QUOTE *",
		"/* c */ copy ( select id, length(email) from accounts order by 2 nulls first, 1 ) to stdout csv header",
		"COPY (SELECT id FROM accounts WHERE false ORDER BY id) TO STDOUT (FORMAT csv, HEADER)",
		"COPY (SELECT nosuch FROM accounts ORDER BY id) TO STDOUT",
		"COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT (FORMAT csv, DELIMITER 'ab')",
		"COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT (FORMAT xml)",
		"COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT (FORMAT csv, FORCE_QUOTE (nosuch))",
		"COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT (FORMAT csv, FORCE_NOT_NULL (id))",
		"COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT (DELIMITER ',', DELIMITER ';')",
		"COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT (QUOTE '\"')",
		"COPY (SELECT 1 / (id - 3) AS q FROM accounts ORDER BY q) TO STDOUT",
	}
	run := func(conn *pgconn.PgConn, sql string) string {
		var out bytes.Buffer
		tag, err := conn.CopyTo(ctx, &out, sql)
		if err != nil {
			pe := pgErr(err)
			if pe == nil {
				t.Fatalf("%s: %v", sql, err)
			}
			return fmt.Sprintf("data %q error %s %s %q position %d", out.String(), pe.Severity, pe.Code, pe.Message, pe.Position)
		}
		return fmt.Sprintf("data %q tag %s", out.String(), tag)
	}
	for _, sql := range stmts {
		want, got := run(direct, sql), run(proxy, sql)
		if got != want {
			t.Errorf("%s\n got  %s\n want %s", sql, got, want)
		}
	}
	// The binary format is refused: the shards' simple Queries answer text.
	var out bytes.Buffer
	_, err = proxy.CopyTo(ctx, &out, "COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT (FORMAT binary)")
	if pe := pgErr(err); pe == nil || pe.Code != "0A000" {
		t.Errorf("binary COPY of a merged query: %v, want 0A000", err)
	}
	// The connection is usable afterwards, in and out of a transaction.
	for _, sql := range []string{"BEGIN", "COPY (SELECT id FROM accounts ORDER BY id DESC LIMIT 2) TO STDOUT", "COMMIT"} {
		want, got := run(direct, sql), run(proxy, sql)
		if sql == "BEGIN" || sql == "COMMIT" {
			if _, err := proxy.Exec(ctx, sql).ReadAll(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got != want {
			t.Errorf("%s\n got  %s\n want %s", sql, got, want)
		}
	}
}
