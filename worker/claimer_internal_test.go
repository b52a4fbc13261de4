package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// memClaims is an in-memory claimStore: each claim takes up to its limit
// of the model's queued records, and the requests are recorded.
type memClaims struct {
	queued   map[string][]*store.JobRecord
	requests []store.ClaimRequest
	states   []store.ModelState
}

func (s *memClaims) QueuedModels(context.Context) ([]string, error) { return nil, nil }
func (s *memClaims) ClaimWithin(_ context.Context, r store.ClaimRequest) ([]*store.JobRecord, bool, error) {
	s.requests = append(s.requests, r)
	recs := s.queued[r.Model][:min(r.Limit, len(s.queued[r.Model]))]
	s.queued[r.Model] = s.queued[r.Model][len(recs):]
	return recs, false, nil
}
func (s *memClaims) ReleaseClaim(context.Context, *store.UnansweredClaimError) ([]store.Key, error) {
	return nil, nil
}
func (s *memClaims) Release(context.Context, store.Lease) error { return nil }
func (s *memClaims) SetModelState(_ context.Context, st store.ModelState) error {
	s.states = append(s.states, st)
	return nil
}
func (s *memClaims) SetScopeStates(context.Context, string, []store.ScopeRef, []store.ScopeRef) error {
	return nil
}

// holdNever is a Router that never holds.
type holdNever struct{}

func (holdNever) Hold(time.Time, time.Duration) BatchHold { return BatchHold{} }

func TestClaimerConfig(t *testing.T) {
	t.Parallel()
	_, err := newClaimer(claimerConfig{})
	require.ErrorContains(t, err, "Store, Lanes, Scopes, Held and Start are required")
	ss, err := newScopes(scopesConfig{Tenants: func() llmq.Tenants { return nil }, Metrics: newScopeMetrics(prometheus.NewRegistry())})
	require.NoError(t, err)
	_, err = newClaimer(claimerConfig{Store: &memClaims{}, Lanes: &laneSet{}, Scopes: ss, Held: func() int64 { return 0 },
		Start: func(*store.JobRecord, claimTimes) {}, Router: holdNever{}})
	require.ErrorContains(t, err, "Drain is required with Router")
}

// TestClaimerModelNotAllowed: the jobs of a model the catalog does not
// allow (recorded by another path) are claimed, up to the room the held
// jobs leave, without a lane, and started (to be dead-lettered); the
// model is forgotten once a claim comes back short.
func TestClaimerModelNotAllowed(t *testing.T) {
	t.Parallel()
	st := &memClaims{queued: map[string][]*store.JobRecord{"b": {{ID: "1"}, {ID: "2"}, {ID: "3"}}}}
	ss, err := newScopes(scopesConfig{Tenants: func() llmq.Tenants { return nil }, Metrics: newScopeMetrics(prometheus.NewRegistry())})
	require.NoError(t, err)
	var started, claimed []string
	c, err := newClaimer(claimerConfig{Store: st, Lanes: &laneSet{}, Scopes: ss, Owner: "w1", MaxInFlight: 4,
		Catalog: func() llmq.Catalog { return llmq.Catalog{Models: map[string]llmq.Model{"a": {}}} }, Held: func() int64 { return 2 },
		Claimed: func(recs []*store.JobRecord) {
			for _, r := range recs {
				claimed = append(claimed, r.ID)
			}
		},
		Start: func(r *store.JobRecord, _ claimTimes) { started = append(started, r.ID) },
		Clock: clockwork.NewFakeClock(), Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	c.learnModel("b")
	s := &scheduler{models: map[string]bool{}, notes: map[string]modelNote{}, scopeNotes: map[store.ScopeRef]time.Time{}}
	c.scheduleRound(context.Background(), s)
	require.Equal(t, []string{"1", "2"}, started, "room for 2 besides the 2 held")
	require.Equal(t, started, claimed)
	require.Equal(t, []store.ClaimRequest{{Model: "b", Limit: 2, Owner: "w1", Lease: LeaseDefault}}, st.requests)
	require.True(t, s.models["b"], "a full claim: more may be queued")
	require.Empty(t, st.states, "no model state for a model without a lane")
}

// TestClaimerQuickCanary: a lane that asks for quick jobs to send up to
// its canary gets, before the round's claim, the smallest queued jobs no
// larger than its typical request (as many as asked, in size order, the
// typical request's tokens each as the room); the ask is answered once.
func TestClaimerQuickCanary(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cat := llmq.Catalog{Models: map[string]llmq.Model{"m": {RPM: 600, TPM: 150_000}}}
	ls := startedLaneSet(t, clock, cat)
	l := ls.lane("m")
	l.observe(shaping.Request{PromptTokens: 24, MaxOutputTokens: 120})
	st := &memClaims{queued: map[string][]*store.JobRecord{"m": {{ID: "1"}, {ID: "2"}, {ID: "3"}}}}
	c, err := newClaimer(claimerConfig{Store: st, Lanes: ls, Scopes: openClaimScopes(t), Owner: "w1",
		Catalog: func() llmq.Catalog { return cat }, Held: func() int64 { return 0 },
		Start: func(*store.JobRecord, claimTimes) {}, Clock: clock, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	s := &scheduler{models: map[string]bool{}, heldSince: map[string]time.Time{}, notes: map[string]modelNote{},
		scopeNotes: map[store.ScopeRef]time.Time{}}
	l.quickWanted.Store(2)
	c.learnModel("m")
	c.scheduleRound(context.Background(), s)
	require.GreaterOrEqual(t, len(st.requests), 1)
	require.Equal(t, store.ClaimRequest{Model: "m", Owner: "w1", Lease: LeaseDefault, Limit: 2, Order: quickOrder,
		TypicalTokens: 144, TokenRoom: 288}, st.requests[0])
	require.Zero(t, l.quickWanted.Load())
	n := len(st.requests)
	c.learnModel("m")
	c.scheduleRound(context.Background(), s)
	for _, r := range st.requests[n:] {
		require.Nil(t, r.Order, "no quick claim unasked")
	}
}
