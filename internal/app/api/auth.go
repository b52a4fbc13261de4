package api

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/llmq/llmq"
)

// caller is who a key belongs to: a tenant, or an operator (bound to no
// tenant).
type caller struct {
	tenant   string
	operator bool
	// name is an operator key's name, for the audit log: "operator "
	// and its name, or the first 8 hex digits of its SHA-256
	// (operatorName).
	name string
}

// scope is what an authenticated request may see and act on.
type scope struct {
	// tenant is the key's tenant; for an operator, the tenant query
	// parameter, "" meaning every tenant.
	tenant   string
	operator bool
	name     string
}

type scopeKey struct{}

func scopeOf(r *http.Request) (scope, bool) {
	s, ok := r.Context().Value(scopeKey{}).(scope)
	return s, ok
}

// Scope returns the tenant an authenticated request acts on, and true: the
// key's tenant, or for an operator key the tenant query parameter ("" =
// every tenant). It returns false for a request that did not pass the
// API's authentication. It is what a handler mounted behind the API (the
// dead-letter endpoints) filters by.
func Scope(r *http.Request) (tenant string, ok bool) {
	s, ok := scopeOf(r)
	return s.tenant, ok
}

// Operator reports whether the request was authenticated with an operator
// key.
func Operator(r *http.Request) bool {
	s, _ := scopeOf(r)
	return s.operator
}

// authed requires a known bearer key and puts the request's scope in the
// context. The tenant query parameter, on any endpoint, narrows an
// operator's scope to one tenant; a tenant key may only name its own
// (400 tenant_mismatch otherwise).
func (a *API) authed(h http.HandlerFunc) http.Handler { return a.authedAs(h, writeError) }

// authedAs is authed answering its errors with fail (the gateway's
// endpoints answer in OpenAI's shape).
func (a *API) authedAs(h http.HandlerFunc, fail func(http.ResponseWriter, int, Error)) http.Handler {
	return a.authedLimits(h, fail, false)
}

// authedLimits is authedAs; with limitHeaders every answer past the key's check
// carries the caller's request limit as OpenAI sends its own
// (setLimitHeaders), every admitted one its token limit (setTokenHeaders):
// the gateway's.
func (a *API) authedLimits(h http.HandlerFunc, fail func(http.ResponseWriter, int, Error), limitHeaders bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := a.cfg.Clock.Now()
		// An address past its failures is refused before its key is
		// looked at, so that guessing cannot go on. Only an address that
		// failed has a bucket.
		addr := a.clientAddr(r)
		if wait := throttled(now, a.authFailures.get(addr, false)); wait > 0 {
			a.rateLimited(w, fail, "auth_failures", wait, fmt.Sprintf(
				"too many failed authentications from this address: over %d per minute (rate_limits.auth_failures_per_minute)",
				a.cfg.RateLimits.AuthFailuresPerMinute))
			return
		}
		key, ok := bearer(r.Header.Get("Authorization"))
		var (
			c     caller
			known bool
			hash  [sha256.Size]byte
		)
		if ok {
			hash = sha256.Sum256([]byte(key))
			c, known = a.lookupKey(r.Context(), hash, now)
		}
		if !known {
			if failures := a.authFailures.get(addr, true); failures != nil {
				failures.AllowN(now, 1)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="llmq"`)
			msg := "missing bearer token: send Authorization: Bearer <key>"
			if ok {
				msg = "unknown API key"
			}
			fail(w, http.StatusUnauthorized, Error{Code: CodeUnauthorized, Message: msg})
			return
		}
		var tenantLimit *rate.Limiter
		if !c.operator {
			tenantLimit = a.tenantLimits.get(c.tenant, true)
		}
		keyName := keyLimitName(hash)
		keyLimit := a.keyLimits.get(keyName, true)
		i, wait := take(now, keyLimit, tenantLimit)
		if limitHeaders {
			setLimitHeaders(w.Header(), now, keyLimit, tenantLimit)
		}
		switch i {
		case 0:
			a.rateLimited(w, fail, "key_rpm", wait, fmt.Sprintf(
				"the API key is over its limit of %d requests per minute (rate_limits.key_rpm)", a.cfg.RateLimits.KeyRPM))
			return
		case 1:
			a.rateLimited(w, fail, "tenant_rpm", wait, fmt.Sprintf(
				"tenant %q is over its limit of %d requests per minute (rate_limits.tenant_rpm)", c.tenant, a.cfg.RateLimits.TenantRPM))
			return
		}
		a.keyLimits.took(keyName, now)
		if !c.operator {
			a.tenantLimits.took(c.tenant, now)
		}
		if limitHeaders && !c.operator {
			a.setTokenHeaders(r.Context(), w.Header(), c.tenant) // past the door: a refused flood reads nothing
		}
		s := scope(c)
		if t := r.URL.Query().Get("tenant"); t != "" {
			switch {
			case !llmq.ValidID(t):
				fail(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "tenant",
					Message: fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9._:-]", llmq.MaxIDLength)})
				return
			case c.operator:
				s.tenant = t
			case t != c.tenant:
				fail(w, http.StatusBadRequest, Error{Code: CodeTenantMismatch, Field: "tenant",
					Message: fmt.Sprintf("the API key acts for tenant %q; omit tenant or send %q", c.tenant, c.tenant)})
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), scopeKey{}, s)))
	})
}

// operatorOnly refuses a tenant key with 403: the resource spans tenants.
func (a *API) operatorOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !Operator(r) {
			writeError(w, http.StatusForbidden, Error{Code: CodeForbidden,
				Message: "provider batches hold several tenants' jobs: this endpoint needs an operator key"})
			return
		}
		h(w, r)
	}
}

// jobTenant is the tenant of the one job a request names: the key's, or
// for an operator the tenant parameter, which is then required (job ids
// are scoped by tenant).
func jobTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	s, _ := scopeOf(r)
	if s.tenant == "" {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeRequired, Field: "tenant",
			Message: "an operator key names the job's tenant: add ?tenant=<tenant> (job ids are scoped by tenant)"})
		return "", false
	}
	return s.tenant, true
}

// me says who the key is: GET /v1/me.
func (a *API) me(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	out := Me{Operator: s.operator}
	if !s.operator {
		out.Tenant = &s.tenant
	}
	writeJSON(w, http.StatusOK, out)
}

// OperatorKey is an operator's key and its name in the audit log.
type OperatorKey struct {
	// Name is the key's name; "" = derived from the key (OperatorName).
	Name string
	Key  string
}

// operatorName names an operator key in the audit log without showing
// it: "operator" and its name, or the first 8 hex digits of its SHA-256
// when it has none.
func operatorName(name string, hash [sha256.Size]byte) string {
	if name != "" {
		return "operator " + name
	}
	return fmt.Sprintf("operator %x", hash[:4])
}

// OperatorName is the name the audit log gives the operator key k.
func OperatorName(k OperatorKey) string { return operatorName(k.Name, sha256.Sum256([]byte(k.Key))) }

// lookupKey is the caller of the key whose SHA-256 is hash: a configured
// key's, else a live key's of the tenancy (whose use is recorded).
func (a *API) lookupKey(ctx context.Context, hash [sha256.Size]byte, now time.Time) (caller, bool) {
	if c, ok := a.keys[hash]; ok || a.cfg.Tenancy == nil {
		return c, ok
	}
	k, ok := a.cfg.Tenancy.Snapshot().Key(hash, now)
	if !ok {
		return caller{}, false
	}
	a.noteKeyUse(ctx, k.Name, now)
	return caller{tenant: k.Tenant}, true
}
