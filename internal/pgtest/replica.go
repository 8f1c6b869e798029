package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
)

// StartReplica starts a streaming physical replica of c on its own free port:
// pg_basebackup -R copies c's data directory (its settings, pg_hba.conf and
// roles included) and configures it to follow c over TCP. It returns once the
// replica accepts connections and is in recovery. The caller stops it.
func (c *Cluster) StartReplica(ctx context.Context) (*Cluster, error) {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st != stateRunning {
		return nil, fmt.Errorf("pgtest: start replica of cluster on port %d: primary is %v", c.Port, st)
	}
	if _, err := os.Stat(filepath.Join(c.env.binDir, "pg_basebackup")); err != nil {
		return nil, fmt.Errorf("pgtest: start replica: %w", err)
	}
	r, err := newCluster(c.opts)
	if err != nil {
		return nil, err
	}
	cmd := r.env.command(r.dir, "pg_basebackup", "-D", r.DataDir,
		"-d", fmt.Sprintf("host=%s port=%d user=%s sslmode=disable", c.Host, c.Port, quoteConnValue(c.User)),
		"--wal-method=stream", "--write-recovery-conf", "--checkpoint=fast", "--no-sync", "--no-password")
	if c.Password != "" {
		// From the environment, the password stays out of ps; -R still
		// writes it into primary_conninfo.
		cmd.Env = append(cmd.Env, "PGPASSWORD="+c.Password)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, r.abandon(fmt.Errorf("pgtest: pg_basebackup of port %d: %w\n%s", c.Port, err, out))
	}
	if err := r.startNew(ctx, r.checkInRecovery); err != nil {
		return nil, r.abandon(err)
	}
	return r, nil
}

func (c *Cluster) checkInRecovery(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.localConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return err
	}
	if !inRecovery {
		return fmt.Errorf("replica is not in recovery")
	}
	return nil
}
