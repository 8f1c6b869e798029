package pgtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Clusters are initialised with the C locale (env.initdb). A test that
// needs a database sorting text in another locale creates it with one:
//
//	CREATE DATABASE app TEMPLATE template0 LOCALE 'en_US.UTF-8'
//
// which needs the locale installed on the machine (the servers run here).

// RequireLocale skips the test when the machine lacks the C library
// locale name (e.g. "en_US.UTF-8"), except when $CI is "true": CI installs
// it (.ci/run), and a test must never skip there.
func RequireLocale(t testing.TB, name string) {
	t.Helper()
	if HasLocale(name) {
		return
	}
	msg := "locale " + name + " is not installed (Debian: apt-get install locales, uncomment it in /etc/locale.gen, run locale-gen)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// HasLocale reports whether `locale -a` lists name. Names match as glibc
// normalises them: the codeset in lower case without punctuation
// ("en_US.UTF-8" is "en_US.utf8").
func HasLocale(name string) bool {
	out, err := exec.Command("locale", "-a").Output()
	if err != nil {
		return false
	}
	want := normalizeLocale(name)
	for _, l := range strings.Fields(string(out)) {
		if normalizeLocale(l) == want {
			return true
		}
	}
	return false
}

func normalizeLocale(name string) string {
	lang, codeset, ok := strings.Cut(name, ".")
	if !ok {
		return name
	}
	codeset, modifier, _ := strings.Cut(codeset, "@")
	codeset = strings.Map(func(r rune) rune {
		switch {
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		}
		return -1
	}, codeset)
	if modifier != "" {
		codeset += "@" + modifier
	}
	return lang + "." + codeset
}
