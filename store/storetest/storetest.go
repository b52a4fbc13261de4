// Package storetest gives each test its own Postgres database, migrated to
// the current schema and dropped when the test ends.
//
// The first call in a process builds (once per schema version, shared by all
// processes through an advisory lock) a template database llmq_tpl_<hash>
// holding the migrated schema; every test database is then a cheap
// CREATE DATABASE ... TEMPLATE copy of it. The server is read from
// LLMQ_TEST_DATABASE_URL, default [DefaultURL].
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/llmq/llmq/migrations"
)

// EnvURL names the variable holding the URL of the test server's admin
// database.
const EnvURL = "LLMQ_TEST_DATABASE_URL"

// DefaultURL is used when EnvURL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// BaseURL is the admin database URL tests connect to.
func BaseURL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

var (
	tplOnce sync.Once
	tplName string
	tplErr  error
)

// NewDB creates a fresh database holding the migrated schema and returns its
// URL. The database is dropped (with FORCE) when t ends.
func NewDB(t testing.TB) string {
	t.Helper()
	tplOnce.Do(func() { tplName, tplErr = ensureTemplate() })
	if tplErr != nil {
		t.Fatalf("storetest: template database: %v", tplErr)
	}
	return newDB(t, tplName)
}

// NewEmptyDB creates a fresh database without any llmq table (for migration
// tests) and returns its URL; it is dropped when t ends.
func NewEmptyDB(t testing.TB) string {
	t.Helper()
	return newDB(t, "template0")
}

// MissingDB returns the URL of a database that does not exist yet (for
// tests of database creation) and a func that drops it; it is also dropped
// when t ends.
func MissingDB(t testing.TB) (url string, drop func()) {
	t.Helper()
	name := newName()
	u, err := URLFor(name)
	if err != nil {
		t.Fatal(err)
	}
	drop = func() { dropDB(t, name) }
	t.Cleanup(drop)
	return u, drop
}

// NewPool is NewDB plus a pgx pool on it, closed when t ends (before the
// database is dropped).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := NewDB(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatalf("storetest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// URLFor returns the base URL with its database replaced by name.
func URLFor(name string) (string, error) {
	u, err := url.Parse(BaseURL())
	if err != nil {
		return "", fmt.Errorf("storetest: parse %s: %w", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func newDB(t testing.TB, template string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := newName()
	conn, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		t.Fatalf("storetest: connect to %s: %v", BaseURL(), err)
	}
	defer conn.Close(context.Background())
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	// Another process may be connected to the template for an instant
	// (55006 object_in_use) while it builds it; retry briefly.
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, create)
		if err == nil || code(err) != "55006" || attempt == 50 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatalf("storetest: %s: %v", create, err)
	}
	t.Cleanup(func() { dropDB(t, name) })
	u, err := URLFor(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func dropDB(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		t.Errorf("storetest: connect to drop %s: %v", name, err)
		return
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("storetest: drop %s: %v", name, err)
	}
}

// ensureTemplate builds llmq_tpl_<hash of the migrations> once per server,
// under an advisory lock so that test processes running in parallel agree.
// Templates of other schema versions are left alone: another checkout may be
// copying from them.
func ensureTemplate() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := sha256.New()
	for _, m := range migrations.All() {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.UpSQL, m.DownSQL)
	}
	name := "llmq_tpl_" + hex.EncodeToString(h.Sum(nil))[:16]

	conn, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", BaseURL(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('llmq.storetest.template', 0))`); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtextextended('llmq.storetest.template', 0))`) //nolint:errcheck

	dropStale(ctx, conn)

	var isTemplate bool
	err = conn.QueryRow(ctx, `SELECT datistemplate FROM pg_database WHERE datname = $1`, name).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return name, nil
	case err == nil: // left half-built by a crashed process
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("drop half-built %s: %w", name, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("look up %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	u, err := URLFor(name)
	if err != nil {
		return "", err
	}
	if _, err := migrations.Up(ctx, u); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" IS_TEMPLATE true"); err != nil {
		return "", fmt.Errorf("mark %s as template: %w", name, err)
	}
	return name, nil
}

func code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Test databases are named llmq_test_<unix seconds>_<random>, so that one
// left behind by a killed test process can be recognised as stale.
const testPrefix = "llmq_test_"

// staleAfter is the age from which an unused test database is dropped.
const staleAfter = time.Hour

func newName() string {
	return fmt.Sprintf("%s%d_%s", testPrefix, time.Now().Unix(), randomHex(6))
}

// dropStale drops test databases older than staleAfter that nobody is
// connected to (left by test processes that were killed before cleanup).
func dropStale(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database d WHERE datname LIKE 'llmq\_test\_%'
		AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		ts, _, _ := strings.Cut(strings.TrimPrefix(n, testPrefix), "_")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || time.Since(time.Unix(sec, 0)) < staleAfter {
			continue
		}
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize())
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Updates returns the row updates of table since the database was made,
// and how many of them were heap-only (HOT: no index entry written).
// Each idle connection of pool first reports its statistics, which a
// backend otherwise sends up to 10 s late (pg_stat_force_next_flush,
// PostgreSQL 15): call it while no connection of pool is in use.
func Updates(t testing.TB, pool *pgxpool.Pool, table string) (upd, hot int64) {
	t.Helper()
	ctx := context.Background()
	for _, c := range pool.AcquireAllIdle(ctx) {
		_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
		if err != nil {
			t.Fatalf("storetest: flush statistics: %v", err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE relid = $1::regclass`, table).Scan(&upd, &hot); err != nil {
		t.Fatalf("storetest: read the updates of %s: %v", table, err)
	}
	return upd, hot
}

// BackendCPU returns the CPU time (user and system) that the Postgres
// backends connected to pool's database have used so far: Linux, with the
// server on this machine (/proc/PID/stat of each backend pg_stat_activity
// lists; one that ended meanwhile is not counted). Per job it tells
// Postgres's cost apart from the load of a shared machine, which makes
// rates noisy. Its resolution is a clock tick, 10 ms.
func BackendCPU(t testing.TB, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		t.Fatalf("storetest: list the backends: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatalf("storetest: list the backends: %v", err)
	}
	var cpu time.Duration
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // ended meanwhile
		}
		// Fields 14 and 15 (utime, stime, in clock ticks of 1/100 s)
		// follow the parenthesised command name.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		utime, _ := strconv.Atoi(f[11])
		stime, _ := strconv.Atoi(f[12])
		cpu += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return cpu
}
