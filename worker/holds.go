package worker

import (
	"strings"
	"sync"
	"time"

	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/store"
)

// holdLog remembers when this worker's scheduler held a tenant's or
// project's jobs for its own quota (tenant_quota) and a model's for the
// provider's (provider_quota), so that a job's llmq.queue.wait span names
// what held it (docs/design/tracing.md). Its zero value is ready; it is
// safe for concurrent use, keeps one streak per configured scope and
// model, and notes nothing while tracing is off.
type holdLog struct {
	mu      sync.Mutex
	streaks map[string]*holdStreak
}

// holdStreak is a run of scheduling rounds that held a key: from since
// until the last round that held it; open while the rounds still do.
type holdStreak struct {
	since, until time.Time
	open         bool
}

func modelHoldKey(model string) string       { return "model\x00" + model }
func scopeHoldKey(ref store.ScopeRef) string { return "scope\x00" + ref.Tenant + "\x00" + ref.Project }

// setLocked notes key held or not at now.
func (h *holdLog) setLocked(key string, held bool, now time.Time) {
	s := h.streaks[key]
	switch {
	case held && s != nil && s.open:
		s.until = now
	case held:
		if h.streaks == nil {
			h.streaks = map[string]*holdStreak{}
		}
		h.streaks[key] = &holdStreak{since: now, until: now, open: true}
	case s != nil:
		s.open = false
	}
}

// model notes model's queued jobs held for the provider's quota or not.
func (h *holdLog) model(model string, held bool, now time.Time) {
	if !tracing.Enabled() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setLocked(modelHoldKey(model), held, now)
}

// scopes notes the scopes held in a round, every other scope not held.
func (h *holdLog) scopes(held map[store.ScopeRef]bool, now time.Time) {
	if !tracing.Enabled() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.scopesLocked(held, now)
}

// scopesLocked is scopes.
func (h *holdLog) scopesLocked(held map[store.ScopeRef]bool, now time.Time) {
	keys := make(map[string]bool, len(held))
	for ref := range held {
		keys[scopeHoldKey(ref)] = true
		h.setLocked(scopeHoldKey(ref), true, now)
	}
	for key, s := range h.streaks {
		if strings.HasPrefix(key, "scope\x00") && !keys[key] {
			s.open = false
		}
	}
}

// waits are the holds of rec's tenant, project and model that lasted past
// its record: the waiting reasons of its wait in Postgres, each since it
// began (at most the record's time).
func (h *holdLog) waits(rec *store.JobRecord) []tracing.Wait {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []tracing.Wait
	add := func(key, reason string) {
		s := h.streaks[key]
		if s == nil || s.until.Before(rec.CreatedAt) {
			return
		}
		if n := len(out); n > 0 && out[n-1].Reason == reason { // the tenant's and the project's: one
			out[n-1].Since = minTime(out[n-1].Since, s.since)
			return
		}
		out = append(out, tracing.Wait{Reason: reason, Since: s.since})
	}
	add(scopeHoldKey(store.ScopeRef{Tenant: rec.Tenant}), store.WaitingReasonTenantQuota)
	if rec.Project != "" {
		add(scopeHoldKey(store.ScopeRef{Tenant: rec.Tenant, Project: rec.Project}), store.WaitingReasonTenantQuota)
	}
	add(modelHoldKey(rec.RequestedModel), store.WaitingReasonProviderQuota)
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
