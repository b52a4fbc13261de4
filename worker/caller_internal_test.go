package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// memCalls is an in-memory callStore: StoreResult fails with errDown its
// first failResults times; the writes are recorded.
type memCalls struct {
	mu          sync.Mutex
	failResults int
	results     []store.Result
	released    int
}

func (s *memCalls) StoreResult(_ context.Context, _ store.Key, r store.Result) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failResults > 0 {
		s.failResults--
		return false, errDown
	}
	s.results = append(s.results, r)
	return true, nil
}

func (s *memCalls) Release(context.Context, store.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released++
	return nil
}

func (s *memCalls) MarkCalling(context.Context, store.Lease, store.PolicyState) (int, error) {
	return 1, nil
}
func (s *memCalls) MarkRetrying(context.Context, store.Lease, store.PolicyState, string, string) error {
	return nil
}
func (s *memCalls) EndAttempt(context.Context, store.Key, store.Answer) error          { return nil }
func (s *memCalls) MarkFailed(context.Context, store.Lease, int, string, string) error { return nil }
func (s *memCalls) MarkExpired(context.Context, store.Lease, string) error             { return nil }

// poolless are the lanes of models without pools, for the caller's paths
// that reach no lane (a test that reached one would panic on the nil
// interface).
type poolless struct{ callLanes }

func (poolless) priced(*job, string) llmq.Model        { return llmq.Model{InputPricePer1M: 1} }
func (poolless) entryName(*job, string) string         { return "" }
func (poolless) pool(string) []PoolEntry               { return nil }
func (poolless) scopesOf(string, string) []*scopeQuota { return nil }
func (poolless) countScopes([]*scopeQuota, Reply)      {}

// registry records the jobs registered for their leases.
type registry struct {
	mu         sync.Mutex
	registered int
	held       map[*job]bool
}

func (r *registry) register(p *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered++
	r.held[p] = true
}

func (r *registry) unregister(p *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, p)
}

type callerBundle struct {
	c       *caller
	st      *memCalls
	letters *memLetters
	leases  *registry
	clock   *clockwork.FakeClock
	woken   chan struct{}
}

func setupCaller(t *testing.T, cat llmq.Catalog) *callerBundle {
	t.Helper()
	est, err := shaping.NewEstimator(shaping.EstimatorConfig{})
	require.NoError(t, err)
	b := &callerBundle{st: &memCalls{}, letters: &memLetters{}, leases: &registry{held: map[*job]bool{}},
		clock: clockwork.NewFakeClock(), woken: make(chan struct{}, 16)}
	b.c, err = newCaller(callerConfig{Store: b.st, DeadLetters: b.letters, Lanes: poolless{}, Scopes: poolless{},
		Leases: b.leases, Estimator: est, Catalog: func() llmq.Catalog { return cat }, Wake: func() { b.woken <- struct{}{} },
		Metrics: newMetrics(prometheus.NewRegistry()), Clock: b.clock, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	b.c.begin(ctx, ctx)
	return b
}

func callRecord(id, model string) *store.JobRecord {
	return &store.JobRecord{ID: id, Tenant: "acme", RequestedModel: model, LeaseToken: 1,
		Body: json.RawMessage(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`)}
}

// held is a claimed job as start makes it, on ctx.
func (b *callerBundle) held(ctx context.Context, rec *store.JobRecord) *job {
	p := &job{rec: rec, lease: rec.Lease(), job: rec.Job(), models: []string{rec.RequestedModel},
		log: slog.New(slog.DiscardHandler), start: b.clock.Now()}
	p.ctx, p.cancel = context.WithCancelCause(ctx)
	return p
}

func TestCallerConfig(t *testing.T) {
	t.Parallel()
	_, err := newCaller(callerConfig{Store: &memCalls{}})
	require.ErrorContains(t, err, "Store, DeadLetters, Lanes, Scopes, Leases, Estimator and Metrics are required")
	b := setupCaller(t, llmq.Catalog{})
	require.Equal(t, StoreRetryMaxDefault, b.c.cfg.StoreRetryMax)
	require.Equal(t, noBudgets{}, b.c.budgets, "every call goes until a budget gate is set")
}

// TestCallerModelNotAllowed: a claimed job whose model the catalog does
// not allow (recorded by another path) is dead-lettered without a lane,
// and leaves: unregistered, not counted held, the scheduler woken.
func TestCallerModelNotAllowed(t *testing.T) {
	t.Parallel()
	b := setupCaller(t, llmq.Catalog{Models: map[string]llmq.Model{"allowed": {}}})
	b.c.start(callRecord("job-1", "other"), claimTimes{})
	select {
	case <-b.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler was not woken when the job left")
	}
	require.Len(t, b.letters.letters, 1)
	l := b.letters.letters[0]
	require.Equal(t, dlq.ReasonModelNotAllowed, l.Reason)
	require.Equal(t, "job-1", l.JobID)
	require.Contains(t, l.LastError, "is not one this service runs")
	require.Equal(t, 1, b.leases.registered)
	require.Empty(t, b.leases.held, "unregistered once it left")
	require.Zero(t, b.c.inFlight.Load())
}

// TestCallerStoresTheAnswerUntilItLands: a paid answer is stored however
// long the database refuses it, the writes tried again on the clock.
func TestCallerStoresTheAnswerUntilItLands(t *testing.T) {
	t.Parallel()
	b := setupCaller(t, llmq.Catalog{})
	b.st.failResults = 3
	p := b.held(context.Background(), callRecord("job-1", "m"))
	p.reply = Reply{Body: json.RawMessage(`{"ok":true}`), PromptTokens: 1000, CompletionTokens: 1000}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.c.succeed(p)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
		b.clock.Advance(b.c.cfg.StoreRetryMax)
	}
	<-done
	require.Len(t, b.st.results, 1)
	r := b.st.results[0]
	require.Equal(t, "m", r.UsedModel)
	require.InDelta(t, 0.001, r.CostUSD, 1e-9, "at the prices of the job's entry")
	require.Zero(t, p.writeFails)
}

// TestCallerLeave: a job whose wait shutdown cut is handed back (and
// counted); one whose lease was taken is left to its new holder.
func TestCallerLeave(t *testing.T) {
	t.Parallel()
	b := setupCaller(t, llmq.Catalog{})
	shut := b.held(context.Background(), callRecord("job-1", "m"))
	shut.cancel(errShutdown)
	b.c.leave(shut)
	require.Equal(t, 1, b.st.released)
	require.Equal(t, int64(1), b.c.handedBack.Load())

	lost := b.held(context.Background(), callRecord("job-2", "m"))
	lost.lose()
	b.c.leave(lost)
	require.Equal(t, 1, b.st.released, "not released: another worker holds it")
	require.Equal(t, int64(1), b.c.handedBack.Load())
}
