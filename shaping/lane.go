package shaping

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// Lane is the admission control of one (API key, model) pair: buckets,
// concurrency limiter, pacer, adaptive controller and header calibration, in
// the order docs/design/rate-limiting.md gives. It is safe for concurrent
// use. The core methods take the time explicitly and never block; [Lane.Admit]
// and [Permit.Done] wait on the Clock. The files it spans:
// docs/design/rate-limiting.md#lane.
type Lane struct {
	cfg   LaneConfig
	clock clockwork.Clock
	slots *ConcurrencyLimiter
	pacer *Pacer

	// mu guards the fields below, and also the state of rpm and tpm: the
	// lane owns them (they are never shared and never leave the package),
	// every access to them holds mu, so the admission path does not take
	// their own locks. Quota buckets may be shared: they are locked, after
	// mu, in bucket id order.
	mu         sync.Mutex
	rpm, tpm   *Bucket
	ctrl       Controller
	pauseUntil time.Time
	// limitsAt is the send time of the response whose limit headers were
	// applied last; older responses' limits are stale.
	limitsAt time.Time
	// remainingAt is the same for remaining headers: an older one may
	// lower a level, never raise it.
	remainingAt time.Time
	// distrustUntil ends the minute after a 429 during which headers may
	// only lower the levels.
	distrustUntil time.Time
	// The provider as the lane learns it (lane_provider.go): rpmQ and tpmQ
	// are the provider's limits behind rpm and tpm; share is the part of
	// them the lane runs on.
	rpmQ, tpmQ view
	share      float64
	// peers is what the other replicas on the quota hold and know, as the
	// quota ledger showed it (SetPeersAt), newest last; peersKnown: it
	// has.
	peers      []peersAt
	peersKnown bool
	kind       ProviderKind
	shortAt    time.Time // when the lane learned a short bucket
	// shortSent is the send of the refusal it learned it from: the
	// answers to requests sent no later describe the provider before
	// the refusal's remaining, which the lane reads the headers against.
	shortSent time.Time
	probing   bool // a cold start's probe: no answer with headers yet
	// spread, in [0, 1), is the part of ShortBucket a probe on a share
	// waits (spreadProbeLocked), drawn from LaneConfig.Seed.
	spread      float64
	headersSeen bool
	// paceAll paces every send; otherwise only those that leave a bucket
	// with less than a second of refill.
	paceAll bool
	// trying: the lane tries a provider of unknown kind with a staged
	// burst, trials for requests and tokens (lane_trial.go); canaryOut: a
	// request past them is in flight.
	trying, canaryOut bool
	trials            [2]trial
	// learned: the TPM bucket was learned from 429s (lane_adaptive.go);
	// refusedAt is the reference of the next measure (a 429), refusedTaken
	// the tokens the provider had taken then and refusedTok1 those of the
	// refused request; reactedAt is the last 429 the lane learned from;
	// learnCeil is the ceiling the quota grows towards (a measure, or the
	// rate an episode began from) and learnLow the lowest limit the last
	// measure allowed (learnMeasured: there was one since the episode
	// began); takenHist holds the tokens taken, sampled at most once a
	// second, for the rate of the last learnWindow.
	learned                   bool
	refusedAt, reactedAt      time.Time
	refusedTaken, refusedTok1 float64
	learnCeil, learnLow       float64
	learnMeasured             bool
	takenHist                 [12]takenSample
	takenNext                 int
	// firstSent is the lane's first send while it learns its quota from
	// 429s; spreading: it spaces its sends over latency, an average of
	// its answers' (spreadLocked).
	firstSent time.Time
	spreading bool
	latency   time.Duration
	// wake, when not nil, is closed when a level is raised, to wake the
	// Admits waiting for their reservations.
	wake chan struct{}
	// ledger, for calibration: all-time sums of requests and tokens
	// reserved, cancelled, and sent.
	resReq, resTok, canReq, canTok, sentReq, sentTok float64
	// sends are the newest sends, a ring (sendNext the next to write;
	// sendCount of them from sendHead within SendSkew of the newest): the
	// requests sent within SendSkew before a send (skewLocked).
	sends                         [sendRing]sendMark
	sendNext, sendHead, sendCount int
	// refTok is the all-time sum of the tokens settlement found unused
	// (negative for overruns).
	refTok float64
	// refunds is the share of unused tokens the provider gives back, as
	// the headers show it (refundsKnown: they have; see refundsLocked and
	// refundShare), and lastTok the newest fresh TPM reading it is
	// measured from.
	refunds      float64
	refundsKnown bool
	lastTok      reading
	// rfdTok is the all-time sum of tokens of refused (429) requests whose
	// headers said the tokens remaining: the server did not charge them;
	// refusedTok is that of every refused request.
	rfdTok, refusedTok float64
	// sentAll and unusedAll are the all-time sums of the tokens sent and
	// of those settlement found unused, whatever the buckets (for a quota
	// learned from 429s).
	sentAll, unusedAll float64
	// conc is what the lane learned of the provider's calls at a time
	// (lane_concurrency.go).
	conc concurrencyCap

	admitted, rateLimited atomic.Uint64
}

// NewLane returns a lane created at cfg.Clock.Now().
func NewLane(cfg LaneConfig) (*Lane, error) {
	// Nothing configured of the provider: the lane starts slow
	// (lane_concurrency.go).
	unknown := cfg.Concurrency == 0 && cfg.RPM == 0 && cfg.TPM == 0 && cfg.Strategy != StrategyRetry
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	now := cfg.Clock.Now()
	l := &Lane{cfg: cfg, clock: cfg.Clock, pacer: NewPacer(max(0, cfg.MinInterval)), share: 1}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	l.spread = rand.New(rand.NewPCG(seed, 0)).Float64()
	l.setKindLocked(ProviderUnknown)
	warm := max(0, cfg.WarmUp)
	var err error
	switch cfg.Strategy {
	case StrategyRetry:
		l.slots = NewConcurrencyLimiter(math.MaxInt32)
		return l, nil
	}
	start := cfg.Start
	l.probing = cfg.ColdStart == ColdStartProbe
	if l.probing {
		start = StartEmpty
	}
	if cfg.RPM > 0 {
		if l.rpm, err = NewBucket(BucketConfig{Name: "rpm", Limit: cfg.RPM, WarmUp: warm, Start: start}, now); err != nil {
			return nil, err
		}
		l.rpmQ = view{limit: cfg.RPM, burst: cfg.RPM}
		if l.probing {
			l.startProbeLocked(now, l.rpm, &l.rpmQ, l.earlyTrial())
		}
	}
	if cfg.TPM > 0 && cfg.Strategy != StrategyRPM {
		if l.tpm, err = NewBucket(BucketConfig{Name: "tpm", Limit: cfg.TPM, WarmUp: warm, Start: start}, now); err != nil {
			return nil, err
		}
		l.tpmQ = view{limit: cfg.TPM, burst: cfg.TPM}
		if l.probing {
			l.startProbeLocked(now, l.tpm, &l.tpmQ, cfg.TPM)
		}
	}
	l.slots = NewConcurrencyLimiter(cfg.Concurrency)
	if cfg.Strategy == StrategyAdaptive {
		if err := l.initController(); err != nil {
			return nil, err
		}
	}
	if unknown {
		l.startSlowLocked()
	}
	return l, nil
}

// Strategy returns the lane's strategy.
func (l *Lane) Strategy() Strategy { return l.cfg.Strategy }

// Clock returns the lane's clock.
func (l *Lane) Clock() clockwork.Clock { return l.clock }

// TryAcquireSlot takes a concurrency slot if one is free.
func (l *Lane) TryAcquireSlot() bool { return l.slots.TryAcquire() }

// ReleaseSlot returns a slot taken by TryAcquireSlot for a request that will
// not be sent.
func (l *Lane) ReleaseSlot() { l.slots.Release() }

// PaceReservationAt books the send of r inside its slot and returns when it
// may go. It is paced only when the lane paces every send (the provider's
// kind is not yet known to be a minute bucket, or the lane is static) or r
// left a bucket with less than a second of refill: a burst the provider's
// bucket holds goes at once.
func (l *Lane) PaceReservationAt(now time.Time, r *Reservation) time.Time {
	if !r.pace {
		if r.canary {
			// It goes now, but takes a send's place: a short bucket it
			// overdraws refills it before the next paced send.
			l.pacer.ReserveAt(now)
		}
		return now
	}
	return l.pacer.ReserveAt(now)
}

// PausedUntil returns the end of the current 429 pause (zero if none).
func (l *Lane) PausedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pauseUntil
}

// Snapshot is a lane's state for metrics.
type Snapshot struct {
	Name             string
	Strategy         Strategy
	Buckets          []BucketSnapshot
	ConcurrencyLimit int
	InFlight         int
	Waiting          int
	PausedUntil      time.Time
	// State is the controller's state ("probing", "hold", "drain"), or "".
	State string
	// Provider is how the provider enforces its limits, as the lane has
	// told from the answers.
	Provider ProviderKind
	// Share is the part of the provider's quota the lane runs on.
	Share float64
	// Admitted counts permits issued; RateLimited counts 429 outcomes.
	Admitted, RateLimited uint64
}

// BucketSnapshot is one bucket's state.
type BucketSnapshot struct {
	Name                   string
	Level, Capacity, Limit float64
}

// SnapshotAt returns the lane's state at now.
func (l *Lane) SnapshotAt(now time.Time) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{
		Name: l.cfg.Name, Strategy: l.cfg.Strategy,
		ConcurrencyLimit: l.slots.Limit(), InFlight: l.slots.InFlight(), Waiting: l.slots.Waiting(),
		PausedUntil: l.pauseUntil, Admitted: l.admitted.Load(), RateLimited: l.rateLimited.Load(),
		Provider: l.kind, Share: l.share,
	}
	if st, ok := l.ctrl.(Stateful); ok {
		s.State = st.State()
	}
	add := func(b *Bucket) {
		s.Buckets = append(s.Buckets, BucketSnapshot{Name: b.Name(), Level: b.LevelAt(now), Capacity: b.Capacity(), Limit: b.Limit()})
	}
	for _, b := range []*Bucket{l.rpm, l.tpm} {
		if b != nil {
			add(b)
		}
	}
	for _, q := range l.cfg.Quotas {
		add(q.Bucket)
	}
	return s
}

// Snapshot is SnapshotAt on the lane's clock.
func (l *Lane) Snapshot() Snapshot { return l.SnapshotAt(l.clock.Now()) }
