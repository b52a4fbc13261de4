package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// The admin API (docs/design/tenants.md#tenants-as-data): tenants,
// projects and API keys kept as data, changed by operator keys only, with
// optimistic concurrency (ETag / If-Match) and an audit log.

// Error codes of the admin API.
const (
	// CodePreconditionRequired: an update or delete sent no If-Match.
	CodePreconditionRequired = "precondition_required"
	// CodePreconditionFailed: the row changed since the ETag sent.
	CodePreconditionFailed = "precondition_failed"
	// CodeConflict: the name is taken (a key's name is never reused).
	CodeConflict = "conflict"
	// CodePaused: the tenant or project of the call is paused.
	CodePaused = "paused"
)

// TenancyStore is what the admin API reads and changes; a
// *store.Tenancy is one.
type TenancyStore interface {
	tenantRowStore
	modelRowStore
	TouchKeys(ctx context.Context, names []string, at time.Time) error
}

// tenantRowStore holds the tenants, projects, keys and audit log.
type tenantRowStore interface {
	Load(ctx context.Context) (*store.TenancyRows, error)
	Tenant(ctx context.Context, name string) (store.TenantRow, error)
	CreateTenant(ctx context.Context, actor string, row store.TenantRow) (store.TenantRow, error)
	UpdateTenant(ctx context.Context, actor string, row store.TenantRow, version int64) (store.TenantRow, error)
	DeleteTenant(ctx context.Context, actor, name string, version int64) error
	Project(ctx context.Context, tenant, name string) (store.ProjectRow, error)
	PutProject(ctx context.Context, actor string, row store.ProjectRow, version int64) (store.ProjectRow, error)
	DeleteProject(ctx context.Context, actor, tenant, name string, version int64) error
	CreateKey(ctx context.Context, actor string, k store.APIKeyRow) (store.APIKeyRow, error)
	Key(ctx context.Context, name string) (store.APIKeyRow, error)
	RevokeKey(ctx context.Context, actor, name string, version int64) (store.APIKeyRow, error)
	Audit(ctx context.Context, before int64, limit int) ([]store.AuditEntry, error)
}

// tenantAdmin serves the admin API's tenants, projects, keys and audit
// log (operator keys only).
type tenantAdmin struct {
	replies
	store tenantRowStore
	clock clockwork.Clock
}

// AdminTenant is a tenant of the admin API: its scope, its projects'
// names, its version (the ETag).
type AdminTenant struct {
	Name string `json:"name"`
	llmq.Scope
	AllowUnknownProjects bool      `json:"allow_unknown_projects"`
	Projects             []string  `json:"projects"`
	Version              int64     `json:"version"`
	UpdatedAt            time.Time `json:"updated_at"`
}

// AdminProject is a project of the admin API.
type AdminProject struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	llmq.Scope
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

// AdminKey is an API key of the admin API: never the key, except in the
// answer to its creation (Key).
type AdminKey struct {
	Name       string     `json:"name"`
	Tenant     string     `json:"tenant"`
	Key        string     `json:"key,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	Version    int64      `json:"version"`
}

// AdminAuditEntry is one change in the audit log.
type AdminAuditEntry struct {
	ID     int64           `json:"id"`
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Kind   string          `json:"kind"`
	Name   string          `json:"name"`
	Old    json.RawMessage `json:"old"`
	New    json.RawMessage `json:"new"`
}

// adminOnly refuses a tenant key with 403.
func (dr *door) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !Operator(r) {
			writeError(w, http.StatusForbidden, Error{Code: CodeForbidden,
				Message: "the admin API changes every tenant: it needs an operator key"})
			return
		}
		h(w, r)
	}
}

// actor is the audit log's name of the request's operator key.
func actor(r *http.Request) string {
	s, _ := scopeOf(r)
	return s.name
}

// tenants are the tenants the API applies now: the tenancy's, else
// Config.Tenants.
func (a *API) tenants() llmq.Tenants {
	if a.cfg.Tenancy != nil {
		return a.cfg.Tenancy.Tenants()
	}
	return a.cfg.Tenants
}

// catalog is the catalog the API applies now: Config.Catalog with the
// tenancy's models.
func (a *API) catalog() llmq.Catalog {
	if a.cfg.Tenancy != nil {
		return a.cfg.Tenancy.Catalog(a.cfg.Catalog)
	}
	return a.cfg.Catalog
}

// keyUseEvery is how often a replica records a key's last use: at most
// one write per key and minute.
const keyUseEvery = time.Minute

// keyUses records the last use of the tenancy's keys, each at most every
// keyUseEvery.
type keyUses struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether name's use at now is to be written, and then
// counts it written.
func (u *keyUses) due(name string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if at, ok := u.last[name]; ok && now.Sub(at) < keyUseEvery {
		return false
	}
	if u.last == nil {
		u.last = map[string]time.Time{}
	}
	u.last[name] = now
	return true
}

// noteKeyUse writes a key's last use when due; a failure is logged and
// the request goes on.
func (dr *door) noteKeyUse(ctx context.Context, name string, now time.Time) {
	if !dr.used.due(name, now) {
		return
	}
	if err := dr.touch.TouchKeys(ctx, []string{name}, now); err != nil {
		dr.log.Warn("api: record a key's last use", "key_name", name, "error", err.Error())
	}
}

// etag is a row version as an ETag.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch reads the If-Match of an update or delete: 428 when missing,
// 412 when it is no version of ours.
func ifMatch(w http.ResponseWriter, r *http.Request) (int64, bool) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		writeError(w, http.StatusPreconditionRequired, Error{Code: CodePreconditionRequired, Field: "If-Match",
			Message: "send If-Match with the ETag of the version you read (GET it first), so that no change is overwritten unseen"})
		return 0, false
	}
	v, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(h, "W/"), `"`), 10, 64)
	if err != nil || v < 1 {
		writeError(w, http.StatusPreconditionFailed, Error{Code: CodePreconditionFailed, Field: "If-Match",
			Message: fmt.Sprintf("%q is not an ETag of this resource: GET it for the current one", h)})
		return 0, false
	}
	return v, true
}

// tenancyError answers a store error of the admin API.
func (p *replies) tenancyError(w http.ResponseWriter, r *http.Request, err error, what string) {
	switch {
	case errors.Is(err, store.ErrTenancyNotFound):
		writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Message: "no such " + what})
	case errors.Is(err, store.ErrVersionMismatch):
		writeError(w, http.StatusPreconditionFailed, Error{Code: CodePreconditionFailed, Field: "If-Match",
			Message: "the " + what + " changed since the version you read: GET it again, and apply your change to it"})
	case errors.Is(err, store.ErrTenancyExists):
		writeError(w, http.StatusConflict, Error{Code: CodeConflict, Field: "name",
			Message: "the name is taken by another " + what + " (a key's name is never reused, even once revoked)"})
	default:
		p.internalError(w, r, err)
	}
}

// scopeBody is the body of a tenant or project: a scope, checked.
type scopeBody struct {
	Name string `json:"name"`
	llmq.Scope
	AllowUnknownProjects bool `json:"allow_unknown_projects"`
}

// readScope decodes a tenant's or project's body and checks it; every
// error names its field.
func (ta *tenantAdmin) readScope(w http.ResponseWriter, r *http.Request) (scopeBody, bool) {
	var b scopeBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		e := Error{Code: llmq.CodeInvalidJSON, Message: "the body is not a scope: " + err.Error()}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			e = Error{Code: llmq.CodeInvalidType, Field: strings.TrimPrefix(te.Field, "Scope."), Message: fmt.Sprintf("must be of type %s", te.Type)}
		} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			e = Error{Code: llmq.CodeInvalidValue, Field: strings.Trim(f, `"`), Message: "no such setting"}
		}
		writeError(w, http.StatusBadRequest, e)
		return b, false
	}
	if errs := (llmq.Tenants{"t": {Scope: b.Scope}}).Validate("s"); len(errs) > 0 {
		details := make([]llmq.FieldError, 0, len(errs))
		for _, err := range errs {
			field, msg, _ := strings.Cut(strings.TrimPrefix(err.Error(), "s.t"), ": ")
			field = strings.TrimPrefix(field, ".")
			details = append(details, llmq.FieldError{Field: field, Code: llmq.CodeInvalidValue, Message: msg})
		}
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: details[0].Field,
			Message: details[0].Message, Details: details})
		return b, false
	}
	return b, true
}

// validName answers 400 for a name that is no id.
func validName(w http.ResponseWriter, field, name string) bool {
	if llmq.ValidID(name) {
		return true
	}
	writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: field,
		Message: fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9._:-]", llmq.MaxIDLength)})
	return false
}

func adminTenant(t store.TenantRow, projects []string) AdminTenant {
	if projects == nil {
		projects = []string{}
	}
	return AdminTenant{Name: t.Name, Scope: t.Scope, AllowUnknownProjects: t.AllowUnknownProjects, Projects: projects,
		Version: t.Version, UpdatedAt: t.UpdatedAt}
}

func adminProject(p store.ProjectRow) AdminProject {
	return AdminProject{Tenant: p.Tenant, Name: p.Name, Scope: p.Scope, Version: p.Version, UpdatedAt: p.UpdatedAt}
}

func adminKey(k store.APIKeyRow) AdminKey {
	return AdminKey{Name: k.Name, Tenant: k.Tenant, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt,
		LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt, Version: k.Version}
}

// listTenants: GET /v1/admin/tenants.
func (ta *tenantAdmin) listTenants(w http.ResponseWriter, r *http.Request) {
	rows, err := ta.store.Load(r.Context())
	if err != nil {
		ta.internalError(w, r, err)
		return
	}
	projects := map[string][]string{}
	for _, p := range rows.Projects {
		projects[p.Tenant] = append(projects[p.Tenant], p.Name)
	}
	out := make([]AdminTenant, len(rows.Tenants))
	for i, t := range rows.Tenants {
		out[i] = adminTenant(t, projects[t.Name])
	}
	writeJSON(w, http.StatusOK, struct {
		Data []AdminTenant `json:"data"`
	}{out})
}

// writeTenant answers with tenant name as it is now, and its ETag.
func (ta *tenantAdmin) writeTenant(w http.ResponseWriter, r *http.Request, status int, name string) {
	rows, err := ta.store.Load(r.Context())
	if err != nil {
		ta.internalError(w, r, err)
		return
	}
	for _, t := range rows.Tenants {
		if t.Name != name {
			continue
		}
		var projects []string
		for _, p := range rows.Projects {
			if p.Tenant == name {
				projects = append(projects, p.Name)
			}
		}
		w.Header().Set("ETag", etag(t.Version))
		writeJSON(w, status, adminTenant(t, projects))
		return
	}
	ta.tenancyError(w, r, store.ErrTenancyNotFound, "tenant")
}

// createTenant: POST /v1/admin/tenants.
func (ta *tenantAdmin) createTenant(w http.ResponseWriter, r *http.Request) {
	b, ok := ta.readScope(w, r)
	if !ok || !validName(w, "name", b.Name) {
		return
	}
	if _, err := ta.store.CreateTenant(r.Context(), actor(r), store.TenantRow{Name: b.Name, Scope: b.Scope,
		AllowUnknownProjects: b.AllowUnknownProjects}); err != nil {
		ta.tenancyError(w, r, err, "tenant")
		return
	}
	ta.writeTenant(w, r, http.StatusCreated, b.Name)
}

// getTenant: GET /v1/admin/tenants/{tenant}.
func (ta *tenantAdmin) getTenant(w http.ResponseWriter, r *http.Request) {
	ta.writeTenant(w, r, http.StatusOK, r.PathValue("tenant"))
}

// updateTenant: PUT /v1/admin/tenants/{tenant}, If-Match required.
func (ta *tenantAdmin) updateTenant(w http.ResponseWriter, r *http.Request) {
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	b, ok := ta.readScope(w, r)
	if !ok {
		return
	}
	name := r.PathValue("tenant")
	if b.Name != "" && b.Name != name {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "name",
			Message: fmt.Sprintf("a tenant is not renamed: omit name or send %q", name)})
		return
	}
	if _, err := ta.store.UpdateTenant(r.Context(), actor(r), store.TenantRow{Name: name, Scope: b.Scope,
		AllowUnknownProjects: b.AllowUnknownProjects}, version); err != nil {
		ta.tenancyError(w, r, err, "tenant")
		return
	}
	ta.writeTenant(w, r, http.StatusOK, name)
}

// deleteTenant: DELETE /v1/admin/tenants/{tenant}, If-Match required.
func (ta *tenantAdmin) deleteTenant(w http.ResponseWriter, r *http.Request) {
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if err := ta.store.DeleteTenant(r.Context(), actor(r), r.PathValue("tenant"), version); err != nil {
		ta.tenancyError(w, r, err, "tenant")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pauseTenant: POST /v1/admin/tenants/{tenant}/pause and /resume. No
// If-Match: it changes the one setting it names, on the version it reads.
func (ta *tenantAdmin) pauseTenant(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("tenant")
		for {
			t, err := ta.store.Tenant(r.Context(), name)
			if err != nil {
				ta.tenancyError(w, r, err, "tenant")
				return
			}
			if t.Scope.Paused != paused {
				t.Scope.Paused = paused
				_, err = ta.store.UpdateTenant(r.Context(), actor(r), t, t.Version)
			}
			if errors.Is(err, store.ErrVersionMismatch) {
				continue // changed meanwhile: pause the new version
			}
			if err != nil {
				ta.tenancyError(w, r, err, "tenant")
				return
			}
			ta.writeTenant(w, r, http.StatusOK, name)
			return
		}
	}
}

// getProject: GET /v1/admin/tenants/{tenant}/projects/{project}.
func (ta *tenantAdmin) getProject(w http.ResponseWriter, r *http.Request) {
	p, err := ta.store.Project(r.Context(), r.PathValue("tenant"), r.PathValue("project"))
	if err != nil {
		ta.tenancyError(w, r, err, "project")
		return
	}
	w.Header().Set("ETag", etag(p.Version))
	writeJSON(w, http.StatusOK, adminProject(p))
}

// putProject: PUT /v1/admin/tenants/{tenant}/projects/{project}: without
// If-Match it creates the project (409 when it exists), with it it
// replaces the version named.
func (ta *tenantAdmin) putProject(w http.ResponseWriter, r *http.Request) {
	version, status := int64(-1), http.StatusCreated
	if r.Header.Get("If-Match") != "" {
		v, ok := ifMatch(w, r)
		if !ok {
			return
		}
		version, status = v, http.StatusOK
	}
	b, ok := ta.readScope(w, r)
	if !ok || !validName(w, "project", r.PathValue("project")) {
		return
	}
	if b.Name != "" && b.Name != r.PathValue("project") {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "name",
			Message: "the project is named by the path: omit name"})
		return
	}
	if b.AllowUnknownProjects {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "allow_unknown_projects",
			Message: "a setting of a tenant, not of a project"})
		return
	}
	p, err := ta.store.PutProject(r.Context(), actor(r), store.ProjectRow{Tenant: r.PathValue("tenant"),
		Name: r.PathValue("project"), Scope: b.Scope}, version)
	if err != nil {
		ta.tenancyError(w, r, err, "project")
		return
	}
	w.Header().Set("ETag", etag(p.Version))
	writeJSON(w, status, adminProject(p))
}

// deleteProject: DELETE /v1/admin/tenants/{tenant}/projects/{project},
// If-Match required.
func (ta *tenantAdmin) deleteProject(w http.ResponseWriter, r *http.Request) {
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if err := ta.store.DeleteProject(r.Context(), actor(r), r.PathValue("tenant"), r.PathValue("project"), version); err != nil {
		ta.tenancyError(w, r, err, "project")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pauseProject: POST .../projects/{project}/pause and /resume.
func (ta *tenantAdmin) pauseProject(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for {
			p, err := ta.store.Project(r.Context(), r.PathValue("tenant"), r.PathValue("project"))
			if err != nil {
				ta.tenancyError(w, r, err, "project")
				return
			}
			if p.Scope.Paused != paused {
				p.Scope.Paused = paused
				p, err = ta.store.PutProject(r.Context(), actor(r), p, p.Version)
			}
			if errors.Is(err, store.ErrVersionMismatch) {
				continue
			}
			if err != nil {
				ta.tenancyError(w, r, err, "project")
				return
			}
			w.Header().Set("ETag", etag(p.Version))
			writeJSON(w, http.StatusOK, adminProject(p))
			return
		}
	}
}

// listKeys: GET /v1/admin/keys.
func (ta *tenantAdmin) listKeys(w http.ResponseWriter, r *http.Request) {
	rows, err := ta.store.Load(r.Context())
	if err != nil {
		ta.internalError(w, r, err)
		return
	}
	out := make([]AdminKey, len(rows.Keys))
	for i, k := range rows.Keys {
		out[i] = adminKey(k)
	}
	writeJSON(w, http.StatusOK, struct {
		Data []AdminKey `json:"data"`
	}{out})
}

// keyBytes is the randomness of a new key (256 bits).
const keyBytes = 32

// KeyPrefix starts every key the admin API makes.
const KeyPrefix = "llmq_"

// createKey: POST /v1/admin/keys. The key is in this answer only: the
// database keeps its SHA-256.
func (ta *tenantAdmin) createKey(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Name      string     `json:"name"`
		Tenant    string     `json:"tenant"`
		ExpiresAt *time.Time `json:"expires_at"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidJSON, Message: "the body is not a key: " + err.Error()})
		return
	}
	if !validName(w, "name", b.Name) || !validName(w, "tenant", b.Tenant) {
		return
	}
	if b.ExpiresAt != nil && !b.ExpiresAt.After(ta.clock.Now()) {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "expires_at",
			Message: fmt.Sprintf("%s is not in the future", b.ExpiresAt.UTC().Format(time.RFC3339))})
		return
	}
	raw := make([]byte, keyBytes)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails
	key := KeyPrefix + base64.RawURLEncoding.EncodeToString(raw)
	hash := sha256.Sum256([]byte(key))
	k, err := ta.store.CreateKey(r.Context(), actor(r), store.APIKeyRow{Name: b.Name, Tenant: b.Tenant,
		Hash: hash[:], ExpiresAt: b.ExpiresAt})
	if errors.Is(err, store.ErrTenancyNotFound) {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "tenant",
			Message: fmt.Sprintf("no tenant %q: create it first", b.Tenant)})
		return
	}
	if err != nil {
		ta.tenancyError(w, r, err, "key")
		return
	}
	out := adminKey(k)
	out.Key = key
	w.Header().Set("ETag", etag(k.Version))
	writeJSON(w, http.StatusCreated, out)
}

// getKey: GET /v1/admin/keys/{key} (by name).
func (ta *tenantAdmin) getKey(w http.ResponseWriter, r *http.Request) {
	k, err := ta.store.Key(r.Context(), r.PathValue("key"))
	if err != nil {
		ta.tenancyError(w, r, err, "key")
		return
	}
	w.Header().Set("ETag", etag(k.Version))
	writeJSON(w, http.StatusOK, adminKey(k))
}

// revokeKey: POST /v1/admin/keys/{key}/revoke. No If-Match: a revocation
// undoes nobody's change, and a leaked key should not wait for a read.
func (ta *tenantAdmin) revokeKey(w http.ResponseWriter, r *http.Request) {
	k, err := ta.store.RevokeKey(r.Context(), actor(r), r.PathValue("key"), 0)
	if err != nil {
		ta.tenancyError(w, r, err, "key")
		return
	}
	w.Header().Set("ETag", etag(k.Version))
	writeJSON(w, http.StatusOK, adminKey(k))
}

// auditPageDefault and auditPageMax bound a page of the audit log.
const (
	auditPageDefault = 100
	auditPageMax     = 1000
)

// listAudit: GET /v1/admin/audit?before=<id>&limit=<n>, newest first.
func (ta *tenantAdmin) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	before, limit := int64(0), auditPageDefault
	if s := q.Get("before"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 1 {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "before", Message: "must be an entry's id"})
			return
		}
		before = v
	}
	if s := q.Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > auditPageMax {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "limit",
				Message: fmt.Sprintf("must be 1 to %d", auditPageMax)})
			return
		}
		limit = v
	}
	entries, err := ta.store.Audit(r.Context(), before, limit)
	if err != nil {
		ta.internalError(w, r, err)
		return
	}
	out := make([]AdminAuditEntry, len(entries))
	for i, e := range entries {
		out[i] = AdminAuditEntry{ID: e.ID, At: e.At, Actor: e.Actor, Action: e.Action, Kind: e.Kind, Name: e.Name, Old: e.Old, New: e.New}
	}
	writeJSON(w, http.StatusOK, struct {
		Data []AdminAuditEntry `json:"data"`
	}{out})
}

// pausedRefusal is the gateway's answer to a call of a paused tenant or
// project: 429, nothing enqueued.
func (a *admission) pausedRefusal(tenant, project string) *Error {
	t, ok := a.tenants()[tenant]
	switch {
	case !ok:
		return nil
	case t.Paused:
		return &Error{Code: CodePaused, Message: fmt.Sprintf("tenant %q is paused by an operator: nothing was enqueued; retry once it is resumed", tenant)}
	case project != "" && t.Projects[project].Paused:
		return &Error{Code: CodePaused, Field: "project", Message: fmt.Sprintf("project %q of tenant %q is paused by an operator: nothing was enqueued; retry once it is resumed", project, tenant)}
	}
	return nil
}
