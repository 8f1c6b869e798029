package cluster

import (
	"errors"
	"testing"

	"github.com/shardgate/shardgate/config"
)

const twoDatabases = `listen: 127.0.0.1:0
users:
  - { name: app, password: pw, server_user: pg, server_password: secret }
databases:
  - name: app
    shards: [{ host: old, port: 5432, database: app_0 }]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
  - name: app_new
    shards: [{ host: new, port: 5432, database: app_new_0 }, { host: new, port: 5432, database: app_new_1 }]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
`

func parse(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(text), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestFingerprintIgnoresPasswordsAndLines(t *testing.T) {
	cfg := parse(t, twoDatabases)
	a := cfg.Database("app")
	b := cfg.Clone().Database("app")
	b.Shards[0].Password = "other"
	b.ShardedTables[0].Line = 99
	if Fingerprint(a) != Fingerprint(b) {
		t.Fatal("a password or a file position changed the fingerprint")
	}
	b.Shards[0].Port = 5433
	if Fingerprint(a) == Fingerprint(b) {
		t.Fatal("another port gave the same fingerprint")
	}
}

// history is generation 1 of app: it took app_new's shards.
func history(cfg *config.Config) map[string][]Generation {
	return map[string][]Generation{"app": {{Database: "app", Generation: 1, TakenFrom: "app_new",
		Fingerprint: Fingerprint(cfg.Database("app_new")), Previous: Fingerprint(cfg.Database("app")), SwitchedBy: "a"}}}
}

func TestOverlay(t *testing.T) {
	old := parse(t, twoDatabases)
	gens := history(old)
	noted := 0
	note := func(string, int64, string, ...any) { noted++ }

	// An older file: app is brought forward to app_new's shards.
	next, applied, err := overlay(old, gens, note)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || len(next.Database("app").Shards) != 2 || next.Database("app").Shards[1].Database != "app_new_1" {
		t.Fatalf("older file not brought forward: applied %v, shards %+v", applied, next.Database("app").Shards)
	}
	if len(old.Database("app").Shards) != 1 {
		t.Fatal("overlay changed its input")
	}
	// The current file: nothing changes.
	same, applied, err := overlay(next, gens, note)
	if err != nil || same != next || len(applied) != 0 {
		t.Fatalf("current file changed: %v %v", applied, err)
	}
	// An operator's edit (another host): the file wins, with a note.
	edited := next.Clone()
	edited.Database("app").Shards[0].Host = "renamed"
	noted = 0
	got, _, err := overlay(edited, gens, note)
	if err != nil || got != edited || noted != 1 {
		t.Fatalf("an edit was not kept: err %v, noted %d", err, noted)
	}
	// An older file whose app_new describes other shards cannot be
	// brought forward.
	stale := old.Clone()
	stale.Database("app_new").Shards[1].Port = 6000
	var se *StaleFileError
	if _, _, err := overlay(stale, gens, note); !errors.As(err, &se) {
		t.Fatalf("got %v, want a StaleFileError", err)
	}
	// A database the file does not have is left alone.
	if _, _, err := overlay(old, map[string][]Generation{"gone": gens["app"]}, note); err != nil {
		t.Fatal(err)
	}
}

func TestControlStringDefault(t *testing.T) {
	cfg := parse(t, twoDatabases+"cluster: {}\n")
	s, err := ControlString(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://pg:secret@old:5432/app_0?sslmode=prefer"; s != want {
		t.Fatalf("default control %q, want %q", s, want)
	}
	if cfg.Cluster.AckTimeout.Seconds() != 2 {
		t.Fatalf("ack_timeout default %s", cfg.Cluster.AckTimeout)
	}
}
