package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// TestTenancyImportOnce: the first import writes the configuration's
// tenants, projects and keys (hashes only) with audit rows; a second
// import, even with another configuration, or after every tenant was
// deleted, writes nothing: the database wins.
func TestTenancyImportOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := store.New(storetest.NewPool(t)).Tenancy()
	hash := sha256.Sum256([]byte("secret"))
	cfg := llmq.Tenants{"acme": {Scope: llmq.Scope{Weight: 3, TPM: 4000}, Projects: map[string]llmq.Scope{"bulk": {RPM: 5}}}}
	done, err := tc.Import(ctx, cfg, []store.ImportKey{{Name: "k1", Tenant: "globex", Hash: hash[:]}})
	require.NoError(t, err)
	require.True(t, done)
	rows, err := tc.Load(ctx)
	require.NoError(t, err)
	require.True(t, rows.Imported)
	require.Equal(t, llmq.Tenants{
		"acme":   {Scope: llmq.Scope{Weight: 3, TPM: 4000}, Projects: map[string]llmq.Scope{"bulk": {RPM: 5}}},
		"globex": {}, // the key's tenant
	}, rows.AsTenants())
	require.Len(t, rows.Keys, 1)
	require.Equal(t, hash[:], rows.Keys[0].Hash)
	audit, err := tc.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, audit, 4) // two tenants, a project, a key
	for _, e := range audit {
		require.NotContains(t, string(e.New), "secret")
		require.Equal(t, "import", e.Actor)
	}

	require.NoError(t, tc.DeleteTenant(ctx, "ops", "acme", 0))
	require.NoError(t, tc.DeleteTenant(ctx, "ops", "globex", 0))
	done, err = tc.Import(ctx, llmq.Tenants{"other": {}}, nil)
	require.NoError(t, err)
	require.False(t, done)
	rows, err = tc.Load(ctx)
	require.NoError(t, err)
	require.Empty(t, rows.Tenants)
	require.Empty(t, rows.Keys, "a tenant's keys go with it")
}

// TestTenancyVersions: an update or delete names the version it read; a
// stale one changes nothing (ErrVersionMismatch), and every change is in
// the audit log with its old and new values.
func TestTenancyVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := store.New(storetest.NewPool(t)).Tenancy()
	row, err := tc.CreateTenant(ctx, "operator a", store.TenantRow{Name: "acme", Scope: llmq.Scope{TPM: 1000}})
	require.NoError(t, err)
	require.EqualValues(t, 1, row.Version)
	_, err = tc.CreateTenant(ctx, "operator a", store.TenantRow{Name: "acme"})
	require.ErrorIs(t, err, store.ErrTenancyExists)

	row, err = tc.UpdateTenant(ctx, "operator a", store.TenantRow{Name: "acme", Scope: llmq.Scope{TPM: 2000}}, 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, row.Version)
	_, err = tc.UpdateTenant(ctx, "operator b", store.TenantRow{Name: "acme", Scope: llmq.Scope{TPM: 9}}, 1)
	require.ErrorIs(t, err, store.ErrVersionMismatch)
	require.ErrorIs(t, tc.DeleteTenant(ctx, "operator b", "acme", 1), store.ErrVersionMismatch)
	row, err = tc.Tenant(ctx, "acme")
	require.NoError(t, err)
	require.InDelta(t, 2000, row.Scope.TPM, 0, "the stale update changed nothing")

	_, err = tc.PutProject(ctx, "operator a", store.ProjectRow{Tenant: "acme", Name: "bulk", Scope: llmq.Scope{Paused: true}}, -1)
	require.NoError(t, err)
	_, err = tc.PutProject(ctx, "operator a", store.ProjectRow{Tenant: "acme", Name: "bulk"}, -1)
	require.ErrorIs(t, err, store.ErrTenancyExists)
	_, err = tc.PutProject(ctx, "operator a", store.ProjectRow{Tenant: "nobody", Name: "bulk"}, -1)
	require.ErrorIs(t, err, store.ErrTenancyNotFound)

	hash := sha256.Sum256([]byte("k"))
	k, err := tc.CreateKey(ctx, "operator a", store.APIKeyRow{Name: "ci", Tenant: "acme", Hash: hash[:]})
	require.NoError(t, err)
	require.Nil(t, k.RevokedAt)
	k, err = tc.RevokeKey(ctx, "operator b", "ci", 0)
	require.NoError(t, err)
	require.NotNil(t, k.RevokedAt)
	other := sha256.Sum256([]byte("k2"))
	_, err = tc.CreateKey(ctx, "operator a", store.APIKeyRow{Name: "ci", Tenant: "acme", Hash: other[:]})
	require.ErrorIs(t, err, store.ErrTenancyExists, "a revoked key's name is not reused")

	audit, err := tc.Audit(ctx, 0, 100)
	require.NoError(t, err)
	var got []string
	for _, e := range audit {
		got = append(got, e.Actor+" "+e.Action+" "+e.Kind+" "+e.Name)
	}
	require.Equal(t, []string{
		"operator b revoke key ci", "operator a create key ci", "operator a create project acme/bulk",
		"operator a update tenant acme", "operator a create tenant acme",
	}, got)
	var old, upd llmq.Scope
	require.NoError(t, json.Unmarshal(audit[3].Old, &old))
	require.NoError(t, json.Unmarshal(audit[3].New, &upd))
	require.Equal(t, llmq.Scope{TPM: 1000}, old)
	require.Equal(t, llmq.Scope{TPM: 2000}, upd)
	page, err := tc.Audit(ctx, audit[1].ID, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{audit[2].ID, audit[3].ID}, []int64{page[0].ID, page[1].ID})
}

// TestTenancyApply: Apply lists what differs between the database and a
// file, changes nothing with dryRun, and then makes the database match.
func TestTenancyApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := store.New(storetest.NewPool(t)).Tenancy()
	_, err := tc.Import(ctx, llmq.Tenants{
		"acme":    {Scope: llmq.Scope{TPM: 1000}, Projects: map[string]llmq.Scope{"bulk": {RPM: 5}, "old": {}}},
		"initech": {},
	}, nil)
	require.NoError(t, err)
	want := llmq.Tenants{
		"acme":   {Scope: llmq.Scope{TPM: 2000}, Projects: map[string]llmq.Scope{"bulk": {RPM: 5}, "new": {Weight: 2}}},
		"globex": {Scope: llmq.Scope{Weight: 2}},
	}
	summary := func(cs []store.Change) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Action+" "+c.Kind+" "+c.Name)
		}
		return out
	}
	wantChanges := []string{"update tenant acme", "create project acme/new", "delete project acme/old",
		"create tenant globex", "delete tenant initech"}
	changes, err := tc.Apply(ctx, "operator a", store.ApplyFile{Tenants: want}, true)
	require.NoError(t, err)
	require.Equal(t, wantChanges, summary(changes))
	rows, err := tc.Load(ctx)
	require.NoError(t, err)
	require.Len(t, rows.Tenants, 2, "a dry run changes nothing")

	changes, err = tc.Apply(ctx, "operator a", store.ApplyFile{Tenants: want}, false)
	require.NoError(t, err)
	require.Equal(t, wantChanges, summary(changes))
	rows, err = tc.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, want, rows.AsTenants())
	changes, err = tc.Apply(ctx, "operator a", store.ApplyFile{Tenants: want}, false)
	require.NoError(t, err)
	require.Empty(t, changes, "applied twice: nothing left to change")
}

// TestTenancyAuditRetention: Prune deletes the audit entries past their
// period.
func TestTenancyAuditRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	_, err := s.Tenancy().CreateTenant(ctx, "ops", store.TenantRow{Name: "acme"})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenancy_audit SET at = now() - interval '40 days'`)
	require.NoError(t, err)
	_, err = s.Tenancy().CreateTenant(ctx, "ops", store.TenantRow{Name: "globex"})
	require.NoError(t, err)
	pruned, err := s.Prune(ctx, store.Retention{Audit: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned["audit"])
	left, err := s.Tenancy().Audit(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "globex", left[0].Name)
}
