package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is one problem found in a configuration. Line and Column point at
// the YAML node that caused it, or at the nearest enclosing node when the
// problem is a missing key; they are 0 when unknown, as for a Config built in
// code and checked with Validate.
type Error struct {
	File   string // as given to Load or Parse; "" prints as "config"
	Line   int    // 1-based
	Column int    // 1-based
	// Path names the option, such as "databases[0].pool.size"; "" means the
	// file as a whole.
	Path string
	// Msg says what is wrong. It never contains a password: values of
	// password keys are not echoed.
	Msg string
}

// Error formats e the way compilers do, so editors can jump to it:
// "app.yaml:12:9: pool.size: expected an integer, got \"ten\"".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File == "" {
		b.WriteString("config")
	} else {
		b.WriteString(e.File)
	}
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one configuration, in file order.
// Load, Parse and Validate return one so that an operator fixes everything
// in one pass; errors.As finds the individual *Error values through Unwrap.
// Beyond 100 problems, a last entry without a position counts the rest.
type ErrorList []*Error

// Error puts one problem per line.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual errors.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// position is where the YAML node that set an option sits in the file.
type position struct {
	line, column int
	// null is true when the node was an explicit null ("key:" or "key: ~"),
	// which the loader treats like an absent key: the default applies.
	null bool
}

// positions maps option paths ("databases[0].pool.size") to the node that
// set them. The decoder fills it; defaults, override resolution and
// validation read it to tell "set in the file" from "defaulted" and to put a
// line on every error.
type positions map[string]position

// isSet reports whether the file gave path a non-null value.
func (p positions) isSet(path string) bool {
	pos, ok := p[path]
	return ok && !pos.null
}

// find returns the position of path or, when the file does not mention
// path, of its nearest ancestor: a missing key is reported where its
// enclosing mapping starts.
func (p positions) find(path string) position {
	for {
		if pos, ok := p[path]; ok && pos.line > 0 {
			return pos
		}
		if path == "" {
			return position{}
		}
		path = parentPath(path)
	}
}

// line returns the line of path (or its nearest ancestor), 0 when unknown.
func (p positions) line(path string) int { return p.find(path).line }

// parentPath strips the last ".key" or "[i]" from path.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// keyPath and indexPath build option paths.
func keyPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// reporter collects the errors of one load, so that the decoder and the
// validator report everything at once.
type reporter struct {
	file string
	pos  positions
	// failed holds paths whose value could not be decoded. Validation stays
	// quiet about them and everything below them: the decode error already
	// says what is wrong, and the value it would check is only a default.
	failed map[string]bool
	// failedBelow holds failed paths and all their ancestors.
	failedBelow map[string]bool
	// unknownKeys holds paths of mappings with an unknown key. A missing
	// key there is most likely the misspelled one, so only the unknown key
	// is reported.
	unknownKeys map[string]bool
	errs        ErrorList
	dropped     int // errors beyond maxErrors, counted but not kept
}

// maxErrors bounds the errors kept for one file: beyond it, a file (whose
// aliases may repeat one mistake a thousand times) gets a count instead.
const maxErrors = 100

func newReporter(file string) *reporter {
	return &reporter{
		file: file, pos: positions{},
		failed: map[string]bool{}, failedBelow: map[string]bool{}, unknownKeys: map[string]bool{},
	}
}

func (r *reporter) add(line, column int, path, format string, args ...any) {
	if r.full() {
		r.dropped++
		return
	}
	r.errs = append(r.errs, &Error{
		File: r.file, Line: line, Column: column, Path: path,
		Msg: fmt.Sprintf(format, args...),
	})
}

// full reports whether no more errors are kept; callers skip work that
// only makes a message better.
func (r *reporter) full() bool { return len(r.errs) >= maxErrors }

// atNode reports a problem with node n, which holds the value of path.
func (r *reporter) atNode(n *yaml.Node, path, format string, args ...any) {
	r.failed[path] = true
	for p := path; !r.failedBelow[p]; p = parentPath(p) {
		r.failedBelow[p] = true
		if p == "" {
			break
		}
	}
	r.add(n.Line, n.Column, path, format, args...)
}

// at reports a problem with the option path at the position the file gave
// it, unless decoding path or an ancestor already failed.
func (r *reporter) at(path, format string, args ...any) {
	for p := path; ; p = parentPath(p) {
		if r.failed[p] {
			return
		}
		if p == "" {
			break
		}
	}
	pos := r.pos.find(path)
	r.add(pos.line, pos.column, path, format, args...)
}

// missing reports that the option path is missing or empty, unless its
// mapping had an unknown key.
func (r *reporter) missing(path, format string, args ...any) {
	if !r.unknownKeys[parentPath(path)] {
		r.at(path, format, args...)
	}
}

// failedUnder reports whether decoding path or anything below it failed;
// checks that compare whole entries (duplicate shards) skip such entries.
func (r *reporter) failedUnder(path string) bool { return r.failedBelow[path] }

// seeLine returns " (line N)" for path, or "" when its line is unknown.
func (r *reporter) seeLine(path string) string {
	if l := r.pos.line(path); l > 0 {
		return fmt.Sprintf(" (line %d)", l)
	}
	return ""
}

// err returns the collected errors in file order, or nil.
func (r *reporter) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	sort.SliceStable(r.errs, func(i, j int) bool {
		a, b := r.errs[i], r.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	if r.dropped > 0 {
		r.errs = append(r.errs, &Error{File: r.file, Msg: fmt.Sprintf("%d more errors not shown", r.dropped)})
		r.dropped = 0
	}
	return r.errs
}
