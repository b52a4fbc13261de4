package shaping

import (
	"container/heap"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"
)

// This file is the deterministic simulation harness: a discrete-event loop on
// virtual time drives a Lane through its non-blocking core API (ReserveAt,
// ReadyAt, TryAcquireSlot, PaceReservationAt, SendAt, DoneAt) against an
// in-memory upstream with RPM and TPM buckets (per minute, or short as
// quantized limits are), saturation and 429s. No goroutines, no wall clock.

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
	// Short, when set, enforces both limits with buckets holding only this
	// much refill (at least one request) besides the minute ones, as
	// upstreamsim's enforcement short: a request larger than the bucket
	// goes when it is full. The headers keep the minute's view.
	Short time.Duration
	// RetryAfterSeconds rounds Retry-After up to whole seconds, as
	// upstreamsim and OpenAI send it.
	RetryAfterSeconds bool
	// MaxConcurrency, when set, refuses a request that finds this many in
	// flight, as upstreamsim does: a 429 charged a request, Retry-After 1 s,
	// headers that show the room left.
	MaxConcurrency int
}

type serverBucket struct {
	limit, level, capacity float64
	last                   time.Time
}

func newServerBucket(limit float64, window time.Duration, full bool, now time.Time) serverBucket {
	b := serverBucket{limit: limit, last: now}
	b.setLimit(limit, window)
	if full {
		b.level = b.capacity
	}
	return b
}

// setLimit sets the limit per minute and the refill the bucket holds.
func (b *serverBucket) setLimit(limit float64, window time.Duration) {
	b.limit, b.capacity = limit, max(1, limit/60*window.Seconds())
	b.level = min(b.level, b.capacity)
}

func (b *serverBucket) refill(now time.Time) {
	if now.After(b.last) {
		b.level = min(b.capacity, b.level+b.limit/60*now.Sub(b.last).Seconds())
		b.last = now
	}
}

// need is what a charge of n waits for: at most a full bucket.
func (b *serverBucket) need(n float64) float64 { return min(n, b.capacity) }

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
	// srpm and stpm are the short buckets (cfg.Short > 0).
	srpm, stpm serverBucket
	inFlight   int
	// counters
	ok, limited, okLong    int
	limitedConcurrency     int
	okTokens               float64
	latencies              time.Duration // of the successes
	okLog                  []okEvent
	limitedLog             []time.Time
	rejectReq, rejectToken int
}

type okEvent struct {
	at     time.Time
	tokens float64 // net tokens charged
}

func newUpstream(cfg upstreamConfig, now time.Time) *upstream {
	u := &upstream{cfg: cfg}
	full := !cfg.StartEmpty
	u.rpm = newServerBucket(cfg.RPM, time.Minute, full, now)
	u.tpm = newServerBucket(cfg.TPM, time.Minute, full, now)
	if cfg.Short > 0 {
		u.srpm = newServerBucket(cfg.RPM, cfg.Short, full, now)
		u.stpm = newServerBucket(cfg.TPM, cfg.Short, full, now)
	}
	return u
}

// buckets returns the server's request and token buckets, short ones too.
func (u *upstream) buckets() (req, tok []*serverBucket) {
	if u.cfg.Short > 0 {
		return []*serverBucket{&u.rpm, &u.srpm}, []*serverBucket{&u.tpm, &u.stpm}
	}
	return []*serverBucket{&u.rpm}, []*serverBucket{&u.tpm}
}

func (u *upstream) setLimits(now time.Time, rpm, tpm float64) {
	req, tok := u.buckets()
	for i, b := range append(req, tok...) {
		b.refill(now)
		limit, window := rpm, time.Minute
		if i >= len(req) {
			limit = tpm
		}
		if b == &u.srpm || b == &u.stpm {
			window = u.cfg.Short
		}
		b.setLimit(limit, window)
	}
}

type simJob struct {
	prompt, maxOut, out int
	attempts            int
}

type answer struct {
	latency time.Duration
	limited bool
	headers RateLimitHeaders
	charged float64
	refund  float64
	outcome Outcome
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
	req, tok := u.buckets()
	cost := float64(j.prompt + j.maxOut)
	reqOK, tokOK := true, true
	var retry time.Duration
	for _, b := range req {
		b.refill(now)
		reqOK = reqOK && b.level >= 1
		retry = max(retry, b.wait(1))
	}
	for _, b := range tok {
		b.refill(now)
		tokOK = tokOK && b.level >= b.need(cost)
		retry = max(retry, b.wait(b.need(cost)))
	}
	var a answer
	busy := reqOK && tokOK && u.cfg.MaxConcurrency > 0 && u.inFlight >= u.cfg.MaxConcurrency
	if busy {
		u.limitedConcurrency++
		retry = time.Second
	}
	if !reqOK || !tokOK || busy {
		// Rejected requests count toward RPM.
		for _, b := range req {
			b.level = max(0, b.level-1)
		}
		if u.cfg.ChargeRejected {
			for _, b := range tok {
				b.level = max(0, b.level-cost)
			}
		}
		u.limited++
		u.limitedLog = append(u.limitedLog, now)
		switch {
		case !tokOK:
			u.rejectToken++
		case !reqOK:
			u.rejectReq++
		}
		a.limited = true
		a.latency = 50 * time.Millisecond
		u.headers(&a.headers)
		if u.cfg.RetryAfterSeconds {
			retry = (retry + time.Second - 1).Truncate(time.Second)
		}
		a.headers.RetryAfter = retry
		a.headers.HasRetryAfter = true
		a.headers.Concurrency = busy
		a.outcome = Outcome{RateLimited: true, Latency: a.latency, Headers: a.headers}
		return a
	}
	for _, b := range req {
		b.level--
	}
	for _, b := range tok {
		b.level -= cost
	}
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
	_, tok := u.buckets()
	for _, b := range tok {
		b.refill(now)
		b.level = min(b.capacity, b.level+a.refund)
	}
	u.ok++
	u.okTokens += a.charged - a.refund
	u.latencies += a.latency
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
	evServer
)

type event struct {
	at   time.Time
	seq  int
	kind evKind
	w    *simWorker
	gen  int // an evReady of an older generation is stale
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
	// gen counts the worker's evReady events; readyAt is when the pending
	// one fires (zero when none is pending).
	gen     int
	readyAt time.Time
}

type simConfig struct {
	lane     LaneConfig
	up       upstreamConfig
	workers  int
	arrivals float64 // jobs per second
	duration time.Duration
	seed     uint64
	// backlog, when set, lands that many jobs at the start instead of the
	// arrivals; the run ends when they are all done (or at duration).
	backlog int
	// job draws a job; default the long/short mix of overload.
	job func(rng *rand.Rand) *simJob
	// serial admits one job at a time, as a worker's dispatcher does: the
	// next reservation is made once the previous job is sent; a job
	// refused with a 429 goes back to the head of the queue.
	serial bool
	// transit, when set, delays each request's arrival at the server by a
	// uniform draw in [0, transit) after its send, so requests sent close
	// together may reach the server in the other order (connection set-up,
	// scheduling), as they do over a real network.
	transit time.Duration
	// order, when set, sorts the backlog before the run (the claim order).
	order func(a, b *simJob) int
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
	// end is when the last job completed.
	end time.Time
}

// mixedJob is the long/short mix of docs/design/rate-limiting.md: one in
// five a long document.
func mixedJob(rng *rand.Rand) *simJob {
	if rng.Float64() < 0.2 { // long documents
		return &simJob{prompt: 4000 + rng.IntN(4000), maxOut: 2000, out: 500 + rng.IntN(1500)}
	}
	return &simJob{prompt: 100 + rng.IntN(300), maxOut: 300, out: 50 + rng.IntN(250)}
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
	newJob := cfg.job
	if newJob == nil {
		newJob = mixedJob
	}

	var q eventQueue
	seq := 0
	push := func(at time.Time, k evKind, w *simWorker) {
		seq++
		e := &event{at: at, seq: seq, kind: k, w: w}
		if k == evReady {
			w.gen++
			e.gen, w.readyAt = w.gen, at
		}
		heap.Push(&q, e)
	}
	var backlog []*simJob
	var idle []*simWorker
	var slotWait []*simWorker
	// waiting are the workers whose reservation waits for its buckets, in
	// the order they reserved.
	var waiting []*simWorker
	busy := false // the serial dispatcher holds a job not yet sent
	for range cfg.workers {
		idle = append(idle, &simWorker{})
	}
	if cfg.backlog > 0 {
		for range cfg.backlog {
			backlog = append(backlog, newJob(rng))
		}
		if cfg.order != nil {
			slices.SortStableFunc(backlog, cfg.order)
		}
	} else {
		push(start, evArrive, nil)
	}
	if cfg.change != nil {
		push(start.Add(cfg.changeAt), evChange, nil)
	}
	dispatch := func(now time.Time) {
		for len(idle) > 0 && len(backlog) > 0 && !busy {
			w := idle[len(idle)-1]
			idle = idle[:len(idle)-1]
			w.job = backlog[0]
			backlog = backlog[1:]
			busy = cfg.serial
			push(now, evReserve, w)
		}
	}
	dispatch(start)
	send := func(now time.Time, w *simWorker) {
		push(lane.PaceReservationAt(now, &w.res), evSend, w)
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
		send(now, w)
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
			send(now, w)
		}
	}
	// wakeReady moves the waiting reservations that a raised level made
	// ready earlier, as a raise wakes a waiting Admit.
	wakeReady := func(now time.Time) {
		for _, w := range waiting {
			if at := lane.ReadyAt(&w.res); at.Before(w.readyAt) {
				push(maxTime(now, at), evReady, w)
			}
		}
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(*event)
		if e.at.After(end) {
			break
		}
		if e.kind == evReady && e.gen != e.w.gen {
			continue
		}
		now := e.at
		clock.Advance(now.Sub(clock.Now()))
		switch e.kind {
		case evArrive:
			backlog = append(backlog, newJob(rng))
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
				busy = false
				dispatch(now)
				continue
			}
			if err != nil {
				return nil, err
			}
			e.w.res = r
			waiting = append(waiting, e.w)
			push(r.ReadyAt, evReady, e.w)
		case evReady:
			e.w.readyAt = time.Time{}
			if at := lane.ReadyAt(&e.w.res); at.After(now) {
				push(at, evReady, e.w)
				continue
			}
			waiting = slices.DeleteFunc(waiting, func(w *simWorker) bool { return w == e.w })
			toSlot(now, e.w)
		case evSend:
			if p := lane.PausedUntil(); p.After(now) {
				// A 429 paused the lane while this send waited for its
				// pacing: the booking and the slot go back, as in Admit.
				if e.w.res.pace {
					lane.pacer.CancelAt(now)
				}
				lane.ReleaseSlot()
				push(p, evReady, e.w)
				continue
			}
			e.w.permit = lane.SendAt(now, e.w.res)
			e.w.job.attempts++
			if cfg.transit > 0 {
				push(now.Add(time.Duration(rng.Int64N(int64(cfg.transit)))), evServer, e.w)
			} else {
				e.w.ans = up.call(now, e.w.job)
				push(now.Add(e.w.ans.latency), evDone, e.w)
			}
			if cfg.serial {
				busy = false
				dispatch(now)
			}
		case evServer:
			e.w.ans = up.call(now, e.w.job)
			e.w.ans.outcome.Latency = 0 // send to last byte: the lane's clock
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
			wakeReady(now)
			if w.ans.limited {
				switch {
				case cfg.lane.Strategy == StrategyRetry:
					// exponential backoff with full jitter, honouring Retry-After
					b := min(60*time.Second, time.Second<<min(w.job.attempts-1, 6))
					d := max(w.ans.headers.RetryAfter, time.Duration(rng.Int64N(int64(b))+1))
					push(now.Add(d), evReserve, w)
				case cfg.serial:
					backlog = append([]*simJob{w.job}, backlog...)
					w.job = nil
					idle = append(idle, w)
					dispatch(now)
				default:
					push(now, evReserve, w)
				}
				continue
			}
			res.completed++
			res.end = now
			w.job = nil
			idle = append(idle, w)
			dispatch(now)
			if cfg.backlog > 0 && res.completed == cfg.backlog {
				q = nil
			}
		}
	}
	res.backlog = len(backlog)
	return res, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
