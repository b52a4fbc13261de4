package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/migrations"
	"github.com/llmq/llmq/store/storetest"
)

// TestQueueOfRecordMigratesRows takes a database back to version 4, writes
// rows as that version wrote them, and migrates up: the jobs keep their
// tenant and get their claim-order key, the batch outbox and the dead
// letters' keys name the tenant (the outbox's requeue rows go: a job handed
// back is claimed from Postgres); then two tenants may share a job id.
func TestQueueOfRecordMigratesRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewDB(t)
	downTo(t, url, 5)
	m, err := migrations.Down(ctx, url)
	require.NoError(t, err)
	require.Equal(t, 5, m.Version, "this test migrates version 4 rows")

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, row := range []struct {
		id, tenant, priority string
		deadline             *time.Time
	}{
		{"j-high", "acme", "high", nil},
		{"j-low", "acme", "low", nil},
		{"j-due", "zeta", "normal", ptr(created.Add(30 * time.Second))},
	} {
		_, err := conn.Exec(ctx, `INSERT INTO jobs (id, tenant, priority, requested_model, body, created_at, deadline)
			VALUES ($1, $2, $3, 'm', $4, $5, $6)`, row.id, row.tenant, row.priority, body, created, row.deadline)
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO batch_outbox (job_id, action) VALUES ('j-low', 'dead_letter'), ('j-high', 'requeue')`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO dead_letters (letter_key, job_id, tenant, reason, message)
		VALUES ('job:j-high:0', 'j-high', 'acme', 'poison', '\x'), ('msg:abc:0', '', 'acme', 'poison', '\x')`)
	require.NoError(t, err)

	applied, err := migrations.Up(ctx, url)
	require.NoError(t, err)
	require.Len(t, applied, migrations.Latest()-4)

	keys := map[string]time.Time{}
	rows, err := conn.Query(ctx, `SELECT id, sched_key FROM jobs`)
	require.NoError(t, err)
	var id string
	var key time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &key}, func() error { keys[id] = key.UTC(); return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]time.Time{
		"j-high": created,
		"j-low":  created.Add(time.Minute),
		"j-due":  created.Add(-30 * time.Second), // deadline - 1 min: before the high job
	}, keys)

	rows, err = conn.Query(ctx, `SELECT tenant || '/' || job_id FROM batch_outbox`)
	require.NoError(t, err)
	outbox, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"acme/j-low"}, outbox, "keyed by tenant; a requeue needs no message any more")
	rows, err = conn.Query(ctx, `SELECT letter_key FROM dead_letters ORDER BY letter_key`)
	require.NoError(t, err)
	letters, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"job:acme/j-high:0", "msg:abc:0"}, letters)

	_, err = conn.Exec(ctx, `INSERT INTO jobs (id, tenant, requested_model, body, sched_key)
		VALUES ('j-high', 'other', 'm', $1, now())`, body)
	require.NoError(t, err, "ids are scoped by tenant")

	downTo(t, url, 5)
	_, err = migrations.Down(ctx, url)
	require.Error(t, err, "going back needs ids unique across tenants")
	_, err = conn.Exec(ctx, `DELETE FROM jobs WHERE tenant = 'other'`)
	require.NoError(t, err)
	_, err = migrations.Down(ctx, url)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `SELECT letter_key FROM dead_letters WHERE job_id = 'j-high'`).Scan(&id))
	require.Equal(t, "job:j-high:0", id, "the letter key is given back its version 4 form")
}

// downTo rolls back the versions after version.
func downTo(t *testing.T, url string, version int) {
	t.Helper()
	for {
		v, err := migrations.Version(context.Background(), url)
		require.NoError(t, err)
		if v <= version {
			return
		}
		_, err = migrations.Down(context.Background(), url)
		require.NoError(t, err)
	}
}

func ptr[T any](v T) *T { return &v }
