package pgtest

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Exec runs sql, which may hold several statements, in database as the
// superuser, over TCP with the simple query protocol.
func (c *Cluster) Exec(ctx context.Context, database, sql string) error {
	conn, err := pgx.Connect(ctx, c.DSN(database))
	if err != nil {
		return fmt.Errorf("pgtest: exec: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("pgtest: exec %q: %w", abbreviate(sql), err)
	}
	return nil
}

// CreateDatabase creates database name, owned by the superuser.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return nil
}

// CreateRole creates a role that can log in, with password unless it is
// empty. The password is hashed as password_encryption says: MD5 on clusters
// with md5 auth, SCRAM otherwise.
func (c *Cluster) CreateRole(ctx context.Context, name, password string, superuser bool) error {
	sql := "CREATE ROLE " + pgx.Identifier{name}.Sanitize() + " LOGIN"
	if superuser {
		sql += " SUPERUSER"
	}
	if password != "" {
		sql += " PASSWORD " + quoteLiteral(password)
	}
	// Exec would quote the statement, password included, in its error.
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: create role %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("pgtest: create role %s: %w", name, err)
	}
	return nil
}

func abbreviate(sql string) string {
	const n = 60
	if r := []rune(sql); len(r) > n {
		return string(r[:n]) + "…"
	}
	return sql
}
