package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var files embed.FS

// Migration is one numbered schema change.
type Migration struct {
	// Version is the file number, 1 for 0001_init.
	Version int
	// Name is the part of the file name after the number ("init").
	Name string
	// UpSQL and DownSQL are the contents of the .up.sql and .down.sql files.
	UpSQL, DownSQL string
}

// String is "0001_init".
func (m Migration) String() string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

var all = mustLoad(files)

var fileRe = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// Load reads the numbered up/down pairs of fsys (NNNN_name.up.sql and
// NNNN_name.down.sql) in version order; the embedded set is [All].
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileRe.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: file %q is not NNNN_name.up.sql or NNNN_name.down.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		if v == 0 {
			return nil, fmt.Errorf("migrations: file %q: versions start at 0001", e.Name())
		}
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: read %q: %w", e.Name(), err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		} else if mig.Name != m[2] {
			return nil, fmt.Errorf("migrations: version %04d has two names, %q and %q", v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.UpSQL = string(b)
		} else {
			mig.DownSQL = string(b)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.UpSQL == "" || m.DownSQL == "" {
			return nil, fmt.Errorf("migrations: %s lacks its up or down file", m)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: version %04d is missing", i+1)
		}
	}
	return out, nil
}

func mustLoad(fsys fs.FS) []Migration {
	m, err := Load(fsys)
	if err != nil {
		panic(err)
	}
	return m
}

// All returns the embedded migrations in version order.
func All() []Migration { return append([]Migration(nil), all...) }

// Latest is the highest embedded version.
func Latest() int { return all[len(all)-1].Version }

// Up creates the database named in databaseURL if it does not exist, then
// applies every pending migration. It returns the migrations it applied,
// none when the schema was up to date.
func Up(ctx context.Context, databaseURL string) ([]Migration, error) {
	if _, err := EnsureDatabase(ctx, databaseURL); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return up(ctx, conn)
}

// Down rolls back the newest applied migration and returns it, or nil when
// none is applied. It does not create the database.
func Down(ctx context.Context, databaseURL string) (*Migration, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return down(ctx, conn)
}

// UpPool applies every pending migration on one connection of pool, in the
// connection's current schema.
func UpPool(ctx context.Context, pool *pgxpool.Pool) ([]Migration, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: acquire connection: %w", err)
	}
	defer c.Release()
	return up(ctx, c.Conn())
}

// DownPool rolls back the newest applied migration on one connection of pool.
func DownPool(ctx context.Context, pool *pgxpool.Pool) (*Migration, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: acquire connection: %w", err)
	}
	defer c.Release()
	return down(ctx, c.Conn())
}

// Version returns the newest applied version, 0 when none is.
func Version(ctx context.Context, databaseURL string) (int, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("migrations: read version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	return currentVersion(ctx, conn)
}

// EnsureDatabase creates the database named in databaseURL when it does not
// exist, connecting to the "postgres" database of the same server to do so.
// A concurrent creation by another process is not an error. It reports
// whether this call created the database.
func EnsureDatabase(ctx context.Context, databaseURL string) (bool, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return false, fmt.Errorf("migrations: parse database URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err == nil {
		return false, conn.Close(ctx)
	}
	if pgCode(err) != "3D000" { // invalid_catalog_name: the database does not exist
		return false, fmt.Errorf("migrations: connect: %w", err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	aconn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return false, fmt.Errorf("migrations: connect to the postgres database to create %q: %w", cfg.Database, err)
	}
	defer aconn.Close(context.WithoutCancel(ctx))
	_, err = aconn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	switch pgCode(err) {
	case "":
		return true, nil
	case "42P04", "23505": // duplicate_database; unique_violation when racing another CREATE
		return false, nil
	}
	return false, fmt.Errorf("migrations: create database %q: %w", cfg.Database, err)
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	if err != nil {
		return "?"
	}
	return ""
}

// lock takes the session-level advisory lock that serialises migrators of
// the current schema and returns its release.
func lock(ctx context.Context, conn *pgx.Conn) (func(), error) {
	const key = `hashtextextended('llmq.migrations:' || current_schema(), 0)`
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+key+`)`); err != nil {
		return nil, fmt.Errorf("migrations: take advisory lock: %w", err)
	}
	return func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+key+`)`)
	}, nil
}

const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

func currentVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var v int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("migrations: read version: %w", err)
	}
	return v, nil
}

func up(ctx context.Context, conn *pgx.Conn) ([]Migration, error) {
	unlock, err := lock(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := conn.Exec(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	cur, err := currentVersion(ctx, conn)
	if err != nil {
		return nil, err
	}
	var applied []Migration
	for _, m := range all {
		if m.Version <= cur {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.UpSQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migrations: apply %s: %w", m, err)
		}
		applied = append(applied, m)
	}
	return applied, nil
}

func down(ctx context.Context, conn *pgx.Conn) (*Migration, error) {
	unlock, err := lock(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := conn.Exec(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	cur, err := currentVersion(ctx, conn)
	if err != nil {
		return nil, err
	}
	if cur == 0 {
		return nil, nil
	}
	if cur > len(all) {
		return nil, fmt.Errorf("migrations: roll back version %04d: %w", cur, ErrUnknownVersion)
	}
	m := all[cur-1]
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, m.DownSQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, m.Version)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: roll back %s: %w", m, err)
	}
	return &m, nil
}
