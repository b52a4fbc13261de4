package api

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/tenancy"
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

// door authenticates and limits every request: it holds the keys (their
// hashes), the limits of each key and tenant and of the addresses failing
// authentication, and exchanges its counts with the other replicas.
type door struct {
	replies
	clock  clockwork.Clock
	limits RateLimitConfig
	keys   map[[sha256.Size]byte]caller
	// tenancy, when set, holds the keys kept as data; touch records their
	// last use (used: at most every keyUseEvery).
	tenancy *tenancy.Watcher
	touch   interface {
		TouchKeys(ctx context.Context, names []string, at time.Time) error
	}
	used keyUses
	// The door's limits (ratelimit.go): a bucket per key, per tenant and
	// per client address failing authentication.
	keyLimits, tenantLimits, authFailures *limiterSet
	limited                               *prometheus.CounterVec
	// keyNames and tenantNames are the names of the configured keys' and
	// tenants' buckets: the only ones the replicas' counts may add
	// (doorshare.go).
	keyNames, tenantNames map[string]bool
	limitSyncs            *prometheus.CounterVec
	// ledger, replica, period and lease are Config's Limits, Replica,
	// LimitPeriod and LimitLease.
	ledger        LimitLedger
	replica       string
	period, lease time.Duration
	// usage and tenants give a gateway call's token headers
	// (setTokenHeaders).
	usage   UsageStore
	tenants func() llmq.Tenants
}

// newDoor returns the door of cfg's keys and limits.
func newDoor(cfg Config, rs replies, tenants func() llmq.Tenants) *door {
	dr := &door{
		replies: rs, clock: cfg.Clock, limits: cfg.RateLimits, tenancy: cfg.Tenancy, touch: cfg.TenancyStore,
		keys:         make(map[[sha256.Size]byte]caller, len(cfg.Keys)+len(cfg.OperatorKeys)),
		keyLimits:    newLimiterSet(cfg.RateLimits.KeyRPM, knownCallers(cfg, len(cfg.Keys)+len(cfg.OperatorKeys))),
		tenantLimits: newLimiterSet(cfg.RateLimits.TenantRPM, knownCallers(cfg, len(cfg.Keys))),
		authFailures: newLimiterSet(cfg.RateLimits.AuthFailuresPerMinute, cfg.RateLimits.MaxClients),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_api_rate_limited_total",
			Help: "Requests refused at the door by the limit they passed: key_rpm, tenant_rpm, auth_failures, gateway_waiting, paused.",
		}, []string{"limit"}),
		limitSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_api_limit_exchanges_total",
			Help: "Exchanges of the door's limit counts with the other API replicas, by outcome: ok, error.",
		}, []string{"outcome"}),
		keyNames: map[string]bool{}, tenantNames: map[string]bool{},
		ledger: cfg.Limits, replica: cfg.Replica, period: cfg.LimitPeriod, lease: cfg.LimitLease,
		usage: cfg.Usage, tenants: tenants,
	}
	// Keys are looked up by their hash; the door keeps no key itself.
	for k, tenant := range cfg.Keys {
		hash := sha256.Sum256([]byte(k))
		dr.keys[hash] = caller{tenant: tenant}
		dr.keyNames[keyLimitName(hash)], dr.tenantNames[tenant] = true, true
	}
	for _, k := range cfg.OperatorKeys {
		hash := sha256.Sum256([]byte(k.Key))
		dr.keys[hash] = caller{operator: true, name: operatorName(k.Name, hash)}
		dr.keyNames[keyLimitName(hash)] = true
	}
	return dr
}

// authed requires a known bearer key and puts the request's scope in the
// context. The tenant query parameter, on any endpoint, narrows an
// operator's scope to one tenant; a tenant key may only name its own
// (400 tenant_mismatch otherwise).
func (dr *door) authed(h http.HandlerFunc) http.Handler { return dr.authedAs(h, writeError) }

// authedAs is authed answering its errors with fail (the gateway's
// endpoints answer in OpenAI's shape).
func (dr *door) authedAs(h http.HandlerFunc, fail func(http.ResponseWriter, int, Error)) http.Handler {
	return dr.authedLimits(h, fail, false)
}

// authedLimits is authedAs; with limitHeaders every answer past the key's check
// carries the caller's request limit as OpenAI sends its own
// (setLimitHeaders), every admitted one its token limit (setTokenHeaders):
// the gateway's.
func (dr *door) authedLimits(h http.HandlerFunc, fail func(http.ResponseWriter, int, Error), limitHeaders bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := dr.clock.Now()
		// An address past its failures is refused before its key is
		// looked at, so that guessing cannot go on. Only an address that
		// failed has a bucket.
		addr := dr.clientAddr(r)
		if wait := throttled(now, dr.authFailures.get(addr, false)); wait > 0 {
			dr.rateLimited(w, fail, "auth_failures", wait, fmt.Sprintf(
				"too many failed authentications from this address: over %d per minute (rate_limits.auth_failures_per_minute)",
				dr.limits.AuthFailuresPerMinute))
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
			c, known = dr.lookupKey(r.Context(), hash, now)
		}
		if !known {
			if failures := dr.authFailures.get(addr, true); failures != nil {
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
			tenantLimit = dr.tenantLimits.get(c.tenant, true)
		}
		keyName := keyLimitName(hash)
		keyLimit := dr.keyLimits.get(keyName, true)
		i, wait := take(now, keyLimit, tenantLimit)
		if limitHeaders {
			setLimitHeaders(w.Header(), now, keyLimit, tenantLimit)
		}
		switch i {
		case 0:
			dr.rateLimited(w, fail, "key_rpm", wait, fmt.Sprintf(
				"the API key is over its limit of %d requests per minute (rate_limits.key_rpm)", dr.limits.KeyRPM))
			return
		case 1:
			dr.rateLimited(w, fail, "tenant_rpm", wait, fmt.Sprintf(
				"tenant %q is over its limit of %d requests per minute (rate_limits.tenant_rpm)", c.tenant, dr.limits.TenantRPM))
			return
		}
		dr.keyLimits.took(keyName, now)
		if !c.operator {
			dr.tenantLimits.took(c.tenant, now)
		}
		if limitHeaders && !c.operator {
			dr.setTokenHeaders(r.Context(), w.Header(), c.tenant) // past the door: a refused flood reads nothing
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
func (dr *door) operatorOnly(h http.HandlerFunc) http.HandlerFunc {
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
func me(w http.ResponseWriter, r *http.Request) {
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
func (dr *door) lookupKey(ctx context.Context, hash [sha256.Size]byte, now time.Time) (caller, bool) {
	if c, ok := dr.keys[hash]; ok || dr.tenancy == nil {
		return c, ok
	}
	k, ok := dr.tenancy.Snapshot().Key(hash, now)
	if !ok {
		return caller{}, false
	}
	dr.noteKeyUse(ctx, k.Name, now)
	return caller{tenant: k.Tenant}, true
}
