package migrations_test

import (
	"context"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/migrations"
	"github.com/llmq/llmq/store/storetest"
)

func tables(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// schemaDump lists every column, index and constraint of the public schema.
func schemaDump(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = 'public'
		UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'
		UNION ALL SELECT conrelid::regclass || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
			WHERE connamespace = 'public'::regnamespace
		ORDER BY 1`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewEmptyDB(t)
	all := migrations.All()
	require.NotEmpty(t, all)

	applied, err := migrations.Up(ctx, url)
	require.NoError(t, err)
	require.Len(t, applied, len(all))
	require.Subset(t, tables(t, url), []string{"batches", "dead_letters", "jobs", "schema_migrations"})
	first := schemaDump(t, url)
	v, err := migrations.Version(ctx, url)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), v)

	applied, err = migrations.Up(ctx, url)
	require.NoError(t, err)
	require.Empty(t, applied, "up to date: a second Up is a no-op")

	// Down one step at a time to nothing, then up again.
	for i := len(all); i >= 1; i-- {
		m, err := migrations.Down(ctx, url)
		require.NoError(t, err)
		require.NotNil(t, m)
		require.Equal(t, i, m.Version)
		v, err := migrations.Version(ctx, url)
		require.NoError(t, err)
		require.Equal(t, i-1, v)
	}
	require.Equal(t, []string{"schema_migrations"}, tables(t, url))
	m, err := migrations.Down(ctx, url)
	require.NoError(t, err)
	require.Nil(t, m, "nothing left to roll back")

	applied, err = migrations.Up(ctx, url)
	require.NoError(t, err)
	require.Len(t, applied, len(all))
	require.Equal(t, first, schemaDump(t, url), "down then up rebuilds the same schema")
}

// TestConcurrentUp runs two migrators at once against a database that does
// not exist yet: both succeed, the database is created once and each
// migration applied once.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for range 3 {
		url, drop := storetest.MissingDB(t)
		var wg sync.WaitGroup
		results := make([][]migrations.Migration, 4)
		errs := make([]error, 4)
		start := make(chan struct{})
		for i := range results {
			wg.Go(func() {
				<-start
				results[i], errs[i] = migrations.Up(ctx, url)
			})
		}
		close(start)
		wg.Wait()
		total := 0
		for i := range results {
			require.NoError(t, errs[i])
			total += len(results[i])
		}
		require.Equal(t, len(migrations.All()), total)
		v, err := migrations.Version(ctx, url)
		require.NoError(t, err)
		require.Equal(t, migrations.Latest(), v)
		drop()
	}
}

func TestEnsureDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, _ := storetest.MissingDB(t)
	created, err := migrations.EnsureDatabase(ctx, url)
	require.NoError(t, err)
	require.True(t, created)
	created, err = migrations.EnsureDatabase(ctx, url)
	require.NoError(t, err)
	require.False(t, created)
}

func TestPoolVariants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	applied, err := migrations.UpPool(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, applied, "storetest databases are already migrated")
	m, err := migrations.DownPool(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), m.Version)
	applied, err = migrations.UpPool(ctx, pool)
	require.NoError(t, err)
	require.Len(t, applied, 1)
}

func TestEmbeddedFilesArePaired(t *testing.T) {
	for i, m := range migrations.All() {
		require.Equal(t, i+1, m.Version)
		require.NotEmpty(t, m.UpSQL, m.String())
		require.NotEmpty(t, m.DownSQL, m.String())
	}
}

func TestLoadRejects(t *testing.T) {
	ok := &fstest.MapFile{Data: []byte("SELECT 1;")}
	cases := map[string]fstest.MapFS{
		"missing down": {"0001_a.up.sql": ok},
		"bad name":     {"0001_a.up.sql": ok, "0001_a.down.sql": ok, "x.sql": ok},
		"gap":          {"0001_a.up.sql": ok, "0001_a.down.sql": ok, "0003_c.up.sql": ok, "0003_c.down.sql": ok},
		"two names":    {"0001_a.up.sql": ok, "0001_b.down.sql": ok},
		"version 0":    {"0000_a.up.sql": ok, "0000_a.down.sql": ok},
	}
	for name, fsys := range cases {
		_, err := migrations.Load(fsys)
		require.Error(t, err, name)
	}
	ms, err := migrations.Load(fstest.MapFS{"0002_b.up.sql": ok, "0002_b.down.sql": ok, "0001_a.up.sql": ok, "0001_a.down.sql": ok})
	require.NoError(t, err)
	require.Equal(t, "0001_a", ms[0].String())
	require.Equal(t, "0002_b", ms[1].String())
}
