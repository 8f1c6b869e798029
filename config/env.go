package config

import (
	"fmt"
	"strings"
)

// expandEnv replaces ${NAME} and ${NAME:-default} in s with environment
// variables looked up with lookup. ${NAME} fails when NAME is unset;
// ${NAME:-default} uses default when NAME is unset or empty, as the shell
// does. "$${" stands for a literal "${". Expanded values are not expanded
// again, and a default ends at the first "}".
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		rest := s[i+2:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", &envError{kind: envUnterminated}
		}
		name, def, hasDef := strings.Cut(rest[:end], ":-")
		if !validEnvName(name) {
			return "", &envError{kind: envBadName, name: name}
		}
		val, ok := lookup(name)
		switch {
		case hasDef && val == "":
			val = def
		case !ok:
			return "", &envError{kind: envUnset, name: name}
		}
		b.WriteString(val)
		s = rest[end+1:]
	}
}

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

type envErrorKind int

const (
	envUnset        envErrorKind = iota // ${NAME} with NAME unset
	envUnterminated                     // "${" without "}"
	envBadName                          // ${...} that is not a variable name
)

// envError is a failed ${…} expansion.
type envError struct {
	kind envErrorKind
	name string
}

func (e *envError) Error() string { return e.message(false) }

// message describes e; for a secret value it leaves out what stood between
// the braces, which may be part of a password rather than a variable name.
func (e *envError) message(secret bool) string {
	switch e.kind {
	case envUnset:
		return fmt.Sprintf("environment variable %s is not set (write ${%s:-value} to give a default)", e.name, e.name)
	case envUnterminated:
		return `"${" without a closing "}" (write "$${" for a literal "${")`
	default:
		if secret {
			return `"${…}" does not hold a variable name (letters, digits and "_"; write "$${" for a literal "${")`
		}
		return fmt.Sprintf(`"${%s}" does not hold a variable name (letters, digits and "_"; write "$${" for a literal "${")`, e.name)
	}
}
