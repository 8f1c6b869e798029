package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// errNoBinaries is the root of every error Binaries returns; New skips a test
// on it outside CI.
var errNoBinaries = errors.New("pgtest: PostgreSQL server binaries (initdb, postgres) not found " +
	"in $PG_BINDIR, PATH or /usr/lib/postgresql/*/bin; install them with " +
	"`apt-get install -y postgresql` or point PG_BINDIR at their directory")

// Binaries finds the directory holding initdb and postgres: $PG_BINDIR if
// set, then the directory of initdb found in PATH (with symlinks resolved,
// so that /usr/local/bin links lead to the directory that also holds
// pg_basebackup), then the highest /usr/lib/postgresql/*/bin.
func Binaries() (string, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		if !hasServerBinaries(dir) {
			return "", fmt.Errorf("%w (PG_BINDIR=%s has no initdb or postgres)", errNoBinaries, dir)
		}
		return dir, nil
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		if dir := filepath.Dir(path); hasServerBinaries(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, dir := range slices.Backward(dirs) {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", errNoBinaries
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// compareVersions orders PostgreSQL major versions such as "9.6" and "15"
// numerically, component by component.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}
