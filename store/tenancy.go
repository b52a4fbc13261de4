package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/llmq/llmq"
)

// TenancyChannel is the Postgres notification channel on which every
// statement that changes the tenants, projects or keys kept as data
// announces it when it commits (migration 0027's triggers): every replica
// reloads its snapshot (internal/tenancy).
const TenancyChannel = "llmq_tenancy"

// Errors of the tenancy's changes.
var (
	// ErrTenancyNotFound: no tenant, project or key of that name.
	ErrTenancyNotFound = errors.New("store: no such tenant, project or key")
	// ErrTenancyExists: a create named a tenant, project or key that
	// exists (a key's name is never reused, even once revoked).
	ErrTenancyExists = errors.New("store: the name is taken")
	// ErrVersionMismatch: the row changed since the version the caller
	// read (the admin API's If-Match).
	ErrVersionMismatch = errors.New("store: the row changed since it was read")
)

// Tenancy reads and changes the tenants, projects and API keys kept as
// data (docs/design/tenants.md#tenants-as-data); every change writes its
// audit row in the same transaction. It is reached by Store.Tenancy.
type Tenancy struct {
	s *Store
	// anyModel: a model's fallbacks may name models the table does not
	// hold (allow_any_model; AnyModel).
	anyModel bool
}

// Tenancy returns the store's tenancy tables.
func (s *Store) Tenancy() *Tenancy { return &Tenancy{s: s} }

// TenantRow is a tenant as kept: its own scope (projects apart).
type TenantRow struct {
	Name                 string
	Scope                llmq.Scope
	AllowUnknownProjects bool
	Version              int64
	UpdatedAt            time.Time
}

// ProjectRow is a project of a tenant as kept.
type ProjectRow struct {
	Tenant, Name string
	Scope        llmq.Scope
	Version      int64
	UpdatedAt    time.Time
}

// APIKeyRow is an API key as kept: never the key, only its SHA-256.
type APIKeyRow struct {
	Name, Tenant string
	Hash         []byte
	CreatedAt    time.Time
	ExpiresAt    *time.Time
	LastUsedAt   *time.Time
	RevokedAt    *time.Time
	Version      int64
}

// TenancyRows is everything a replica serves from the tenancy tables.
type TenancyRows struct {
	Tenants  []TenantRow
	Projects []ProjectRow
	Keys     []APIKeyRow
	// Models are the models kept as data (tenancy_models.go).
	Models []ModelRow
	// ModelsImported reports that the configuration's models were
	// imported (or the table was written some other way): its rows are
	// the catalog.
	ModelsImported bool
	// Imported reports that the configuration was imported (or the
	// tables were written some other way): the database wins.
	Imported bool
}

// AsTenants turns rows into the llmq.Tenants every component reads.
func (r *TenancyRows) AsTenants() llmq.Tenants {
	ts := make(llmq.Tenants, len(r.Tenants))
	for _, t := range r.Tenants {
		ts[t.Name] = llmq.Tenant{Scope: t.Scope, AllowUnknownProjects: t.AllowUnknownProjects}
	}
	for _, p := range r.Projects {
		t := ts[p.Tenant]
		if t.Projects == nil {
			t.Projects = map[string]llmq.Scope{}
		}
		t.Projects[p.Name] = p.Scope
		ts[p.Tenant] = t
	}
	return ts
}

// AuditEntry is one change of the tenancy tables.
type AuditEntry struct {
	ID     int64
	At     time.Time
	Actor  string
	Action string // create, update, delete, revoke, import, apply
	Kind   string // tenant, project, key
	Name   string
	// Old and New are the row's JSON before and after (nil: none).
	Old, New json.RawMessage
}

// Load reads every tenant, project and key in one snapshot of the
// database.
func (t *Tenancy) Load(ctx context.Context) (*TenancyRows, error) {
	var out TenancyRows
	err := pgx.BeginTxFunc(ctx, t.s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT name, scope, allow_unknown_projects, version, updated_at FROM tenancy_tenants ORDER BY name`)
		if err != nil {
			return err
		}
		out.Tenants, err = pgx.CollectRows(rows, scanTenant)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT tenant, name, scope, version, updated_at FROM tenancy_projects ORDER BY tenant, name`)
		if err != nil {
			return err
		}
		out.Projects, err = pgx.CollectRows(rows, scanProject)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+keyCols+` FROM tenancy_keys ORDER BY name`)
		if err != nil {
			return err
		}
		out.Keys, err = pgx.CollectRows(rows, scanKey)
		if err != nil {
			return err
		}
		if out.Models, out.ModelsImported, err = loadModels(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM tenancy_imported)`).Scan(&out.Imported)
	})
	if err != nil {
		return nil, fmt.Errorf("store: load tenancy: %w", err)
	}
	return &out, nil
}

const keyCols = `name, tenant, hash, created_at, expires_at, last_used_at, revoked_at, version`

func scanTenant(r pgx.CollectableRow) (TenantRow, error) {
	var t TenantRow
	var scope []byte
	if err := r.Scan(&t.Name, &scope, &t.AllowUnknownProjects, &t.Version, &t.UpdatedAt); err != nil {
		return t, err
	}
	return t, json.Unmarshal(scope, &t.Scope)
}

func scanProject(r pgx.CollectableRow) (ProjectRow, error) {
	var p ProjectRow
	var scope []byte
	if err := r.Scan(&p.Tenant, &p.Name, &scope, &p.Version, &p.UpdatedAt); err != nil {
		return p, err
	}
	return p, json.Unmarshal(scope, &p.Scope)
}

func scanKey(r pgx.CollectableRow) (APIKeyRow, error) {
	var k APIKeyRow
	err := r.Scan(&k.Name, &k.Tenant, &k.Hash, &k.CreatedAt, &k.ExpiresAt, &k.LastUsedAt, &k.RevokedAt, &k.Version)
	return k, err
}

// Listen holds a connection of its own listening on TenancyChannel (as
// ListenJobsDone): listening once it listens, changed at every change.
func (t *Tenancy) Listen(ctx context.Context, listening, changed func()) error {
	return t.s.listen(ctx, TenancyChannel, listening, func(string) { changed() })
}

// ImportKey is a key of the configuration to import: its name and hash.
type ImportKey struct {
	Name, Tenant string
	Hash         []byte
}

// Import writes ts and keys into the tenancy tables when they were never
// written (the first start with tenancy as data), and reports whether it
// did; after it the database wins and the configuration changes it only
// through Apply. Concurrent starts import once.
func (t *Tenancy) Import(ctx context.Context, ts llmq.Tenants, keys []ImportKey) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		// One importer at a time; the loser finds the marker.
		if _, err := tx.Exec(ctx, `LOCK TABLE tenancy_imported IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var imported bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM tenancy_imported) OR EXISTS (SELECT FROM tenancy_tenants)`).Scan(&imported); err != nil {
			return err
		}
		now := t.s.clk.Now()
		if _, err := tx.Exec(ctx, `INSERT INTO tenancy_imported (imported_at) VALUES ($1) ON CONFLICT DO NOTHING`, now); err != nil {
			return err
		}
		if imported {
			return nil
		}
		// A key's tenant must be a row: a key of a tenant the
		// configuration does not list gets a row with the defaults.
		all := maps.Clone(ts)
		if all == nil {
			all = llmq.Tenants{}
		}
		for _, k := range keys {
			if _, ok := all[k.Tenant]; !ok {
				all[k.Tenant] = llmq.Tenant{}
			}
		}
		for _, name := range slices.Sorted(maps.Keys(all)) {
			if err := putTenantTx(ctx, tx, now, "import", "import", name, all[name], true); err != nil {
				return err
			}
		}
		for _, k := range keys {
			if _, err := tx.Exec(ctx, `INSERT INTO tenancy_keys (name, tenant, hash, created_at) VALUES ($1, $2, $3, $4)`,
				k.Name, k.Tenant, k.Hash, now); err != nil {
				return err
			}
			if err := audit(ctx, tx, now, "import", "import", "key", k.Name, nil, keyAudit(APIKeyRow{Name: k.Name, Tenant: k.Tenant, CreatedAt: now})); err != nil {
				return err
			}
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: import tenancy: %w", err)
	}
	return done, nil
}

// putTenantTx writes tenant name and its projects as t says (create or
// replace, projects t does not list deleted), with audit rows.
func putTenantTx(ctx context.Context, tx pgx.Tx, now time.Time, actor, action, name string, t llmq.Tenant, create bool) error {
	scope, err := json.Marshal(t.Scope)
	if err != nil {
		return err
	}
	newRow := tenantAudit(TenantRow{Name: name, Scope: t.Scope, AllowUnknownProjects: t.AllowUnknownProjects})
	if create {
		if _, err := tx.Exec(ctx, `INSERT INTO tenancy_tenants (name, scope, allow_unknown_projects, updated_at) VALUES ($1, $2, $3, $4)`,
			name, scope, t.AllowUnknownProjects, now); err != nil {
			return err
		}
		if err := audit(ctx, tx, now, actor, action, "tenant", name, nil, newRow); err != nil {
			return err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(t.Projects)) {
		ps, err := json.Marshal(t.Projects[p])
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO tenancy_projects (tenant, name, scope, updated_at) VALUES ($1, $2, $3, $4)`,
			name, p, ps, now); err != nil {
			return err
		}
		if err := audit(ctx, tx, now, actor, action, "project", name+"/"+p, nil, t.Projects[p]); err != nil {
			return err
		}
	}
	return nil
}

// audit writes one audit row.
func audit(ctx context.Context, tx pgx.Tx, now time.Time, actor, action, kind, name string, old, new any) error {
	j := func(v any) ([]byte, error) {
		if v == nil {
			return nil, nil
		}
		return json.Marshal(v)
	}
	o, err := j(old)
	if err != nil {
		return err
	}
	n, err := j(new)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO tenancy_audit (at, actor, action, kind, name, old, new) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		now, actor, action, kind, name, o, n)
	return err
}

// tenantAudit and keyAudit are the JSON of a row in the audit log: never
// a key's hash.
func tenantAudit(t TenantRow) any {
	return struct {
		llmq.Scope
		AllowUnknownProjects bool `json:"allow_unknown_projects,omitempty"`
	}{t.Scope, t.AllowUnknownProjects}
}

func keyAudit(k APIKeyRow) any {
	return struct {
		Tenant    string     `json:"tenant"`
		ExpiresAt *time.Time `json:"expires_at,omitempty"`
		RevokedAt *time.Time `json:"revoked_at,omitempty"`
	}{k.Tenant, k.ExpiresAt, k.RevokedAt}
}

// ifVersion checks a row's version against the one the caller read; 0
// skips the check (llmq apply, which makes the database match a file).
func ifVersion(have, want int64) error {
	if want != 0 && have != want {
		return ErrVersionMismatch
	}
	return nil
}

// uniqueViolation reports a duplicate key.
func uniqueViolation(err error) bool {
	e, ok := errors.AsType[*pgconn.PgError](err)
	return ok && e.Code == "23505"
}

// CreateTenant creates tenant row.Name with its scope (no projects).
func (t *Tenancy) CreateTenant(ctx context.Context, actor string, row TenantRow) (TenantRow, error) {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		return putTenantTx(ctx, tx, t.s.clk.Now(), actor, "create", row.Name, llmq.Tenant{Scope: row.Scope, AllowUnknownProjects: row.AllowUnknownProjects}, true)
	})
	if uniqueViolation(err) {
		return TenantRow{}, ErrTenancyExists
	}
	if err != nil {
		return TenantRow{}, fmt.Errorf("store: create tenant: %w", err)
	}
	return t.Tenant(ctx, row.Name)
}

// Tenant returns one tenant's row.
func (t *Tenancy) Tenant(ctx context.Context, name string) (TenantRow, error) {
	row, err := queryOne(ctx, t.s.pool, scanTenant, `SELECT name, scope, allow_unknown_projects, version, updated_at FROM tenancy_tenants WHERE name = $1`, name)
	return row, tenancyErr("tenant", err)
}

// UpdateTenant replaces tenant row.Name's scope if its version is still
// version (0: whatever it is), raising the version.
func (t *Tenancy) UpdateTenant(ctx context.Context, actor string, row TenantRow, version int64) (TenantRow, error) {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		old, err := lockTenant(ctx, tx, row.Name, version)
		if err != nil {
			return err
		}
		scope, err := json.Marshal(row.Scope)
		if err != nil {
			return err
		}
		now := t.s.clk.Now()
		if _, err := tx.Exec(ctx, `UPDATE tenancy_tenants SET scope = $2, allow_unknown_projects = $3, version = version + 1, updated_at = $4 WHERE name = $1`,
			row.Name, scope, row.AllowUnknownProjects, now); err != nil {
			return err
		}
		return audit(ctx, tx, now, actor, "update", "tenant", row.Name, tenantAudit(old), tenantAudit(row))
	})
	if err != nil {
		return TenantRow{}, tenancyErr("update tenant", err)
	}
	return t.Tenant(ctx, row.Name)
}

// lockTenant locks tenant name's row in tx and returns it, if its version
// is still version (0: whatever it is).
func lockTenant(ctx context.Context, tx pgx.Tx, name string, version int64) (TenantRow, error) {
	old, err := queryOne(ctx, tx, scanTenant, `SELECT name, scope, allow_unknown_projects, version, updated_at FROM tenancy_tenants WHERE name = $1 FOR UPDATE`, name)
	if err != nil {
		return TenantRow{}, err
	}
	return old, ifVersion(old.Version, version)
}

// DeleteTenant deletes a tenant, its projects and its keys if its version
// is still version (0: whatever it is).
func (t *Tenancy) DeleteTenant(ctx context.Context, actor, name string, version int64) error {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		old, err := lockTenant(ctx, tx, name, version)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenancy_tenants WHERE name = $1`, name); err != nil {
			return err
		}
		return audit(ctx, tx, t.s.clk.Now(), actor, "delete", "tenant", name, tenantAudit(old), nil)
	})
	return tenancyErr("delete tenant", err)
}

// Project returns one project's row.
func (t *Tenancy) Project(ctx context.Context, tenant, name string) (ProjectRow, error) {
	row, err := queryOne(ctx, t.s.pool, scanProject, `SELECT tenant, name, scope, version, updated_at FROM tenancy_projects WHERE tenant = $1 AND name = $2`, tenant, name)
	return row, tenancyErr("project", err)
}

// PutProject creates a project (version -1: it must not exist) or
// replaces it if its version is still version (0: whatever it is, or
// create it).
func (t *Tenancy) PutProject(ctx context.Context, actor string, row ProjectRow, version int64) (ProjectRow, error) {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM tenancy_tenants WHERE name = $1 FOR UPDATE)`, row.Tenant).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrTenancyNotFound
		}
		rows, err := tx.Query(ctx, `SELECT tenant, name, scope, version, updated_at FROM tenancy_projects WHERE tenant = $1 AND name = $2 FOR UPDATE`, row.Tenant, row.Name)
		if err != nil {
			return err
		}
		old, err := pgx.CollectExactlyOneRow(rows, scanProject)
		found := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		switch {
		case version == -1 && found:
			return ErrTenancyExists
		case version > 0 && !found:
			return ErrTenancyNotFound
		case found:
			if err := ifVersion(old.Version, version); err != nil {
				return err
			}
		}
		scope, err := json.Marshal(row.Scope)
		if err != nil {
			return err
		}
		now := t.s.clk.Now()
		if _, err := tx.Exec(ctx, `INSERT INTO tenancy_projects (tenant, name, scope, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, name) DO UPDATE SET scope = EXCLUDED.scope, version = tenancy_projects.version + 1, updated_at = EXCLUDED.updated_at`,
			row.Tenant, row.Name, scope, now); err != nil {
			return err
		}
		if found {
			return audit(ctx, tx, now, actor, "update", "project", row.Tenant+"/"+row.Name, old.Scope, row.Scope)
		}
		return audit(ctx, tx, now, actor, "create", "project", row.Tenant+"/"+row.Name, nil, row.Scope)
	})
	if err != nil {
		return ProjectRow{}, tenancyErr("put project", err)
	}
	return t.Project(ctx, row.Tenant, row.Name)
}

// DeleteProject deletes a project if its version is still version (0:
// whatever it is).
func (t *Tenancy) DeleteProject(ctx context.Context, actor, tenant, name string, version int64) error {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		old, err := queryOne(ctx, tx, scanProject, `SELECT tenant, name, scope, version, updated_at FROM tenancy_projects WHERE tenant = $1 AND name = $2 FOR UPDATE`, tenant, name)
		if err != nil {
			return err
		}
		if err := ifVersion(old.Version, version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenancy_projects WHERE tenant = $1 AND name = $2`, tenant, name); err != nil {
			return err
		}
		return audit(ctx, tx, t.s.clk.Now(), actor, "delete", "project", tenant+"/"+name, old.Scope, nil)
	})
	return tenancyErr("delete project", err)
}

// CreateKey records a key of a tenant by its hash. A name is never
// reused: ErrTenancyExists, even for a revoked key's.
func (t *Tenancy) CreateKey(ctx context.Context, actor string, k APIKeyRow) (APIKeyRow, error) {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM tenancy_tenants WHERE name = $1 FOR UPDATE)`, k.Tenant).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrTenancyNotFound
		}
		now := t.s.clk.Now()
		if _, err := tx.Exec(ctx, `INSERT INTO tenancy_keys (name, tenant, hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`,
			k.Name, k.Tenant, k.Hash, now, k.ExpiresAt); err != nil {
			return err
		}
		return audit(ctx, tx, now, actor, "create", "key", k.Name, nil, keyAudit(k))
	})
	if uniqueViolation(err) {
		return APIKeyRow{}, ErrTenancyExists
	}
	if err != nil {
		return APIKeyRow{}, tenancyErr("create key", err)
	}
	return t.Key(ctx, k.Name)
}

// Key returns one key's row.
func (t *Tenancy) Key(ctx context.Context, name string) (APIKeyRow, error) {
	row, err := queryOne(ctx, t.s.pool, scanKey, `SELECT `+keyCols+` FROM tenancy_keys WHERE name = $1`, name)
	return row, tenancyErr("key", err)
}

// RevokeKey revokes a key if its version is still version (0: whatever
// it is); a revoked key stays listed, and its name taken.
func (t *Tenancy) RevokeKey(ctx context.Context, actor, name string, version int64) (APIKeyRow, error) {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		old, err := queryOne(ctx, tx, scanKey, `SELECT `+keyCols+` FROM tenancy_keys WHERE name = $1 FOR UPDATE`, name)
		if err != nil {
			return err
		}
		if err := ifVersion(old.Version, version); err != nil {
			return err
		}
		if old.RevokedAt != nil {
			return nil
		}
		now := t.s.clk.Now()
		if _, err := tx.Exec(ctx, `UPDATE tenancy_keys SET revoked_at = $2, version = version + 1 WHERE name = $1`, name, now); err != nil {
			return err
		}
		revoked := old
		revoked.RevokedAt = &now
		return audit(ctx, tx, now, actor, "revoke", "key", name, keyAudit(old), keyAudit(revoked))
	})
	if err != nil {
		return APIKeyRow{}, tenancyErr("revoke key", err)
	}
	return t.Key(ctx, name)
}

// TouchKeys records that the named keys were used at at (never moving a
// last use back). It announces nothing: no replica serves it.
func (t *Tenancy) TouchKeys(ctx context.Context, names []string, at time.Time) error {
	_, err := t.s.pool.Exec(ctx, `UPDATE tenancy_keys SET last_used_at = $2 WHERE name = ANY($1) AND (last_used_at IS NULL OR last_used_at < $2)`, names, at)
	if err != nil {
		return fmt.Errorf("store: touch keys: %w", err)
	}
	return nil
}

// Audit returns the newest audit entries before id before (0: the
// newest), at most limit.
func (t *Tenancy) Audit(ctx context.Context, before int64, limit int) ([]AuditEntry, error) {
	rows, err := t.s.pool.Query(ctx, `SELECT id, at, actor, action, kind, name, old, new FROM tenancy_audit
		WHERE $1 = 0 OR id < $1 ORDER BY id DESC LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("store: audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Kind, &e.Name, &e.Old, &e.New)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: audit: %w", err)
	}
	return out, nil
}

// DeleteAuditBefore deletes the audit entries older than cutoff.
func (t *Tenancy) DeleteAuditBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := t.s.pool.Exec(ctx, `DELETE FROM tenancy_audit WHERE at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("store: delete audit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Change is one difference Apply found between the database and a file.
type Change struct {
	Action string // create, update, delete
	Kind   string // tenant, project
	Name   string
	Old    any
	New    any
}

// ApplyFile is what llmq apply makes the database match.
type ApplyFile struct {
	// Tenants are every tenant and project (keys are left as they are).
	Tenants llmq.Tenants
	// Models are every model; nil leaves the models as they are.
	Models map[string]llmq.Model
}

// Apply makes the tenants, projects and (when f has them) models match f
// and returns the changes, models first, each kind in name order; with
// dryRun it changes nothing. Models left inconsistent (a fallback naming
// no model) fail it with a *ModelsError and change nothing. llmq apply.
func (t *Tenancy) Apply(ctx context.Context, actor string, f ApplyFile, dryRun bool) ([]Change, error) {
	var changes []Change
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE tenancy_tenants, tenancy_projects IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		if f.Models != nil {
			have, err := lockModels(ctx, tx)
			if err != nil {
				return err
			}
			if err := t.checkModels(f.Models); err != nil {
				return err
			}
			changes = diffModels(have, f.Models)
		}
		rows, err := tx.Query(ctx, `SELECT name, scope, allow_unknown_projects, version, updated_at FROM tenancy_tenants`)
		if err != nil {
			return err
		}
		tenants, err := pgx.CollectRows(rows, scanTenant)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT tenant, name, scope, version, updated_at FROM tenancy_projects`)
		if err != nil {
			return err
		}
		projects, err := pgx.CollectRows(rows, scanProject)
		if err != nil {
			return err
		}
		have := (&TenancyRows{Tenants: tenants, Projects: projects}).AsTenants()
		changes = append(changes, diffTenants(have, f.Tenants)...)
		if dryRun {
			return nil
		}
		return t.applyChanges(ctx, tx, actor, changes, f.Models != nil)
	})
	if err != nil {
		return nil, modelErr("apply tenancy", err)
	}
	return changes, nil
}

// applyChanges makes Apply's changes and marks the tenancy (and, with
// models, the models) imported: the database wins.
func (t *Tenancy) applyChanges(ctx context.Context, tx pgx.Tx, actor string, changes []Change, models bool) error {
	now := t.s.clk.Now()
	for _, c := range changes {
		var err error
		if c.Kind == "model" {
			err = applyModelChange(ctx, tx, now, actor, c)
		} else {
			err = applyChange(ctx, tx, now, actor, c)
		}
		if err != nil {
			return err
		}
	}
	if models {
		if err := markModelsImported(ctx, tx, now); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO tenancy_imported (imported_at) VALUES ($1) ON CONFLICT DO NOTHING`, now)
	return err
}

// tenantOwn is a tenant without its projects, as Apply compares it.
type tenantOwn struct {
	llmq.Scope
	AllowUnknownProjects bool `json:"allow_unknown_projects,omitempty"`
}

func diffTenants(have, want llmq.Tenants) []Change {
	var out []Change
	for _, n := range unionKeys(have, want) {
		h, hok := have[n]
		w, wok := want[n]
		ho, wo := tenantOwn{h.Scope, h.AllowUnknownProjects}, tenantOwn{w.Scope, w.AllowUnknownProjects}
		switch {
		case !wok:
			out = append(out, Change{Action: "delete", Kind: "tenant", Name: n, Old: ho})
			continue
		case !hok:
			out = append(out, Change{Action: "create", Kind: "tenant", Name: n, New: wo})
		case ho != wo:
			out = append(out, Change{Action: "update", Kind: "tenant", Name: n, Old: ho, New: wo})
		}
		for _, p := range unionKeys(h.Projects, w.Projects) {
			hp, hpok := h.Projects[p]
			wp, wpok := w.Projects[p]
			switch {
			case !wpok:
				out = append(out, Change{Action: "delete", Kind: "project", Name: n + "/" + p, Old: hp})
			case !hpok:
				out = append(out, Change{Action: "create", Kind: "project", Name: n + "/" + p, New: wp})
			case hp != wp:
				out = append(out, Change{Action: "update", Kind: "project", Name: n + "/" + p, Old: hp, New: wp})
			}
		}
	}
	return out
}

func applyChange(ctx context.Context, tx pgx.Tx, now time.Time, actor string, c Change) error {
	const action = "apply"
	switch c.Kind {
	case "tenant":
		switch c.Action {
		case "delete":
			if _, err := tx.Exec(ctx, `DELETE FROM tenancy_tenants WHERE name = $1`, c.Name); err != nil {
				return err
			}
		default:
			own := c.New.(tenantOwn)
			scope, err := json.Marshal(own.Scope)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO tenancy_tenants (name, scope, allow_unknown_projects, updated_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT (name) DO UPDATE SET scope = EXCLUDED.scope, allow_unknown_projects = EXCLUDED.allow_unknown_projects,
				version = tenancy_tenants.version + 1, updated_at = EXCLUDED.updated_at`, c.Name, scope, own.AllowUnknownProjects, now); err != nil {
				return err
			}
		}
	case "project":
		tenant, name, _ := strings.Cut(c.Name, "/")
		switch c.Action {
		case "delete":
			if _, err := tx.Exec(ctx, `DELETE FROM tenancy_projects WHERE tenant = $1 AND name = $2`, tenant, name); err != nil {
				return err
			}
		default:
			scope, err := json.Marshal(c.New)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO tenancy_projects (tenant, name, scope, updated_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT (tenant, name) DO UPDATE SET scope = EXCLUDED.scope, version = tenancy_projects.version + 1,
				updated_at = EXCLUDED.updated_at`, tenant, name, scope, now); err != nil {
				return err
			}
		}
	}
	return audit(ctx, tx, now, actor, action, c.Kind, c.Name, c.Old, c.New)
}

// unionKeys returns the keys of a and b, sorted, each once.
func unionKeys[A, B any](a map[string]A, b map[string]B) []string {
	all := slices.Concat(slices.Collect(maps.Keys(a)), slices.Collect(maps.Keys(b)))
	slices.Sort(all)
	return slices.Compact(all)
}

// queryOne is the one row sql selects, scanned by scan; ErrTenancyNotFound
// when there is none.
func queryOne[T any](ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, scan pgx.RowToFunc[T], sql string, args ...any) (T, error) {
	var zero T
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return zero, err
	}
	row, err := pgx.CollectExactlyOneRow(rows, scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, ErrTenancyNotFound
	}
	return row, err
}

// tenancyErr wraps err unless it is one of the tenancy's own.
func tenancyErr(op string, err error) error {
	if err == nil || errors.Is(err, ErrTenancyNotFound) || errors.Is(err, ErrTenancyExists) || errors.Is(err, ErrVersionMismatch) {
		return err
	}
	return fmt.Errorf("store: %s: %w", op, err)
}
