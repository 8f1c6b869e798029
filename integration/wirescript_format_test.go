package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// This file reads and writes wire scripts, the files under
// testdata/wirescript that TestWireScript runs (docs/wirescript.md is the
// user's guide). A script is a sequence of blocks, each a directive line
// and the lines under it, separated by blank lines; lines starting with #
// between blocks are comments:
//
//	send
//	Query {"String": "BEGIN"}
//	Parse {"Query": "SELECT v FROM kv WHERE k = $1"}
//	Bind {"Parameters": [{"text": "1"}]}
//	Execute
//	Sync
//
//	until ignore=NoticeResponse
//	ReadyForQuery
//	ReadyForQuery
//	----
//	{"Type":"CommandComplete","CommandTag":"BEGIN"}
//	…
//
// send writes its messages (pgproto3 type name, then the message as JSON
// if it has fields) in one write. until reads backend messages until it
// has seen the listed types in that order and compares every message it
// read, one JSON line each, with the lines under ----. known-difference
// marks the next until block (only send blocks may come between) as one
// where the proxy is known to answer otherwise; reconnect replaces the
// connection by a new one.

// wsCommand is a directive of a wire script.
type wsCommand int

const (
	// wsSend sends frontend messages.
	wsSend wsCommand = iota + 1
	// wsUntil reads backend messages and compares them with the expected.
	wsUntil
	// wsKnownDifference marks the next until block as a known difference
	// of the proxy.
	wsKnownDifference
	// wsReconnect closes the connection and opens a new one.
	wsReconnect
)

var wsCommands = map[string]wsCommand{
	"send":             wsSend,
	"until":            wsUntil,
	"known-difference": wsKnownDifference,
	"reconnect":        wsReconnect,
}

func (c wsCommand) String() string {
	for name, cmd := range wsCommands {
		if cmd == c {
			return name
		}
	}
	return "wsCommand(" + strconv.Itoa(int(c)) + ")"
}

// wsScript is a parsed wire script. Rendering it gives back the file byte
// for byte, with each until block's output as it is now.
type wsScript struct {
	path    string
	blocks  []*wsBlock
	trailer []string // comment and blank lines after the last block
}

// wsBlock is one directive with its lines.
type wsBlock struct {
	pre       []string // comment and blank lines before the directive, verbatim
	line      int      // line number of the directive
	directive string   // the directive line, verbatim
	cmd       wsCommand
	input     []string // lines under the directive (until: above ----)
	output    []string // until: the expected messages, one JSON line each

	msgs   []pgproto3.FrontendMessage // send: decoded input
	types  []string                   // until: message types to wait for
	ignore map[string]bool            // until: message types left out of output

	issue  string // known-difference: the issue that tracks it
	reason string // known-difference: what differs
	mode   string // known-difference: pool mode it applies to; "" for every mode
}

// pos is the block's file:line for messages.
func (b *wsBlock) pos(s *wsScript) string {
	return fmt.Sprintf("%s:%d", filepath.Base(s.path), b.line)
}

// appliesTo reports whether a known-difference marker covers a proxy run
// in pool mode mode.
func (b *wsBlock) appliesTo(mode string) bool { return b.mode == "" || b.mode == mode }

func readWireScript(path string) (*wsScript, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseWireScript(path, string(data))
}

// parseWireScript parses text; path names it in errors.
func parseWireScript(path, text string) (*wsScript, error) {
	if text != "" && !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("%s: the last line has no newline", path)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if text == "" {
		lines = nil
	}
	s := &wsScript{path: path}
	var pre []string
	for i := 0; i < len(lines); {
		if l := lines[i]; strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			i++
			continue
		}
		b := &wsBlock{pre: pre, line: i + 1, directive: lines[i]}
		pre = nil
		i++
		// A block's lines run to the next blank line; until blocks split
		// them at ----.
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			switch {
			case lines[i] == "----" && b.output == nil:
				b.output = []string{}
			case b.output != nil:
				b.output = append(b.output, lines[i])
			default:
				b.input = append(b.input, lines[i])
			}
		}
		if err := b.parse(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, b.line, err)
		}
		s.blocks = append(s.blocks, b)
	}
	s.trailer = pre
	// A marker covers the next until block; only send blocks may come
	// between them.
	for i, b := range s.blocks {
		if b.cmd != wsKnownDifference {
			continue
		}
		j := i + 1
		for j < len(s.blocks) && s.blocks[j].cmd == wsSend {
			j++
		}
		if j == len(s.blocks) || s.blocks[j].cmd != wsUntil {
			return nil, fmt.Errorf("%s:%d: known-difference must be followed by an until block, with only send blocks between", path, b.line)
		}
	}
	return s, nil
}

// parse interprets the block's directive and input.
func (b *wsBlock) parse() error {
	name, rest, _ := strings.Cut(b.directive, " ")
	cmd, ok := wsCommands[name]
	if !ok {
		return fmt.Errorf("unknown directive %q", name)
	}
	b.cmd = cmd
	args, err := wsArgs(rest)
	if err != nil {
		return err
	}
	allowed := map[wsCommand][]string{wsUntil: {"ignore"}, wsKnownDifference: {"issue", "reason", "mode"}}[cmd]
	for k := range args {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%s takes no argument %q", name, k)
		}
	}
	if cmd != wsUntil && b.output != nil {
		return fmt.Errorf("%s takes no ---- and no output", name)
	}
	if (cmd == wsKnownDifference || cmd == wsReconnect) && len(b.input) > 0 {
		return fmt.Errorf("%s is one line: separate the next block with a blank line", name)
	}
	switch cmd {
	case wsSend:
		if len(b.input) == 0 {
			return fmt.Errorf("send without messages")
		}
		for _, l := range b.input {
			m, err := wsFrontendMessage(l)
			if err != nil {
				return err
			}
			b.msgs = append(b.msgs, m)
		}
	case wsUntil:
		if len(b.input) == 0 || b.output == nil {
			return fmt.Errorf("until needs message types, then ----, then the expected messages (write them with -rewrite)")
		}
		for _, typ := range b.input {
			if !wsBackendTypes[typ] {
				return fmt.Errorf("until: unknown backend message type %q", typ)
			}
		}
		b.types = b.input
		b.ignore = map[string]bool{}
		if v, ok := args["ignore"]; ok {
			for _, typ := range strings.Split(v, ",") {
				if !wsBackendTypes[typ] {
					return fmt.Errorf("until: ignore: unknown backend message type %q", typ)
				}
				b.ignore[typ] = true
			}
		}
	case wsKnownDifference:
		b.issue, b.reason, b.mode = args["issue"], args["reason"], args["mode"]
		if _, err := strconv.Atoi(b.issue); err != nil {
			return fmt.Errorf("known-difference needs issue=<number>, got %q", b.issue)
		}
		if b.reason == "" {
			return fmt.Errorf(`known-difference needs reason="…" saying what the proxy does`)
		}
		if b.mode != "" && b.mode != "transaction" && b.mode != "session" {
			return fmt.Errorf("known-difference: mode must be transaction or session, got %q", b.mode)
		}
	}
	return nil
}

// wsArgs parses the arguments of a directive: key=value or key="Go string".
func wsArgs(s string) (map[string]string, error) {
	args := map[string]string{}
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.Contains(key, " ") {
			return nil, fmt.Errorf("argument %q is not key=value", strings.Fields(s)[0])
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("argument %s: bad quoted value: %w", key, err)
			}
			val, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			val, rest, _ = strings.Cut(rest, " ")
		}
		if _, dup := args[key]; dup {
			return nil, fmt.Errorf("argument %s given twice", key)
		}
		args[key] = val
		s = rest
	}
	return args, nil
}

// wsFrontendTypes are the frontend messages a script may send.
var wsFrontendTypes = map[string]func() pgproto3.FrontendMessage{
	"Bind":     func() pgproto3.FrontendMessage { return &pgproto3.Bind{} },
	"Close":    func() pgproto3.FrontendMessage { return &pgproto3.Close{} },
	"CopyData": func() pgproto3.FrontendMessage { return &pgproto3.CopyData{} },
	"CopyDone": func() pgproto3.FrontendMessage { return &pgproto3.CopyDone{} },
	"CopyFail": func() pgproto3.FrontendMessage { return &pgproto3.CopyFail{} },
	"Describe": func() pgproto3.FrontendMessage { return &pgproto3.Describe{} },
	"Execute":  func() pgproto3.FrontendMessage { return &pgproto3.Execute{} },
	"Flush":    func() pgproto3.FrontendMessage { return &pgproto3.Flush{} },
	"Parse":    func() pgproto3.FrontendMessage { return &pgproto3.Parse{} },
	"Query":    func() pgproto3.FrontendMessage { return &pgproto3.Query{} },
	"Sync":     func() pgproto3.FrontendMessage { return &pgproto3.Sync{} },
}

// wsFrontendMessage decodes "Type" or "Type {json}". Unknown JSON fields
// are errors, so that {"Query": …} on a Query (whose field is String)
// does not silently send an empty query.
func wsFrontendMessage(line string) (pgproto3.FrontendMessage, error) {
	typ, js, _ := strings.Cut(line, " ")
	newMsg, ok := wsFrontendTypes[typ]
	if !ok {
		return nil, fmt.Errorf("send: unknown frontend message type %q", typ)
	}
	m := newMsg()
	if strings.TrimSpace(js) == "" {
		if typ == "Describe" || typ == "Close" {
			return nil, fmt.Errorf("send: %s needs {\"ObjectType\": \"S\" or \"P\"}", typ)
		}
		return m, nil
	}
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("send: %s: %w", typ, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("send: %s: text after the JSON object", typ)
	}
	return m, nil
}

// wsBackendTypes are the message types until may wait for or ignore.
var wsBackendTypes = map[string]bool{
	"BindComplete": true, "CloseComplete": true, "CommandComplete": true,
	"CopyData": true, "CopyDone": true, "CopyInResponse": true, "CopyOutResponse": true,
	"DataRow": true, "EmptyQueryResponse": true, "ErrorResponse": true, "NoData": true,
	"NoticeResponse": true, "NotificationResponse": true, "ParameterDescription": true,
	"ParameterStatus": true, "ParseComplete": true, "PortalSuspended": true,
	"ReadyForQuery": true, "RowDescription": true,
}

// wsTypeName is the pgproto3 type name of m.
func wsTypeName(m pgproto3.BackendMessage) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3.")
}

// wsRender is the one line that stands for m in a script: pgproto3's JSON
// of it, except for ErrorResponse and NoticeResponse (see wsNotice).
func wsRender(m pgproto3.BackendMessage) string {
	var v any = m
	switch m := m.(type) {
	case *pgproto3.ErrorResponse:
		v = wsNoticeOf("ErrorResponse", m)
	case *pgproto3.NoticeResponse:
		v = wsNoticeOf("NoticeResponse", (*pgproto3.ErrorResponse)(m))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep <, > and & readable in messages
	if err := enc.Encode(v); err != nil {
		return fmt.Sprintf("unrenderable %s: %v", wsTypeName(m), err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// wsNotice is how an ErrorResponse or NoticeResponse is written: every
// field a client can act on, empty ones left out to keep lines short.
//
// Normalisation: File, Line and Routine are left out. They name the C
// source line of the PostgreSQL server that raised the error, which a
// proxy answering an error itself cannot reproduce and no client acts on.
type wsNotice struct {
	Type                string
	Severity            string          `json:",omitempty"`
	SeverityUnlocalized string          `json:",omitempty"`
	Code                string          `json:",omitempty"`
	Message             string          `json:",omitempty"`
	Detail              string          `json:",omitempty"`
	Hint                string          `json:",omitempty"`
	Position            int32           `json:",omitempty"`
	InternalPosition    int32           `json:",omitempty"`
	InternalQuery       string          `json:",omitempty"`
	Where               string          `json:",omitempty"`
	SchemaName          string          `json:",omitempty"`
	TableName           string          `json:",omitempty"`
	ColumnName          string          `json:",omitempty"`
	DataTypeName        string          `json:",omitempty"`
	ConstraintName      string          `json:",omitempty"`
	UnknownFields       map[byte]string `json:",omitempty"`
}

func wsNoticeOf(typ string, e *pgproto3.ErrorResponse) wsNotice {
	return wsNotice{
		Type: typ, Severity: e.Severity, SeverityUnlocalized: e.SeverityUnlocalized, Code: e.Code,
		Message: e.Message, Detail: e.Detail, Hint: e.Hint, Position: e.Position,
		InternalPosition: e.InternalPosition, InternalQuery: e.InternalQuery, Where: e.Where,
		SchemaName: e.SchemaName, TableName: e.TableName, ColumnName: e.ColumnName,
		DataTypeName: e.DataTypeName, ConstraintName: e.ConstraintName, UnknownFields: e.UnknownFields,
	}
}

// render gives the script's text with each until block's current output.
func (s *wsScript) render() string {
	var b strings.Builder
	line := func(l string) { b.WriteString(l); b.WriteByte('\n') }
	for _, bl := range s.blocks {
		for _, l := range bl.pre {
			line(l)
		}
		line(bl.directive)
		for _, l := range bl.input {
			line(l)
		}
		if bl.cmd == wsUntil {
			line("----")
			for _, l := range bl.output {
				line(l)
			}
		}
	}
	for _, l := range s.trailer {
		line(l)
	}
	return b.String()
}

// TestWireScriptFormat checks the parser on every script and on broken
// input; it needs no server.
func TestWireScriptFormat(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "wirescript", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no wire scripts in testdata/wirescript (%v)", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := parseWireScript(p, string(data))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.render(); got != string(data) {
			t.Errorf("%s: rendering the parsed script does not give the file back:\n%s", p, got)
		}
	}
	bad := []struct{ name, text, want string }{
		{"unknown directive", "sned\nSync\n", `unknown directive "sned"`},
		{"unknown message", "send\nQeury\n", `unknown frontend message type "Qeury"`},
		{"wrong field", "send\nQuery {\"Query\": \"SELECT 1\"}\n", `unknown field "Query"`},
		{"until without output", "until\nReadyForQuery\n", "until needs message types"},
		{"unknown backend type", "until\nReadyForQuerry\n----\n", `unknown backend message type "ReadyForQuerry"`},
		{"marker without issue", "known-difference reason=\"x\"\n\nuntil\nReadyForQuery\n----\n", "needs issue=<number>"},
		{"marker not before until", "known-difference issue=11 reason=\"x\"\n\nsend\nSync\n", "followed by an until block"},
		{"marker before reconnect", "known-difference issue=11 reason=\"x\"\n\nreconnect\n\nuntil\nReadyForQuery\n----\n", "followed by an until block"},
		{"marker with input", "known-difference issue=11 reason=\"x\"\nuntil\n", "is one line"},
		{"no final newline", "send\nSync", "no newline"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseWireScript("bad", tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
	args, err := wsArgs(`issue=11 reason="a \"quoted\" text" mode=transaction`)
	if err != nil || args["issue"] != "11" || args["reason"] != `a "quoted" text` || args["mode"] != "transaction" {
		t.Fatalf("wsArgs: %v, %v", args, err)
	}
}
