package replication

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
)

const cutoverYAML = `listen: 127.0.0.1:6432
# operators' comments survive a cutover
users:
  - { name: app, password: "${SHARDGATE_TEST_APP_PASSWORD}" }
databases:
  - name: app
    pool: { size: 7 }
    shards: [{ host: h0, database: app_0 }]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
  - name: app_new
    shards: [{ host: h1, database: n0 }, { host: h2, database: n1 }]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
    omni_tables: [countries]
`

func TestReshardCutoverConfig(t *testing.T) {
	t.Setenv("SHARDGATE_TEST_APP_PASSWORD", "s3cret")
	dir := t.TempDir()
	path := filepath.Join(dir, "shardgate.yaml")
	if err := os.WriteFile(path, []byte(cutoverYAML), 0o640); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	next, err := CutoverConfig(cfg, "app", "app_new")
	if err != nil {
		t.Fatal(err)
	}
	app := next.Database("app")
	if len(app.Shards) != 2 || app.Shards[1].Host != "h2" || app.Pool.Size != 7 || len(app.OmniTables) != 1 {
		t.Errorf("app after cutover: %+v", app)
	}
	if len(cfg.Database("app").Shards) != 1 {
		t.Errorf("CutoverConfig changed its input")
	}
	app.Shards[0].Host = "changed"
	if next.Database("app_new").Shards[0].Host != "h1" {
		t.Errorf("app and app_new share shards")
	}
	app.Shards[0].Host = "h1"
	if _, err := CutoverConfig(cfg, "app", "nope"); err == nil {
		t.Errorf("CutoverConfig to a missing database succeeded")
	}

	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	parsed, backup, err := WriteCutoverFile(path, "app", "app_new", next, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(backup, path+".bak-20261129T200000") {
		t.Errorf("backup %s", backup)
	}
	old, err := os.ReadFile(backup)
	if err != nil || string(old) != cutoverYAML {
		t.Errorf("backup content %q, %v", old, err)
	}
	reloaded, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	written, _ := os.ReadFile(path)
	if strings.Contains(string(written), "s3cret") || !strings.Contains(string(written), "${SHARDGATE_TEST_APP_PASSWORD}") ||
		!strings.Contains(string(written), "# operators' comments survive a cutover") {
		t.Errorf("the rewritten file lost an ${ENV} reference or a comment, or exposes a secret:\n%s", written)
	}
	if got := reloaded.Database("app"); len(got.Shards) != 2 || got.Shards[0].Database != "n0" {
		t.Errorf("reloaded app: %+v", got)
	}
	if parsed.Path != path || len(parsed.Database("app").Shards) != 2 {
		t.Errorf("parsed: %+v", parsed.Database("app"))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode: %v %v", fi.Mode(), err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

func TestReshardEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{KindReshard.String(), "reshard"}, {KindSchemaSync.String(), "schema_sync"}, {KindCopyData.String(), "copy_data"},
		{TaskRunning.String(), "running"}, {TaskDone.String(), "done"}, {TaskFailed.String(), "failed"}, {TaskStopped.String(), "stopped"},
		{PhaseStream.String(), "stream"}, {PhaseCutover.String(), "cutover"}, {Phase(99).String(), "phase(99)"},
		{CopyRunning.String(), "copying"}, {CopyDone.String(), "done"}, {CopyFailed.String(), "failed"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestReshardManagerSet(t *testing.T) {
	m := NewManager(nil, nil)
	for _, c := range []struct {
		name, value string
		known, ok   bool
	}{
		{"reshard_max_lag_bytes", "4096", true, true},
		{"reshard_max_lag_bytes", "-1", true, false},
		{"reshard_max_lag_time", "250ms", true, true},
		{"reshard_cutover_timeout", "3s", true, true},
		{"reshard_cutover_timeout", "soon", true, false},
		{"pool_size", "5", false, true},
	} {
		known, err := m.Set(c.name, c.value)
		if known != c.known || (err == nil) != c.ok {
			t.Errorf("Set(%s, %s) = %v, %v", c.name, c.value, known, err)
		}
	}
	if b, lt, ct, _ := m.limits(); b != 4096 || lt != 250*time.Millisecond || ct != 3*time.Second {
		t.Errorf("limits: %d %v %v", b, lt, ct)
	}
}
