package shaping

import (
	"container/heap"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
)

// This file is the deterministic simulation harness: a discrete-event loop on
// virtual time drives a Lane through its non-blocking core API (ReserveAt,
// TryAcquireSlot, PaceAt, SendAt, DoneAt) against an in-memory upstream with
// RPM and TPM buckets, saturation and 429s. No goroutines, no wall clock.

// upstreamConfig is the hidden server.
type upstreamConfig struct {
	RPM, TPM float64
	// StartEmpty starts the server's buckets at 0 instead of full.
	StartEmpty bool
	// Refund gives back unused max output after completion (DashScope's
	// "output settled"); false keeps prompt + max output (OpenAI).
	Refund bool
	// Headers sends x-ratelimit-* on every answer.
	Headers bool
	// ChargeRejected makes a rejected request use up quota too (down to
	// zero): "failed requests count"
	// (https://help.openai.com/en/articles/5955604).
	ChargeRejected bool
	// Saturation is the in-flight count above which time per token grows.
	Saturation int
	TTFT       time.Duration
	PerToken   time.Duration
}

type serverBucket struct {
	limit, level float64
	last         time.Time
}

func (b *serverBucket) refill(now time.Time) {
	if now.After(b.last) {
		b.level = min(b.limit, b.level+b.limit/60*now.Sub(b.last).Seconds())
		b.last = now
	}
}

// wait returns how long until n is available.
func (b *serverBucket) wait(n float64) time.Duration {
	if b.level >= n {
		return 0
	}
	return time.Duration(math.Ceil((n - b.level) / (b.limit / 60) * 1e9))
}

type upstream struct {
	cfg      upstreamConfig
	rpm, tpm serverBucket
	inFlight int
	// counters
	ok, limited, okLong    int
	okTokens               float64
	okLog                  []okEvent
	rejectReq, rejectToken int
}

type okEvent struct {
	at     time.Time
	tokens float64 // net tokens charged
}

func newUpstream(cfg upstreamConfig, now time.Time) *upstream {
	u := &upstream{cfg: cfg}
	u.rpm = serverBucket{limit: cfg.RPM, level: cfg.RPM, last: now}
	u.tpm = serverBucket{limit: cfg.TPM, level: cfg.TPM, last: now}
	if cfg.StartEmpty {
		u.rpm.level, u.tpm.level = 0, 0
	}
	return u
}

func (u *upstream) setLimits(now time.Time, rpm, tpm float64) {
	u.rpm.refill(now)
	u.tpm.refill(now)
	u.rpm.limit, u.tpm.limit = rpm, tpm
	u.rpm.level, u.tpm.level = min(u.rpm.level, rpm), min(u.tpm.level, tpm)
}

type simJob struct {
	prompt, maxOut, out int
	attempts            int
}

type answer struct {
	latency  time.Duration
	limited  bool
	headers  RateLimitHeaders
	charged  float64
	refund   float64
	outcome  Outcome
	finished bool
}

func (u *upstream) headers(h *RateLimitHeaders) {
	if !u.cfg.Headers {
		return
	}
	h.LimitRequests, h.HasLimitRequests = u.rpm.limit, true
	h.LimitTokens, h.HasLimitTokens = u.tpm.limit, true
	h.RemainingRequests, h.HasRemainingRequests = math.Floor(u.rpm.level), true
	h.RemainingTokens, h.HasRemainingTokens = math.Floor(u.tpm.level), true
}

// call admits or rejects a request arriving at now.
func (u *upstream) call(now time.Time, j *simJob) answer {
	u.rpm.refill(now)
	u.tpm.refill(now)
	cost := float64(j.prompt + j.maxOut)
	var a answer
	if u.rpm.level < 1 || u.tpm.level < cost {
		// Rejected requests count toward RPM.
		u.rpm.level = max(0, u.rpm.level-1)
		if u.cfg.ChargeRejected {
			u.tpm.level = max(0, u.tpm.level-cost)
		}
		u.limited++
		if u.tpm.level < cost {
			u.rejectToken++
		} else {
			u.rejectReq++
		}
		a.limited = true
		a.latency = 50 * time.Millisecond
		u.headers(&a.headers)
		a.headers.RetryAfter = max(u.rpm.wait(1), u.tpm.wait(cost))
		a.headers.HasRetryAfter = true
		a.outcome = Outcome{RateLimited: true, Latency: a.latency, Headers: a.headers}
		return a
	}
	u.rpm.level--
	u.tpm.level -= cost
	if j.maxOut >= 2000 {
		u.okLong++
	}
	u.inFlight++
	slow := 1.0
	if s := u.cfg.Saturation; s > 0 && u.inFlight > s {
		slow = float64(u.inFlight) / float64(s)
	}
	a.latency = u.cfg.TTFT + time.Duration(float64(u.cfg.PerToken)*float64(j.out)*slow)
	u.headers(&a.headers)
	a.charged = cost
	if u.cfg.Refund {
		a.refund = float64(j.maxOut - j.out)
	}
	u.okLog = append(u.okLog, okEvent{at: now, tokens: a.charged - a.refund})
	a.outcome = Outcome{PromptTokens: j.prompt, CompletionTokens: j.out, Latency: a.latency, Headers: a.headers}
	return a
}

func (u *upstream) finish(now time.Time, a answer) {
	u.inFlight--
	u.tpm.refill(now)
	u.tpm.level = min(u.tpm.limit, u.tpm.level+a.refund)
	u.ok++
	u.okTokens += a.charged - a.refund
}

// tokenRate returns the net tokens per minute of the successful requests the
// server admitted in [from, to).
func (u *upstream) tokenRate(from, to time.Time) float64 {
	var sum float64
	for _, e := range u.okLog {
		if !e.at.Before(from) && e.at.Before(to) {
			sum += e.tokens
		}
	}
	return sum / to.Sub(from).Minutes()
}

// ---- event loop ----

type evKind int

const (
	evArrive evKind = iota
	evReserve
	evReady
	evSend
	evDone
	evChange
)

type event struct {
	at   time.Time
	seq  int
	kind evKind
	w    *simWorker
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simWorker struct {
	job    *simJob
	res    Reservation
	permit *Permit
	ans    answer
}

type simConfig struct {
	lane     LaneConfig
	up       upstreamConfig
	workers  int
	arrivals float64 // jobs per second
	duration time.Duration
	seed     uint64
	// change, when set, is applied once at changeAt.
	changeAt time.Duration
	change   func(now time.Time, u *upstream)
}

type simResult struct {
	up        *upstream
	lane      *Lane
	start     time.Time
	tooLarge  int
	completed int
	backlog   int
}

func runSim(cfg simConfig) (*simResult, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(start)
	cfg.lane.Clock = clock
	lane, err := NewLane(cfg.lane)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 42))
	up := newUpstream(cfg.up, start)
	res := &simResult{up: up, lane: lane, start: start}
	end := start.Add(cfg.duration)

	var q eventQueue
	seq := 0
	push := func(at time.Time, k evKind, w *simWorker) {
		seq++
		heap.Push(&q, &event{at: at, seq: seq, kind: k, w: w})
	}
	var backlog []*simJob
	var idle []*simWorker
	var slotWait []*simWorker
	newJob := func() *simJob {
		if rng.Float64() < 0.2 { // long documents
			return &simJob{prompt: 4000 + rng.IntN(4000), maxOut: 2000, out: 500 + rng.IntN(1500)}
		}
		return &simJob{prompt: 100 + rng.IntN(300), maxOut: 300, out: 50 + rng.IntN(250)}
	}
	for range cfg.workers {
		idle = append(idle, &simWorker{})
	}
	push(start, evArrive, nil)
	if cfg.change != nil {
		push(start.Add(cfg.changeAt), evChange, nil)
	}
	dispatch := func(now time.Time) {
		for len(idle) > 0 && len(backlog) > 0 {
			w := idle[len(idle)-1]
			idle = idle[:len(idle)-1]
			w.job = backlog[0]
			backlog = backlog[1:]
			push(now, evReserve, w)
		}
	}
	toSlot := func(now time.Time, w *simWorker) {
		if p := lane.PausedUntil(); p.After(now) {
			push(p, evReady, w)
			return
		}
		if !lane.TryAcquireSlot() {
			slotWait = append(slotWait, w)
			return
		}
		push(lane.PaceAt(now), evSend, w)
	}
	wakeSlots := func(now time.Time) {
		for len(slotWait) > 0 {
			w := slotWait[0]
			if p := lane.PausedUntil(); p.After(now) {
				slotWait = slotWait[1:]
				push(p, evReady, w)
				continue
			}
			if !lane.TryAcquireSlot() {
				return
			}
			slotWait = slotWait[1:]
			push(lane.PaceAt(now), evSend, w)
		}
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(*event)
		if e.at.After(end) {
			break
		}
		now := e.at
		clock.Advance(now.Sub(clock.Now()))
		switch e.kind {
		case evArrive:
			backlog = append(backlog, newJob())
			dispatch(now)
			push(now.Add(time.Duration(float64(time.Second)/cfg.arrivals)), evArrive, nil)
		case evChange:
			cfg.change(now, up)
		case evReserve:
			lane.TickAt(now)
			wakeSlots(now)
			r, err := lane.ReserveAt(now, Request{PromptTokens: e.w.job.prompt, MaxOutputTokens: e.w.job.maxOut})
			if errors.Is(err, ErrTooLarge) {
				res.tooLarge++
				idle = append(idle, e.w)
				dispatch(now)
				continue
			}
			if err != nil {
				return nil, err
			}
			e.w.res = r
			push(r.ReadyAt, evReady, e.w)
		case evReady:
			if at := lane.ReadyAt(&e.w.res); at.After(now) {
				push(at, evReady, e.w)
				continue
			}
			toSlot(now, e.w)
		case evSend:
			e.w.permit = lane.SendAt(now, e.w.res)
			e.w.job.attempts++
			e.w.ans = up.call(now, e.w.job)
			push(now.Add(e.w.ans.latency), evDone, e.w)
		case evDone:
			w := e.w
			if !w.ans.limited {
				up.finish(now, w.ans)
			}
			if err := w.permit.DoneAt(now, w.ans.outcome); err != nil {
				return nil, err
			}
			wakeSlots(now)
			if w.ans.limited {
				if cfg.lane.Strategy == StrategyRetry {
					// exponential backoff with full jitter, honouring Retry-After
					b := min(60*time.Second, time.Second<<min(w.job.attempts-1, 6))
					d := max(w.ans.headers.RetryAfter, time.Duration(rng.Int64N(int64(b))+1))
					push(now.Add(d), evReserve, w)
				} else {
					push(now, evReserve, w)
				}
				continue
			}
			res.completed++
			w.job = nil
			idle = append(idle, w)
			dispatch(now)
		}
	}
	res.backlog = len(backlog)
	return res, nil
}
