package main

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// table is errcodes.txt parsed: its classes in file order.
type table struct {
	version string // PostgreSQL's, from the header
	classes []class
}

// class is one "Section: Class XX - Title" of errcodes.txt and its codes.
type class struct {
	title string // "Class 01 - Warning"
	codes []code
}

// code is one SQLSTATE that has a condition name.
type code struct {
	sqlstate  string // "01004"
	condition string // "string_data_right_truncation"
	name      string // "WarningStringDataRightTruncation"
}

// classPrefixes qualifies the codes of the classes whose condition names
// repeat those of other classes (see the package comment).
var classPrefixes = map[string]string{
	"01": "Warning",
	"2F": "SQLRoutine",
	"38": "ExternalRoutine",
	"39": "ExternalRoutineInvocation",
}

// acronyms spells the words of condition names that are acronyms, or
// contain one, the way Go spells them.
var acronyms = map[string]string{
	"fdw":           "FDW",
	"io":            "IO",
	"json":          "JSON",
	"plpgsql":       "PLpgSQL",
	"sql":           "SQL",
	"sqlclient":     "SQLClient",
	"sqlconnection": "SQLConnection",
	"sqlserver":     "SQLServer",
	"sqlstate":      "SQLState",
	"srf":           "SRF",
	"xml":           "XML",
}

const versionKey = "# postgresql-version:"

// parseTable parses errcodes.txt and names its codes.
func parseTable(src []byte) (*table, error) {
	t := &table{}
	named := map[string]bool{} // SQLSTATEs that have a condition name
	type alias struct {
		line     int
		sqlstate string
	}
	var unnamed []alias           // the lines without a condition name
	byName := map[string]string{} // constant name → SQLSTATE
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, versionKey); ok {
			t.version = strings.TrimSpace(v)
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if title, ok := strings.CutPrefix(line, "Section:"); ok {
			t.classes = append(t.classes, class{title: strings.TrimSpace(title)})
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 || len(f) > 4 || len(f[0]) != 5 || len(t.classes) == 0 {
			return nil, fmt.Errorf("errcodes.txt:%d: cannot parse %q", n, line)
		}
		if len(f) == 3 {
			unnamed = append(unnamed, alias{n, f[0]})
			continue
		}
		c := code{sqlstate: f[0], condition: f[3], name: constName(f[0], f[3])}
		if prev, dup := byName[c.name]; dup {
			return nil, fmt.Errorf("errcodes.txt:%d: %s and %s both get the name %s", n, prev, c.sqlstate, c.name)
		}
		if named[c.sqlstate] {
			return nil, fmt.Errorf("errcodes.txt:%d: %s has two condition names", n, c.sqlstate)
		}
		byName[c.name] = c.sqlstate
		named[c.sqlstate] = true
		cl := &t.classes[len(t.classes)-1]
		cl.codes = append(cl.codes, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, a := range unnamed {
		if !named[a.sqlstate] {
			return nil, fmt.Errorf("errcodes.txt:%d: %s has no condition name", a.line, a.sqlstate)
		}
	}
	if t.version == "" {
		return nil, fmt.Errorf("errcodes.txt: no %q header line", versionKey)
	}
	return t, nil
}

// constName returns the Go name of the code sqlstate with the condition
// name condition.
func constName(sqlstate, condition string) string {
	var b strings.Builder
	for w := range strings.SplitSeq(condition, "_") {
		if a, ok := acronyms[w]; ok {
			b.WriteString(a)
		} else if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	name := b.String()
	if p, ok := classPrefixes[sqlstate[:2]]; ok && !strings.HasPrefix(name, p) {
		name = p + name
	}
	return name
}

// lookup returns the codes by SQLSTATE.
func (t *table) lookup() map[string]code {
	m := map[string]code{}
	for _, cl := range t.classes {
		for _, c := range cl.codes {
			m[c.sqlstate] = c
		}
	}
	return m
}
