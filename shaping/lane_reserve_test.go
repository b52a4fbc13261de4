package shaping

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestLaneSharedQuotaAllOrNothing(t *testing.T) {
	t.Parallel()
	tenant, err := NewBucket(BucketConfig{Name: "tenant", Limit: 100}, t0)
	require.NoError(t, err)
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 1e6, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	_, err = lane.ReserveAt(t0, Request{PromptTokens: 150, MaxOutputTokens: 1, Quotas: []Quota{{Bucket: tenant, Unit: UnitTokens}}})
	require.ErrorIs(t, err, ErrTooLarge)
	s := lane.SnapshotAt(t0)
	require.InDelta(t, 60, s.Buckets[0].Level, 1e-9, "nothing reserved in the other buckets")
	require.InDelta(t, 100, tenant.LevelAt(t0), 1e-9)
}

// TestReserveDeadlineBoundary: a reservation ready exactly at the deadline
// is made; one ready a nanosecond after is refused with the exact wait and
// reserves nothing, on the fast path and on the general one.
func TestReserveDeadlineBoundary(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"fast", "general"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			cfg := LaneConfig{Name: "k/m", Strategy: StrategyShape, RPM: 60, TPM: 6000, WarmUp: -1, Start: StartEmpty, Clock: clockwork.NewFakeClockAt(t0)}
			if path == "general" {
				q, err := NewBucket(BucketConfig{Name: "q", Limit: 1e9}, t0)
				require.NoError(t, err)
				cfg.Quotas = []Quota{{Bucket: q}}
			}
			lane, err := NewLane(cfg)
			require.NoError(t, err)
			req := Request{PromptTokens: 50, MaxOutputTokens: 50} // 100 tokens: 1 s of TPM, as 1 request of RPM
			_, err = lane.ReserveBeforeAt(t0, req, sec(1).Add(-time.Nanosecond))
			require.Equal(t, &WaitError{Wait: time.Second, Deadline: sec(1).Add(-time.Nanosecond)}, err)
			s := lane.SnapshotAt(t0)
			require.Equal(t, []float64{0, 0}, []float64{s.Buckets[0].Level, s.Buckets[1].Level}, "a refused reservation takes nothing")
			r, err := lane.ReserveBeforeAt(t0, req, sec(1))
			require.NoError(t, err)
			require.Equal(t, sec(1), r.ReadyAt)
			require.Equal(t, 100, r.Tokens)
			s = lane.SnapshotAt(t0)
			require.Equal(t, []float64{-1, -100}, []float64{s.Buckets[0].Level, s.Buckets[1].Level})
		})
	}
}

// TestFastPathMatchesGeneral holds chargeOwnLocked, the hand-inlined path,
// against chargeLocked, the general path: two lanes (the twin with a quota
// bucket that never binds) run the same random sequence of operations, and
// after every step must agree exactly on errors, reservations and the state
// of their buckets and ledger. The configurations covered:
// docs/design/rate-limiting.md#testfastpathmatchesgeneral.
func TestFastPathMatchesGeneral(t *testing.T) {
	t.Parallel()
	seeds, steps := uint64(120), 250
	if testing.Short() {
		seeds = 30
	}
	var seen twinStats
	for seed := range seeds {
		runTwinLanes(t, seed, steps, &seen)
	}
	t.Logf("%+v", seen)
	// Every branch of the fast path is taken.
	require.Positive(t, seen.ready, "reservations ready at once")
	require.Positive(t, seen.queued, "reservations that wait")
	require.Positive(t, seen.paused, "reservations behind a 429 pause")
	require.Positive(t, seen.tooLarge)
	require.Positive(t, seen.late, "reservations refused by their deadline")
	require.Positive(t, seen.tpmFirst, "reservations with the TPM bucket first in id order")
	require.Positive(t, seen.origins, "reservations with buckets of different origins")
	require.Positive(t, seen.retimed, "queued reservations moved later by a correction")
}

// twinStats counts what a run of twin lanes went through.
type twinStats struct {
	ready, queued, paused, tooLarge, late, tpmFirst, origins, retimed int
}

// twin is one reservation or permit made on both lanes.
type twin struct {
	fast, gen   Reservation
	pFast, pGen *Permit
}

// runTwinLanes runs one random sequence.
func runTwinLanes(t *testing.T, seed uint64, steps int, seen *twinStats) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	pick := func(xs ...float64) float64 { return xs[rng.IntN(len(xs))] }
	cfg := LaneConfig{Name: "k/m", Concurrency: 4, Clock: clockwork.NewFakeClockAt(t0)}
	adaptive := rng.IntN(3) == 0
	if adaptive {
		cfg.Strategy = StrategyAdaptive
	} else {
		cfg.Strategy = StrategyShape
		cfg.RPM = pick(0.5, 6, 60, 600, 6000) // 0.5: no request fits
		cfg.TPM = pick(2000, 6000, 60_000, 600_000)
	}
	cfg.WarmUp = time.Duration(pick(-1, 0, float64(5*time.Second), float64(90*time.Second)))
	cfg.Start = BucketStart(rng.IntN(3))
	cfg.Settlement = Settlement(rng.IntN(2))
	cfg.PauseDefault = time.Duration(pick(0, float64(time.Second)))
	// The twin's quota is created before or after the lanes, so that it
	// sorts before, between or after their buckets.
	never := func() Quota {
		b, err := NewBucket(BucketConfig{Name: "never", Limit: 1e15}, t0)
		require.NoError(t, err)
		return Quota{Bucket: b, Unit: UnitRequests}
	}
	var quota Quota
	if rng.IntN(2) == 0 {
		quota = never()
	}
	fast, err := NewLane(cfg)
	require.NoError(t, err)
	if quota.Bucket == nil {
		quota = never()
	}
	cfg.Quotas = []Quota{quota}
	gen, err := NewLane(cfg)
	require.NoError(t, err)

	now := t0
	if adaptive {
		// Learn both quotas first, in either order and maybe apart in time,
		// so the buckets' ids and origins differ. (Before both exist, the
		// lanes would not be twins: a reservation on the quota bucket alone
		// counts in the ledger when it is cancelled, an empty one does not.)
		hs := []RateLimitHeaders{
			{LimitRequests: pick(6, 60, 600), HasLimitRequests: true},
			{LimitTokens: pick(1000, 6000, 60_000), HasLimitTokens: true},
		}
		first := rng.IntN(2)
		for i := range 2 {
			h := hs[(first+i)%2]
			fast.ObserveAt(now, h)
			gen.ObserveAt(now, h)
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
		}
	}
	var queued, sent []*twin
	take := func(list *[]*twin) *twin {
		i := rng.IntN(len(*list))
		tw := (*list)[i]
		*list = append((*list)[:i], (*list)[i+1:]...)
		return tw
	}
	headers := func() RateLimitHeaders {
		var h RateLimitHeaders
		if rng.IntN(4) == 0 {
			h.LimitRequests, h.HasLimitRequests = pick(3, 60, 600), rng.IntN(2) == 0
			h.LimitTokens, h.HasLimitTokens = pick(1000, 6000, 60_000), rng.IntN(2) == 0
		}
		if rng.IntN(2) == 0 {
			h.RemainingRequests, h.HasRemainingRequests = float64(rng.IntN(60)), true
		}
		if rng.IntN(2) == 0 {
			h.RemainingTokens, h.HasRemainingTokens = float64(rng.IntN(6000)), true
		}
		if rng.IntN(3) == 0 {
			h.RetryAfter, h.HasRetryAfter = time.Duration(rng.IntN(5000))*time.Millisecond, true
		}
		return h
	}
	for step := range steps {
		at := func(what string) string { return fmt.Sprintf("seed %d step %d (%s)", seed, step, what) }
		switch r := rng.IntN(100); {
		case r < 2:
			now = now.Add(time.Duration(30+rng.IntN(60)) * time.Minute)
		case r < 30:
			now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		}
		switch op := rng.IntN(100); {
		case op < 40:
			req := Request{PromptTokens: rng.IntN(1500) - 10, MaxOutputTokens: int(pick(0, 1, 200, 2000))}
			if rng.IntN(50) == 0 {
				req.PromptTokens = 1 << 20 // too large
			}
			var deadline time.Time
			if rng.IntN(2) == 0 {
				deadline = now.Add(time.Duration(rng.Int64N(int64(90 * time.Second))))
			}
			if fast.tpm.id < fast.rpm.id {
				seen.tpmFirst++
			}
			if fast.tpm.origin != fast.rpm.origin {
				seen.origins++
			}
			rf, errF := fast.ReserveBeforeAt(now, req, deadline)
			rg, errG := gen.ReserveBeforeAt(now, req, deadline)
			requireSameError(t, errF, errG, at("reserve"))
			var we *WaitError
			switch {
			case errors.Is(errF, ErrTooLarge):
				seen.tooLarge++
			case errors.As(errF, &we):
				seen.late++
			case errF != nil:
			case fast.pauseUntil.After(now):
				seen.paused++
			case rf.ReadyAt.After(now):
				seen.queued++
			default:
				seen.ready++
			}
			if errF == nil {
				requireSameReservation(t, &rf, &rg, quota.Bucket, at("reserve"))
				queued = append(queued, &twin{fast: rf, gen: rg})
			}
		case op < 50 && len(queued) > 0:
			tw := take(&queued)
			fast.CancelAt(now, &tw.fast)
			gen.CancelAt(now, &tw.gen)
		case op < 65 && len(queued) > 0:
			tw := take(&queued)
			require.Equal(t, fast.TryAcquireSlot(), gen.TryAcquireSlot(), at("slot"))
			tw.pFast, tw.pGen = fast.SendAt(now, tw.fast), gen.SendAt(now, tw.gen)
			sent = append(sent, tw)
		case op < 80 && len(sent) > 0:
			tw := take(&sent)
			o := Outcome{Latency: time.Duration(rng.IntN(3000)) * time.Millisecond, Headers: headers()}
			switch rng.IntN(4) {
			case 0:
				o.RateLimited = true
			case 1, 2:
				o.PromptTokens, o.CompletionTokens = rng.IntN(3000), rng.IntN(3000)
			}
			requireSameError(t, tw.pFast.DoneAt(now, o), tw.pGen.DoneAt(now, o), at("done"))
		case op < 90:
			h := headers()
			fast.ObserveAt(now, h)
			gen.ObserveAt(now, h)
		default:
			fast.TickAt(now)
			gen.TickAt(now)
		}
		for _, tw := range queued {
			ready := fast.ReadyAt(&tw.fast)
			require.Equal(t, ready, gen.ReadyAt(&tw.gen), at("ReadyAt"))
			if ready.After(tw.fast.ReadyAt) && !ready.Equal(fast.pauseUntil) {
				seen.retimed++
			}
		}
		requireSameLaneState(t, fast, gen, at("state"))
	}
}

func requireSameError(t *testing.T, fast, gen error, msg string) {
	t.Helper()
	if fast == nil || gen == nil {
		require.Equal(t, fast == nil, gen == nil, "%s: fast %v, general %v", msg, fast, gen)
		return
	}
	require.Equal(t, fast.Error(), gen.Error(), msg)
	require.Equal(t, errors.Is(fast, ErrTooLarge), errors.Is(gen, ErrTooLarge), msg)
	var wf, wg *WaitError
	require.Equal(t, errors.As(fast, &wf), errors.As(gen, &wg), msg)
	if wf != nil {
		require.Equal(t, *wf, *wg, msg)
	}
}

// requireSameReservation compares a fast-path reservation with the twin's,
// leaving out the twin's claim on its extra quota bucket.
func requireSameReservation(t *testing.T, fast, gen *Reservation, extra *Bucket, msg string) {
	t.Helper()
	require.Equal(t, fast.ReadyAt, gen.ReadyAt, msg)
	require.Equal(t, fast.Tokens, gen.Tokens, msg)
	require.Equal(t, fast.pace, gen.pace, msg+": paced")
	type claim struct {
		bucket  string
		tokens  float64
		readyAt time.Time
		share   float64
		ticket  float64
		fixes   uint64
	}
	claims := func(r *Reservation, skip *Bucket) []claim {
		var out []claim
		for _, cs := range r.lists() {
			for _, c := range cs {
				if c.bucket != skip {
					out = append(out, claim{c.bucket.name, c.Tokens, c.ReadyAt, c.share, c.ticket, c.fixes})
				}
			}
		}
		return out
	}
	require.Equal(t, claims(fast, nil), claims(gen, extra), msg)
}

// bucketState is every field of a bucket that admission reads or writes.
type bucketState struct {
	name                                         string
	origin                                       time.Time
	rate, warm, capacity, level, last, lastEvent float64
	credit, floor                                float64
	fixes, floorFixes                            uint64
}

func stateOf(b *Bucket) (s bucketState, ok bool) {
	if b == nil {
		return s, false
	}
	s = bucketState{
		name: b.name, origin: b.origin, rate: b.rate, warm: b.warm, capacity: b.capacity,
		level: b.level, last: b.last, lastEvent: b.lastEvent, credit: b.credit, floor: b.floor, fixes: b.fixes,
		floorFixes: b.floorFixes,
	}
	return s, true
}

func requireSameLaneState(t *testing.T, fast, gen *Lane, msg string) {
	t.Helper()
	for _, pair := range [][2]*Bucket{{fast.rpm, gen.rpm}, {fast.tpm, gen.tpm}} {
		sf, okF := stateOf(pair[0])
		sg, okG := stateOf(pair[1])
		require.Equal(t, okF, okG, msg)
		if sf != sg {
			require.Equal(t, sf, sg, msg)
		}
	}
	ledger := func(l *Lane) [9]any {
		return [9]any{l.resReq, l.resTok, l.canReq, l.canTok, l.sentReq, l.sentTok, l.refTok, l.pauseUntil, l.limitsAt}
	}
	require.Equal(t, ledger(fast), ledger(gen), msg)
	require.Equal(t, fast.slots.Limit(), gen.slots.Limit(), msg)
}

// TestLaneQuotaCharges: a quota bucket charges 1 per request or the
// request's tokens; one bucket named twice (the lane's and the request's)
// is charged once for both, and settlement corrects only the tokens.
func TestLaneQuotaCharges(t *testing.T) {
	t.Parallel()
	tenant, err := NewBucket(BucketConfig{Name: "tenant", Limit: 6e5}, t0)
	require.NoError(t, err)
	keyReqs, err := NewBucket(BucketConfig{Name: "key", Limit: 100}, t0)
	require.NoError(t, err)
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6e5, WarmUp: -1, MinInterval: -1,
		Quotas: []Quota{{Bucket: tenant, Unit: UnitTokens}, {Bucket: keyReqs, Unit: UnitRequests}}, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r, err := lane.ReserveAt(t0, Request{PromptTokens: 100, MaxOutputTokens: 100, Quotas: []Quota{{Bucket: tenant, Unit: UnitRequests}}})
	require.NoError(t, err)
	require.Equal(t, 4, r.n+len(r.extra), "rpm, tpm, tenant (merged), key")
	require.InDelta(t, 6e5-201, tenant.LevelAt(t0), 1e-9)
	require.InDelta(t, 99, keyReqs.LevelAt(t0), 1e-9)
	p := lane.SendAt(t0, r)
	require.NoError(t, p.DoneAt(t0, Outcome{PromptTokens: 100, CompletionTokens: 20}))
	require.InDelta(t, 6e5-121, tenant.LevelAt(t0), 1e-9, "80 unused tokens back, the request stays")
	require.InDelta(t, 99, keyReqs.LevelAt(t0), 1e-9)
	s := lane.SnapshotAt(t0)
	require.Equal(t, []BucketSnapshot{
		{Name: "rpm", Level: 59, Capacity: 60, Limit: 60},
		{Name: "tpm", Level: 6e5 - 120, Capacity: 6e5, Limit: 6e5},
		{Name: "tenant", Level: 6e5 - 121, Capacity: 6e5, Limit: 6e5},
		{Name: "key", Level: 99, Capacity: 100, Limit: 100},
	}, s.Buckets)

	// More quotas than a Reservation holds inline; Cancel gives all back.
	extra := []Quota{{Bucket: keyReqs}, {Bucket: tenant}}
	for range 6 {
		b, err := NewBucket(BucketConfig{Limit: 10}, t0)
		require.NoError(t, err)
		extra = append(extra, Quota{Bucket: b, Unit: UnitTokens})
	}
	r, err = lane.ReserveAt(t0, Request{PromptTokens: 5, MaxOutputTokens: 5, Quotas: extra})
	require.NoError(t, err)
	require.Equal(t, maxInline, r.n)
	require.Len(t, r.extra, 4)
	require.InDelta(t, 0, extra[4].Bucket.LevelAt(t0), 1e-9)
	lane.CancelAt(t0, &r)
	require.InDelta(t, 10, extra[4].Bucket.LevelAt(t0), 1e-9)
	require.InDelta(t, 6e5-121, tenant.LevelAt(t0), 1e-9)
	require.InDelta(t, 99, keyReqs.LevelAt(t0), 1e-9)
}

// TestLaneReserveTokens: a request reserves its prompt plus its max output,
// the lane's DefaultMaxOutput when it sets none; a negative prompt counts 0.
func TestLaneReserveTokens(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 1e6, DefaultMaxOutput: 50, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	for _, tc := range []struct {
		req    Request
		tokens int
	}{
		{Request{PromptTokens: 10, MaxOutputTokens: 1}, 11},
		{Request{PromptTokens: 10}, 60},
		{Request{PromptTokens: 10, MaxOutputTokens: -5}, 60},
		{Request{PromptTokens: -3, MaxOutputTokens: 7}, 7},
		{Request{PromptTokens: 10, N: 3}, 10 + 3*50},                // n choices, each up to the default output
		{Request{PromptTokens: 10, MaxOutputTokens: 90, N: 3}, 100}, // a max output set already counts n
		{Request{PromptTokens: 10, N: -2}, 60},
	} {
		r, err := lane.ReserveAt(t0, tc.req)
		require.NoError(t, err)
		require.Equal(t, tc.tokens, r.Tokens, "%+v", tc.req)
		require.Equal(t, float64(tc.tokens), r.claims[0].Tokens)
	}
	retry, err := NewLane(LaneConfig{Strategy: StrategyRetry, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r, err := retry.ReserveAt(sec(1), Request{PromptTokens: 10})
	require.NoError(t, err)
	require.Equal(t, Reservation{ReadyAt: sec(1), Tokens: 10 + LaneMaxOutputDefault, prompt: 10}, r, "retry reserves nowhere")
}

// TestCancelTwiceCountsOnce: a reservation cancelled twice is given back
// once, in the buckets and in the lane's ledger of what it cancelled (which
// the calibration from headers subtracts from what it reserved).
func TestCancelTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, WarmUp: -1, MinInterval: -1,
		Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r, err := l.ReserveAt(t0, Request{PromptTokens: 100, MaxOutputTokens: 100})
	require.NoError(t, err)
	l.CancelAt(t0, &r)
	l.CancelAt(t0, &r)
	require.Equal(t, [2]float64{1, 200}, [2]float64{l.canReq, l.canTok})
	require.Equal(t, []BucketSnapshot{{Name: "rpm", Level: 600, Capacity: 600, Limit: 600},
		{Name: "tpm", Level: 60000, Capacity: 60000, Limit: 60000}}, l.SnapshotAt(t0).Buckets)
}
