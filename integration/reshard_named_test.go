package integration

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/replication"
	"github.com/shardgate/shardgate/wire"
)

// TestReshardNamedPublication runs COPY_DATA with a publication the user
// created for one table and a named slot: only that table is copied and
// streamed, through a slot of that name, SHOW TASKS and SHOW REPLICATION
// name it, a second COPY_DATA with other names is refused, and after the
// cutover the slot is gone while the user's publication stays.
func TestReshardNamedPublication(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, o, src := startCutoverEnv(t, ctx)
	reshardExec(t, ctx, src, `
CREATE TABLE other (id bigint PRIMARY KEY, v text);
INSERT INTO other SELECT i, 'x' FROM generate_series(1, 100) i;
CREATE PUBLICATION accounts_pub FOR TABLE accounts`)
	adm := connect(t, o.AdminURL())

	tb, err := adminPgx(adm, "COPY_DATA app app_new accounts_pub acc_slot")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	if pubs, slots := tb.get(t, map[string]string{"id": id}, "publications"), tb.get(t, map[string]string{"id": id}, "slots"); pubs != "accounts_pub" || slots != "acc_slot" {
		t.Errorf("COPY_DATA answered publications %q, slots %q; want accounts_pub, acc_slot", pubs, slots)
	}
	_, err = adminPgx(adm, "COPY_DATA app app_new accounts_pub other_slot")
	if sqlstate(err) != wire.InvalidParameterValue || !strings.Contains(err.Error(), "acc_slot") {
		t.Errorf("a second COPY_DATA with another slot: %v", err)
	}
	eventually(t, 30*time.Second, "task streaming", func() bool {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		return err == nil && tasks.get(t, map[string]string{"id": id}, "phase") == "stream"
	})
	var slots []string
	if err := src.QueryRow(ctx, "SELECT array_agg(slot_name::text) FROM pg_replication_slots").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if len(slots) != 1 || slots[0] != "acc_slot" {
		t.Errorf("slots on the source: %v, want [acc_slot]", slots)
	}
	repl, err := adminPgx(adm, "SHOW REPLICATION")
	if err != nil || len(repl.rows) != 1 || repl.get(t, map[string]string{"task": id}, "slot") != "acc_slot" {
		t.Errorf("SHOW REPLICATION: %v %v", repl, err)
	}

	dsts := []*pgx.Conn{reshardConnect(t, ctx, c.DSN("app_new_0")), reshardConnect(t, ctx, c.DSN("app_new_1"))}
	count := func(sql string) int {
		n := 0
		for _, conn := range dsts {
			var k int
			if err := conn.QueryRow(ctx, sql).Scan(&k); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			n += k
		}
		return n
	}
	if n := count("SELECT count(*) FROM accounts"); n != 2000 {
		t.Errorf("%d accounts copied, want 2000", n)
	}
	// Changes to tables outside the publication are not streamed (a change
	// to a table that was not copied would stop the stream).
	reshardExec(t, ctx, src, "INSERT INTO other VALUES (101, 'y'); INSERT INTO countries VALUES ('zz', 'new')")
	reshardExec(t, ctx, src, "INSERT INTO accounts VALUES (424242, 1, 'streamed'); UPDATE accounts SET balance = 9 WHERE id = 1")
	eventually(t, 30*time.Second, "the streamed changes", func() bool {
		return count("SELECT count(*) FROM accounts WHERE id = 424242 OR (id = 1 AND balance = 9)") == 2
	})
	if n := count("SELECT count(*) FROM other"); n != 0 {
		t.Errorf("table other, not in the publication: %d rows on the destination", n)
	}
	if n := count("SELECT count(*) FROM countries"); n != 0 {
		t.Errorf("table countries, not in the publication: %d rows on the destination", n)
	}

	if _, err := adminPgx(adm, "CUTOVER "+id); err != nil {
		t.Fatalf("CUTOVER: %v", err)
	}
	src = reconnected(t, ctx, src) // the cutover fenced the source
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("%d slots left on the source after the cutover", n)
	}
	var pubs []string
	if err := src.QueryRow(ctx, "SELECT array_agg(pubname::text ORDER BY pubname) FROM pg_publication").Scan(&pubs); err != nil {
		t.Fatal(err)
	}
	if len(pubs) != 1 || pubs[0] != "accounts_pub" {
		t.Errorf("publications on the source after the cutover: %v, want [accounts_pub]", pubs)
	}
}

// TestReshardExistingSlot creates the slot before COPY_DATA, writes after
// it and while the task copies, and checks that the destination ends up
// exactly like the source: the task reuses the slot (a temporary slot's
// snapshot for the copy, the existing slot moved to it), then STOP_TASK
// drops it.
func TestReshardExistingSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, o, src := startCutoverEnv(t, ctx)
	reshardExec(t, ctx, src, "SELECT pg_create_logical_replication_slot('pre_slot', 'pgoutput')")
	reshardExec(t, ctx, src, `
INSERT INTO accounts SELECT i, 1, 'after the slot' FROM generate_series(2001, 2500) i;
UPDATE accounts SET balance = balance + 2 WHERE id % 7 = 0;
DELETE FROM accounts WHERE id % 11 = 0`)

	// A writer keeps changing accounts while the task copies and streams.
	quit := make(chan struct{})
	var wg sync.WaitGroup
	w := reshardConnect(t, ctx, c.DSN("app_0"))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(0); ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			if _, err := w.Exec(ctx, "INSERT INTO accounts VALUES ($1, 3, 'writer')", 10_000+i); err != nil {
				return
			}
			if _, err := w.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", 1+i%2000); err != nil {
				return
			}
		}
	}()
	stopWriter := sync.OnceFunc(func() { close(quit); wg.Wait() })
	defer stopWriter()

	adm := connect(t, o.AdminURL())
	tb, err := adminPgx(adm, "COPY_DATA app app_new '' pre_slot")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	eventually(t, 30*time.Second, "task streaming", func() bool {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		return err == nil && tasks.get(t, map[string]string{"id": id}, "phase") == "stream"
	})
	stopWriter()

	const sum = "SELECT count(*), coalesce(sum(hashtext(id || ':' || balance || ':' || coalesce(note, ''))::bigint), 0) FROM accounts"
	var wantN, wantSum int64
	if err := src.QueryRow(ctx, sum).Scan(&wantN, &wantSum); err != nil {
		t.Fatal(err)
	}
	dsts := []*pgx.Conn{reshardConnect(t, ctx, c.DSN("app_new_0")), reshardConnect(t, ctx, c.DSN("app_new_1"))}
	var n, s int64
	eventually(t, 30*time.Second, "the destination matching the source", func() bool {
		n, s = 0, 0
		for _, conn := range dsts {
			var dn, ds int64
			if err := conn.QueryRow(ctx, sum).Scan(&dn, &ds); err != nil {
				t.Fatal(err)
			}
			n, s = n+dn, s+ds
		}
		return n == wantN && s == wantSum
	})
	t.Logf("%d accounts on both sides", n)
	if n := countSlots(t, ctx, src); n != 1 {
		t.Errorf("%d slots on the source while streaming, want 1 (pre_slot)", n)
	}
	if _, err := adminPgx(adm, "STOP_TASK "+id); err != nil {
		t.Fatalf("STOP_TASK: %v", err)
	}
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("%d slots left after STOP_TASK", n)
	}
	var pubs int
	if err := src.QueryRow(ctx, "SELECT count(*) FROM pg_publication").Scan(&pubs); err != nil || pubs != 0 {
		t.Errorf("%d publications left after STOP_TASK (%v)", pubs, err)
	}
}

// TestReshardNamesRefused: names that do not fit are refused by the
// command itself with 22023, before anything is created.
func TestReshardNamesRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	_, o, src := startCutoverEnv(t, ctx)
	reshardExec(t, ctx, src, `
CREATE PUBLICATION via_root FOR TABLE accounts WITH (publish_via_partition_root = true);
CREATE PUBLICATION inserts_only FOR TABLE accounts WITH (publish = 'insert')`)
	reshardExec(t, ctx, src, "SELECT pg_create_physical_replication_slot('phys')")
	adm := connect(t, o.AdminURL())
	for _, tc := range []struct{ cmd, want string }{
		{"COPY_DATA app app_new no_such_pub", "source shard 0 ("},
		{"COPY_DATA app app_new no_such_pub", `publication "no_such_pub" does not exist`},
		{"RESHARD app app_new via_root", "publish_via_partition_root = false"},
		{"COPY_DATA app app_new inserts_only", "does not publish every kind of change"},
		{"COPY_DATA app app_new '' Bad-Slot", "only lower-case letters"},
		{"COPY_DATA app app_new '' " + strings.Repeat("s", 64), "longer than 63 bytes"},
		{"COPY_DATA app app_new '' phys", `slot "phys" exists and is a physical slot`},
		{"SCHEMA_SYNC app app_new '' Bad-Slot", "only lower-case letters"},
	} {
		_, err := adminPgx(adm, tc.cmd)
		if sqlstate(err) != wire.InvalidParameterValue || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 22023 with %q", tc.cmd, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.cmd, err)
		}
	}
	tasks, err := adminPgx(adm, "SHOW TASKS")
	if err != nil || len(tasks.rows) != 0 {
		t.Errorf("SHOW TASKS after refused commands: %v %v", tasks, err)
	}
	if n := countSlots(t, ctx, src); n != 1 {
		t.Errorf("%d slots on the source, want 1 (phys)", n)
	}
}

// TestReshardNamedResume: the names are recorded with the task, so a new
// manager (a restarted proxy) resumes it with the same publication and
// slot, and Stop drops the slot but not the publication.
func TestReshardNamedResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, o, src := startCutoverEnv(t, ctx)
	reshardExec(t, ctx, src, "CREATE PUBLICATION accounts_pub FOR TABLE accounts")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	gate := o.Gate
	names := replication.Names{Publication: "accounts_pub", Slot: "acc_slot"}

	m1 := replication.NewManager(gate, log)
	t1, err := m1.StartNamed(replication.KindCopyData, "app", "app_new", names)
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, ctx, t1, "streaming", func(i replication.TaskInfo) bool { return i.Phase == replication.PhaseStream })
	m1.Close()
	reshardExec(t, ctx, src, "INSERT INTO accounts SELECT i, 7, 'while down' FROM generate_series(3001, 3100) i")

	m2 := replication.NewManager(gate, log)
	if _, err := m2.StartNamed(replication.KindCopyData, "app", "app_new", replication.Names{Slot: "acc_slot"}); err == nil ||
		!strings.Contains(err.Error(), "recorded as running") {
		t.Errorf("a start with other names than the recorded task: %v", err)
	}
	resumed, err := m2.Resume(ctx)
	if err != nil || len(resumed) != 1 {
		t.Fatalf("resume: %d tasks, %v", len(resumed), err)
	}
	t2 := resumed[0]
	if got := t2.Task.Names(); got != names {
		t.Errorf("resumed with %s, want %s", got, names)
	}
	waitTask(t, ctx, t2, "streaming", func(i replication.TaskInfo) bool { return i.Phase == replication.PhaseStream })
	dsts := []*pgx.Conn{reshardConnect(t, ctx, c.DSN("app_new_0")), reshardConnect(t, ctx, c.DSN("app_new_1"))}
	eventually(t, 30*time.Second, "the rows written while down", func() bool {
		n := 0
		for _, conn := range dsts {
			var k int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&k); err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n == 2100
	})
	var slot string
	if err := src.QueryRow(ctx, "SELECT string_agg(slot_name::text, ',') FROM pg_replication_slots").Scan(&slot); err != nil || slot != "acc_slot" {
		t.Errorf("slots on the source: %q (%v), want acc_slot", slot, err)
	}
	if _, err := m2.Stop(ctx, t2.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("%d slots left after Stop", n)
	}
	var pub bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'accounts_pub')").Scan(&pub); err != nil || !pub {
		t.Errorf("accounts_pub after Stop: exists %v (%v)", pub, err)
	}
}
