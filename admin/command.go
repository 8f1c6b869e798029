package admin

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardgate/shardgate/wire"
)

// spec describes one admin command.
type spec struct {
	words   []string // leading keywords, upper case: {"SHOW", "POOLS"}
	usage   string   // for SHOW HELP and the hint of unknown commands
	help    string
	columns []column // result columns; nil for commands that return no rows
	tag     string   // CommandComplete tag
	minArgs int      // arguments after the keywords
	maxArgs int
	run     func(h *Handler, ctx context.Context, x *call) (*result, error)
}

// call is a parsed command, ready to run.
type call struct {
	spec *spec
	args []string // arguments after the keywords, unquoted
}

// specs is every admin command, in SHOW HELP order. It is filled in by
// init to break the reference cycle through (*Handler).showHelp, which
// reads specs.
var specs []*spec

func init() {
	specs = []*spec{
		{words: []string{"SHOW", "POOLS"}, usage: "SHOW POOLS", help: "pools: clients, servers, wait, pause state",
			columns: poolColumns, tag: "SHOW", run: (*Handler).showPools},
		{words: []string{"SHOW", "CLIENTS"}, usage: "SHOW CLIENTS", help: "connected clients",
			columns: clientColumns, tag: "SHOW", run: (*Handler).showClients},
		{words: []string{"SHOW", "SERVERS"}, usage: "SHOW SERVERS", help: "open server connections",
			columns: serverColumns, tag: "SHOW", run: (*Handler).showServers},
		{words: []string{"SHOW", "DATABASES"}, usage: "SHOW DATABASES", help: "logical databases, pool settings, pause and maintenance",
			columns: databaseColumns, tag: "SHOW", run: (*Handler).showDatabases},
		{words: []string{"SHOW", "SHARDS"}, usage: "SHOW SHARDS", help: "shard servers and their health",
			columns: shardColumns, tag: "SHOW", run: (*Handler).showShards},
		{words: []string{"SHOW", "STATS"}, usage: "SHOW STATS", help: "per-pool counters since start (times in microseconds)",
			columns: statsColumns, tag: "SHOW", run: (*Handler).showStats},
		{words: []string{"SHOW", "CONFIG"}, usage: "SHOW CONFIG", help: "effective configuration, passwords redacted",
			columns: configColumns, tag: "SHOW", run: (*Handler).showConfig},
		{words: []string{"SHOW", "VERSION"}, usage: "SHOW VERSION", help: "shardgate version",
			columns: versionColumns, tag: "SHOW", run: (*Handler).showVersion},
		{words: []string{"SHOW", "TRANSACTIONS"}, usage: "SHOW TRANSACTIONS", help: "multi-shard transactions left prepared at the two-phase resolver's last pass (age in microseconds)",
			columns: inDoubtColumns, tag: "SHOW", run: (*Handler).showTransactions},
		{words: []string{"SHOW", "LISTS"}, usage: "SHOW LISTS", help: "counts of databases, users, pools, clients, servers",
			columns: listColumns, tag: "SHOW", run: (*Handler).showLists},
		{words: []string{"SHOW", "HELP"}, usage: "SHOW HELP", help: "this list",
			columns: helpColumns, tag: "SHOW", run: (*Handler).showHelp},
		{words: []string{"RELOAD"}, usage: "RELOAD", help: "re-read the configuration file; a bad file changes nothing",
			tag: "RELOAD", run: (*Handler).reloadConfig},
		{words: []string{"PAUSE"}, usage: "PAUSE [db]", help: "wait for open transactions to end, then hold new ones until RESUME",
			tag: "PAUSE", maxArgs: 1, run: (*Handler).pause},
		{words: []string{"RESUME"}, usage: "RESUME [db]", help: "end PAUSE (without db: of every database)",
			tag: "RESUME", maxArgs: 1, run: (*Handler).resume},
		{words: []string{"MAINTENANCE"}, usage: "MAINTENANCE ON|OFF [db]", help: "hold new transactions without waiting for open ones; survives RELOAD",
			tag: "MAINTENANCE", minArgs: 1, maxArgs: 2, run: (*Handler).maintenance},
		{words: []string{"SET"}, usage: "SET pool_size|checkout_timeout|reshard_* = value", help: "change every pool until the next RELOAD, or a resharding threshold",
			tag: "SET", minArgs: 2, maxArgs: 3, run: (*Handler).set},
		{words: []string{"KILL"}, usage: "KILL client_id", help: "disconnect a client (id from SHOW CLIENTS)",
			tag: "KILL", minArgs: 1, maxArgs: 1, run: (*Handler).kill},
		{words: []string{"SHUTDOWN"}, usage: "SHUTDOWN", help: "stop accepting clients, finish transactions, exit",
			tag: "SHUTDOWN", run: (*Handler).shutdown},
	}
	specs = append(specs, reshardSpecs...) // reshard.go
	specs = append(specs, clusterSpecs...) // cluster.go
}

// usages lists every command, for the hint of unknown commands.
func usages() string {
	u := make([]string, len(specs))
	for i, s := range specs {
		u[i] = s.usage
	}
	return "commands: " + strings.Join(u, ", ")
}

// parse turns one admin statement into a call. Keywords are
// case-insensitive; a trailing semicolon is allowed. It returns nil, nil
// for an empty statement.
func parse(sql string) (*call, error) {
	toks, err := tokenize(sql)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, nil
	}
	for _, s := range specs {
		if len(toks) < len(s.words) || !matches(toks[:len(s.words)], s.words) {
			continue
		}
		args := make([]string, 0, len(toks)-len(s.words))
		for _, t := range toks[len(s.words):] {
			args = append(args, t.text)
		}
		if len(args) < s.minArgs || len(args) > s.maxArgs {
			return nil, &wire.Error{Severity: "ERROR", Code: wire.SyntaxError,
				Message: fmt.Sprintf("wrong number of arguments for %s", strings.Join(s.words, " ")),
				Hint:    "usage: " + s.usage}
		}
		return &call{spec: s, args: args}, nil
	}
	return nil, &wire.Error{Severity: "ERROR", Code: wire.SyntaxError,
		Message: fmt.Sprintf("unknown admin command %q", strings.TrimSpace(sql)),
		Hint:    usages()}
}

func matches(toks []token, words []string) bool {
	for i, w := range words {
		if toks[i].quoted || !strings.EqualFold(toks[i].text, w) {
			return false
		}
	}
	return true
}

// token is one word of an admin statement.
type token struct {
	text   string
	quoted bool // came from '…' or "…"
}

// tokenize splits an admin statement into words, quoted strings and "=".
// One trailing semicolon (and whitespace) is dropped; a semicolon
// elsewhere is an error, as the admin database runs one command at a time.
func tokenize(sql string) ([]token, error) {
	s := strings.TrimSpace(sql)
	s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '=':
			toks = append(toks, token{text: "="})
			i++
		case c == ';':
			return nil, &wire.Error{Severity: "ERROR", Code: wire.SyntaxError,
				Message: "the admin database runs one command at a time", Hint: "send each command on its own"}
		case c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, wire.Errorf(wire.SyntaxError, "unterminated quoted string at position %d", i+1)
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			toks = append(toks, token{text: b.String(), quoted: true})
			i = j + 1
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r=;'\"", rune(s[j])) {
				j++
			}
			toks = append(toks, token{text: s[i:j]})
			i = j
		}
	}
	return toks, nil
}
