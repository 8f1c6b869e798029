package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// serverUser is the user PostgreSQL runs as when this process is root:
// Debian's postgresql package creates "postgres"; otherwise pgtest creates
// fallbackUser.
const (
	serverUser   = "postgres"
	fallbackUser = "shardgate-pg"
)

// templateSettings are appended to the template's postgresql.conf. They trade
// durability for speed and enable what the proxy's tests need: two-phase
// commit, physical and logical replication. Options.Settings override them.
//
// fsync is off, which only loses data when the machine crashes. Commits stay
// synchronous: with fsync off that costs one write(2) per commit, and it keeps
// every acknowledged commit (and PREPARE TRANSACTION) through Kill, which
// fault tests rely on; synchronous_commit = off loses the last few hundred
// milliseconds of commits there.
var templateSettings = []string{
	"listen_addresses = '127.0.0.1'",
	"fsync = off",
	"full_page_writes = off",
	"max_connections = 200",
	"shared_buffers = 32MB",
	"max_prepared_transactions = 20",
	"max_wal_senders = 10",
	"max_replication_slots = 10",
	"wal_level = logical",
	"logging_collector = off",
	"timezone = 'UTC'",
	"log_timezone = 'UTC'",
}

// env is what all clusters of this process share: the binaries, the user the
// servers run as, the run directory and the template data directory that
// initdb fills once.
type env struct {
	binDir   string
	cred     *syscall.Credential // nil unless this process is root
	runDir   string              // .../shardgate-pgtest-<uid>/run-<pid>-*
	template string              // data directory made by initdb
}

// getEnv prepares the env once per process. Its error is kept: missing
// binaries or a failing initdb do not fix themselves between tests.
var getEnv = sync.OnceValues(newEnv)

func newEnv() (*env, error) {
	binDir, err := Binaries()
	if err != nil {
		return nil, err
	}
	e := &env{binDir: binDir}
	if os.Geteuid() == 0 {
		if e.cred, err = lookupServerUser(); err != nil {
			return nil, err
		}
	}
	// One root per user: a root made by root is not writable by others.
	root := filepath.Join(rootParent(), fmt.Sprintf("shardgate-pgtest-%d", os.Geteuid()))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	// The server user must reach the directories below, whatever the
	// umask was.
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	reapStale(root)
	if e.runDir, err = os.MkdirTemp(root, fmt.Sprintf("run-%d-", os.Getpid())); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := os.Chmod(e.runDir, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := e.initdb(); err != nil {
		return nil, err
	}
	return e, nil
}

// rootParent picks the directory for pgtest's root: $PGTEST_ROOT if set, else
// /dev/shm when it is a tmpfs with room for many clusters, else os.TempDir().
// Each cluster starts from a copy of the template's thousand files, and
// creating them on a disk file system can take a second (on the development
// VM, ext4 spends 0.3ms of CPU per file created) where tmpfs takes 50ms.
func rootParent() string {
	if dir := os.Getenv("PGTEST_ROOT"); dir != "" {
		return dir
	}
	const (
		tmpfsMagic = 0x01021994
		minFree    = 2 << 30
	)
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err == nil && st.Type == tmpfsMagic &&
		uint64(st.Bavail)*uint64(st.Bsize) >= minFree {
		return "/dev/shm"
	}
	return os.TempDir()
}

// lookupServerUser returns the credentials of the user to run PostgreSQL as,
// creating fallbackUser when serverUser does not exist.
func lookupServerUser() (*syscall.Credential, error) {
	u, err := user.Lookup(serverUser)
	if err != nil {
		out, addErr := exec.Command("useradd", "--system", "--no-create-home", fallbackUser).CombinedOutput()
		// Another process may have created the user first: look it up
		// whatever useradd said.
		if u, err = user.Lookup(fallbackUser); err != nil {
			return nil, fmt.Errorf("pgtest: running as root and there is no %q user; useradd %s: %v: %s",
				serverUser, fallbackUser, addErr, strings.TrimSpace(string(out)))
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// initdb creates the template data directory.
func (e *env) initdb() error {
	dir := filepath.Join(e.runDir, "template")
	if err := e.mkdir(dir); err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	cmd := e.command(dir, "initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--locale=C",
		"--auth=trust", "--no-sync", "--no-instructions",
		// 1MB WAL segments instead of 16MB make each copy of the template
		// a third of the size.
		"--wal-segsize=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	conf := "\n# Added by pgtest.\n" + strings.Join(templateSettings, "\n") + "\n"
	if err := appendFile(filepath.Join(data, "postgresql.conf"), conf); err != nil {
		return fmt.Errorf("pgtest: initdb: %w", err)
	}
	e.template = data
	return nil
}

// command prepares a PostgreSQL program to run as the server user in dir.
// PG* variables are dropped so that the caller's environment cannot redirect
// pg_basebackup to another server.
func (e *env) command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(e.binDir, name), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	if e.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
	}
	return cmd
}

// mkdir creates dir, owned by the server user.
func (e *env) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return e.chown(dir)
}

func (e *env) chown(path string) error {
	if e.cred == nil {
		return nil
	}
	if err := os.Lchown(path, int(e.cred.Uid), int(e.cred.Gid)); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// newClusterDir creates a directory for one cluster's data directory, log file
// and Unix socket. The socket goes to a short directory under /tmp when the
// cluster directory would make its path longer than Unix sockets allow.
func (e *env) newClusterDir() (dir, sockDir string, err error) {
	dir, err = os.MkdirTemp(e.runDir, "c-")
	if err != nil {
		return "", "", fmt.Errorf("pgtest: %w", err)
	}
	if err := e.chown(dir); err != nil {
		return "", "", err
	}
	const socketPathMax = 100 // sun_path is 108 bytes on Linux, 104 on BSDs
	if len(dir)+len("/.s.PGSQL.65535") <= socketPathMax {
		return dir, dir, nil
	}
	if sockDir, err = os.MkdirTemp("/tmp", "pgt-"); err != nil {
		return "", "", errors.Join(fmt.Errorf("pgtest: %w", err), os.RemoveAll(dir))
	}
	if err := e.chown(sockDir); err != nil {
		return "", "", errors.Join(err, os.RemoveAll(dir), os.RemoveAll(sockDir))
	}
	return dir, sockDir, nil
}

// copyTree copies the template data directory src to dst, keeping modes and
// giving the copies to the server user.
func (e *env) copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, fi.Mode().Perm()); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := copyFile(path, target, fi.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected file type %v", path, fi.Mode().Type())
		}
		return e.chown(target)
	})
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	// ReadFrom uses copy_file_range on Linux.
	if _, err := out.ReadFrom(in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
