package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testEnv is the environment the fixtures are loaded with.
var testEnv = map[string]string{
	"SG_TEST_HOST":     "127.0.0.1",
	"SG_TEST_PORT":     "7000",
	"SG_TEST_SIZE":     "7",
	"SG_TEST_EMPTY":    "",
	"SG_TEST_PASSWORD": "hunter2",
}

func lookupTestEnv(name string) (string, bool) {
	v, ok := testEnv[name]
	return v, ok
}

var errorAnnotation = regexp.MustCompile("ERROR `([^`]*)`")

// TestFileErrors loads each file in testdata/errors. A comment
// "# ERROR `text`" on a line says that the loader reports an error on that
// line whose "path: message" contains text; every error must be announced
// so, and every announcement must match one error.
func TestFileErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want := map[int][]string{}
			for i, line := range strings.Split(string(data), "\n") {
				for _, m := range errorAnnotation.FindAllStringSubmatch(line, -1) {
					want[i+1] = append(want[i+1], m[1])
				}
			}
			_, err = parse(data, file, lookupTestEnv)
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("Parse error = %v, want an ErrorList", err)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(list) {
				t.Errorf("Error() has %d lines for %d errors", n, len(list))
			}
			for i, e := range list {
				if i > 0 && e.Line < list[i-1].Line {
					t.Errorf("errors not in file order: %s after %s", e, list[i-1])
				}
				prefix := fmt.Sprintf("%s:%d:", file, e.Line)
				if !strings.HasPrefix(e.Error(), prefix) {
					t.Errorf("%s: does not start with %s", e, prefix)
				}
				text := e.Msg
				if e.Path != "" {
					text = e.Path + ": " + e.Msg
				}
				matched := false
				for k, w := range want[e.Line] {
					if strings.Contains(text, w) {
						want[e.Line] = append(want[e.Line][:k], want[e.Line][k+1:]...)
						matched = true
						break
					}
				}
				if !matched {
					t.Errorf("unexpected error: %s", e)
				}
			}
			for line, ws := range want {
				for _, w := range ws {
					t.Errorf("%s:%d: missing error %q", file, line, w)
				}
			}
		})
	}
}
