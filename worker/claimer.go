package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// claimStore is what the scheduler needs of the job store ([JobStore]).
type claimStore interface {
	QueuedModels(ctx context.Context) ([]string, error)
	ClaimWithin(ctx context.Context, r store.ClaimRequest) ([]*store.JobRecord, bool, error)
	ReleaseClaim(ctx context.Context, u *store.UnansweredClaimError) ([]store.Key, error)
	Release(ctx context.Context, l store.Lease) error
	SetModelState(ctx context.Context, st store.ModelState) error
	SetScopeStates(ctx context.Context, worker string, held, freed []store.ScopeRef) error
}

// claimLanes are a model's lanes, and the count of its jobs bound for no
// entry of its pool yet (lanes.go, pool.go).
type claimLanes interface {
	lanesOf(model string) []*lane
	unboundOf(model string) *lane
}

// claimRooms are the tenants' and projects' rooms a claim keeps to
// (tenantquota.go).
type claimRooms interface {
	claimScopes(now time.Time, typical shaping.Request, held map[store.ScopeRef]bool) (map[string]int, []store.ScopeRef, map[store.ScopeRef]int)
}

// claimerConfig configures a claimer.
type claimerConfig struct {
	Store  claimStore // required
	Lanes  claimLanes // required
	Scopes claimRooms // required
	// Holds are the scheduler's holds, for the jobs' traces (nil: kept
	// for none).
	Holds *holdLog
	// Owner and Lease are what the claims take the jobs as; Catalog,
	// MaxInFlight, ClaimHorizon, FallbackMaxWait and FallbackOn are
	// Config's, with their defaults.
	Owner                         string
	Lease                         time.Duration
	Catalog                       func() llmq.Catalog
	MaxInFlight                   int
	ClaimHorizon, FallbackMaxWait time.Duration
	FallbackOn                    []FallbackTrigger
	// Router, when set, holds deferrable jobs for the batch lane; Drain
	// is the drain estimate it decides on. Drain is required with Router.
	Router Router
	Drain  func() time.Duration
	// Held is the number of jobs held (claimed, not finished). Required.
	Held func() int64
	// Claimed is told of the jobs claimed (the ingest window follows
	// them); Start runs each, with when its claim was woken, sent and
	// answered (nil: not told; Start is required).
	Claimed func(recs []*store.JobRecord)
	Start   func(rec *store.JobRecord, at claimTimes)
	Clock   clockwork.Clock
	Log     *slog.Logger
}

func (c claimerConfig) withDefaults() claimerConfig {
	if c.Catalog == nil {
		c.Catalog = zeroCatalog
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = MaxInFlightDefault
	}
	if c.ClaimHorizon <= 0 {
		c.ClaimHorizon = ClaimHorizonDefault
	}
	if c.Lease <= 0 {
		c.Lease = LeaseDefault
	}
	if c.Holds == nil {
		c.Holds = &holdLog{}
	}
	if c.Claimed == nil {
		c.Claimed = func([]*store.JobRecord) {}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c claimerConfig) validate() error {
	var errs []error
	if c.Store == nil || c.Lanes == nil || c.Scopes == nil || c.Held == nil || c.Start == nil {
		errs = append(errs, errors.New("worker: claimer: Store, Lanes, Scopes, Held and Start are required"))
	}
	if c.Router != nil && c.Drain == nil {
		errs = append(errs, errors.New("worker: claimer: Drain is required with Router"))
	}
	return errors.Join(errs...)
}

// claimer is the schedule loop (schedule.go): it claims, per model with
// queued jobs, what the model's lanes can admit soon, and starts the jobs.
type claimer struct {
	cfg claimerConfig
	// wake tells the loop that room or work appeared.
	wake chan struct{}
	// newModels carries the models of freshly queued jobs to the loop;
	// woke is the first wake-up asked since its last round began.
	modelsMu  sync.Mutex
	newModels map[string]bool
	woke      claimWake
	// reread makes the next round read the queued models again (the
	// queued listener listens again: what was recorded meanwhile was not
	// announced).
	reread  atomic.Bool
	running sync.WaitGroup
	// unanswered are the claims whose answer was lost, their jobs to hand
	// back once the database answers (the loop's alone; at most
	// unansweredKept, the oldest dropped: the reaper has them when their
	// lease ends).
	unanswered []*store.UnansweredClaimError
}

// unansweredKept is the most unanswered claims a claimer keeps to hand
// back: an outage fails most claims before they are sent, and those wrote
// nothing.
const unansweredKept = 64

func newClaimer(cfg claimerConfig) (*claimer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &claimer{cfg: cfg, wake: make(chan struct{}, 1), newModels: map[string]bool{}}, nil
}

// start runs the schedule loop until ctx ends (Stop begins).
func (c *claimer) start(ctx context.Context) {
	c.running.Add(1)
	go c.scheduleLoop(ctx)
}

// wait returns once the loop has ended.
func (c *claimer) wait() { c.running.Wait() }

// poke wakes the loop (it looks again at every model).
func (c *claimer) poke() { c.pokeBy(wokenByOther) }

// pokeBy is poke, for the reason by (wokenByNotify, ...).
func (c *claimer) pokeBy(by string) {
	c.modelsMu.Lock()
	if c.woke.at.IsZero() {
		c.woke = claimWake{at: c.cfg.Clock.Now(), by: by}
	}
	c.modelsMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// learnModel tells the loop about a model with new queued jobs.
func (c *claimer) learnModel(model string) {
	c.modelsMu.Lock()
	c.newModels[model] = true
	c.modelsMu.Unlock()
}

// heard claims for model at once: jobs were recorded elsewhere.
func (c *claimer) heard(model string) {
	c.learnModel(model)
	c.pokeBy(wokenByNotify)
}

// rereadModels makes the next round read the models with queued jobs from
// Postgres, and wakes it.
func (c *claimer) rereadModels() {
	c.reread.Store(true)
	c.poke()
}
