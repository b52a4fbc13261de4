package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// callStore is what the call runner needs of the job store ([JobStore]):
// the holder's fenced writes and the result. One that is a [ChunkStore]
// too keeps the chunks of a streamed call (stream.go).
type callStore interface {
	MarkCalling(ctx context.Context, l store.Lease, st store.PolicyState) (attempts int, err error)
	MarkRetrying(ctx context.Context, l store.Lease, st store.PolicyState, code, msg string) error
	Release(ctx context.Context, l store.Lease) error
	StoreResult(ctx context.Context, k store.Key, r store.Result) (stored bool, err error)
	EndAttempt(ctx context.Context, k store.Key, a store.Answer) error
	MarkFailed(ctx context.Context, l store.Lease, status int, code, msg string) error
	MarkExpired(ctx context.Context, l store.Lease, why string) error
}

// callLanes are the lanes a job is admitted and called in, and the pools
// of keys that choose among a model's lanes (lanes.go, pool.go).
type callLanes interface {
	lane(model string) *lane
	laneAt(model string, i int) *lane
	unboundOf(model string) *lane
	pool(model string) []PoolEntry
	pickEntry(p *job, model string) int
	nextEntry(p *job, model string) int
	entryName(p *job, model string) string
	priced(p *job, model string) llmq.Model
}

// callScopes are the tenants' and projects' quota layers of a job
// (tenantquota.go) and their counts (scopemetrics.go).
type callScopes interface {
	scopesOf(tenant, project string) []*scopeQuota
	countScopes(scs []*scopeQuota, reply Reply)
}

// callBudgets reserve the price of a call on the job's budgets before it
// is made and settle it after (budget.go).
type callBudgets interface {
	gate(p *job, model string, body json.RawMessage) (out json.RawMessage, ev event, stay, proceed bool)
	end(p *job, model string, reply *Reply)
}

// jobRegistry holds the jobs whose leases are renewed (lease.go).
type jobRegistry interface {
	register(p *job)
	unregister(p *job)
}

// callerConfig configures a caller.
type callerConfig struct {
	Store       callStore    // required
	DeadLetters DeadLetterer // required
	Lanes       callLanes    // required
	Scopes      callScopes   // required
	Leases      jobRegistry  // required
	// Estimator estimates the bodies recorded without an estimate and
	// learns from the answers. Required.
	Estimator *shaping.Estimator
	// Catalog is the catalog in force (the models kept as data change it).
	Catalog func() llmq.Catalog
	// Chunks, when set, takes the chunks of streamed calls (stream.go).
	Chunks ChunkStore
	// Policy decides what comes of each step (policy.go); RetryBudget is
	// the budget of retries every job shares (nil: none).
	Policy      policy
	RetryBudget *RetryBudget
	// MaxRetryAfter caps a Retry-After for the lane's pause (Config's
	// Backoff.MaxRetryAfter); StoreRetryMax caps the pause between two
	// tries of a write (0: StoreRetryMaxDefault).
	MaxRetryAfter, StoreRetryMax time.Duration
	// Holds are the scheduler's holds, for the jobs' traces (nil: none).
	Holds *holdLog
	// TenantLabel is a tenant's metric label (nil: the tenant).
	TenantLabel func(tenant string) string
	// Wake is told when a job leaves or an answer may have widened a
	// lane (nil: none).
	Wake func()
	// Routed is told when a job with a route ended (Config.Routed; nil:
	// none).
	Routed  func()
	Metrics *metrics // required
	Clock   clockwork.Clock
	Log     *slog.Logger
}

func (c callerConfig) withDefaults() callerConfig {
	if c.Catalog == nil {
		c.Catalog = zeroCatalog
	}
	if c.StoreRetryMax <= 0 {
		c.StoreRetryMax = StoreRetryMaxDefault
	}
	if c.Holds == nil {
		c.Holds = &holdLog{}
	}
	if c.TenantLabel == nil {
		c.TenantLabel = func(t string) string { return t }
	}
	if c.Wake == nil {
		c.Wake = func() {}
	}
	if c.Routed == nil {
		c.Routed = func() {}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c callerConfig) validate() error {
	if c.Store == nil || c.DeadLetters == nil || c.Lanes == nil || c.Scopes == nil || c.Leases == nil ||
		c.Estimator == nil || c.Metrics == nil {
		return errors.New("worker: caller: Store, DeadLetters, Lanes, Scopes, Leases, Estimator and Metrics are required")
	}
	return nil
}

// caller runs each claimed job through the pipeline (run.go): admission,
// the call, the policy's decisions, and the job's last write. Each job
// runs in a goroutine of its own from start until it leaves.
type caller struct {
	cfg     callerConfig
	budgets callBudgets
	// policyMu guards the retry budget and the jitter source, which every
	// job's decisions share.
	policyMu sync.Mutex
	rng      *rand.Rand
	// unserved are the fallback models the provider answered 404 for.
	unserved unservedModels
	// stopCtx ends when Stop begins (jobs not calling are handed back);
	// workCtx, its parent, when its grace period ends (calls are cut).
	stopCtx, workCtx context.Context
	// inFlight counts the jobs held (claimed, not yet finished);
	// handedBack the jobs released to queued by the shutdown.
	inFlight   atomic.Int64
	handedBack atomic.Int64
	runners    sync.WaitGroup
}

func newCaller(cfg callerConfig) (*caller, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &caller{cfg: cfg, budgets: noBudgets{}, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}, nil
}

// begin sets the contexts of the jobs started from now: stop ends their
// waits, work their calls.
func (c *caller) begin(stop, work context.Context) { c.stopCtx, c.workCtx = stop, work }

// writeOut is a write of p's that the grace period of shutdown bounds
// (durable, on the work context).
func (c *caller) writeOut(p *job, what string, write func(ctx context.Context) error) error {
	return c.durable(p, c.workCtx, what, write)
}

// noBudgets is the budgets of a worker that keeps none: every call goes.
type noBudgets struct{}

func (noBudgets) gate(_ *job, _ string, body json.RawMessage) (json.RawMessage, event, bool, bool) {
	return body, event{}, false, true
}
func (noBudgets) end(*job, string, *Reply) {}
