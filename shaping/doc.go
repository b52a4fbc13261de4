// Package shaping is llmq's admission control for rate-limited LLM APIs: the
// four client strategies of docs/design/rate-limiting.md (retry, rpm, shape,
// adaptive) and the estimation and settlement rules of
// docs/design/quotas.md, as a pure package. The algorithms start no
// goroutines, do no I/O and take the time as an argument (ReserveAt(now, …));
// a thin waiting layer ([Lane.Admit], [Bucket.Wait]) runs on an injected
// clock (see "Clocks" below).
//
// # The lane
//
// A worker holds one [Lane] per (API key, model). [Lane.Admit] runs the
// order docs/design/rate-limiting.md argues for:
//
//  1. every bucket of the admission is reserved together or not at all:
//     RPM (1), TPM (prompt + max output, [LaneConfig.DefaultMaxOutput] when
//     the job sets none), the lane's [LaneConfig.Quotas] and the request's
//     [Request.Quotas] (tenant, project or key quotas, possibly shared by
//     many lanes; buckets are locked in one global order);
//  2. then a concurrency slot — tokens before slot, so no slot is ever held
//     during a long wait; a 429 pause that begins meanwhile gives the slot
//     back;
//  3. then the pacing (minimum interval) inside the slot.
//
// A request larger than a bucket's capacity fails with the permanent
// [ErrTooLarge]. A wait that would pass the context's deadline fails at once
// with a [*WaitError] carrying the predicted wait (for Retry-After), and
// reserves nothing. [Permit.Done] then settles the tokens to the real usage
// (the level may go negative: later requests wait until it recovers),
// releases the slot, calibrates the buckets from the response's
// x-ratelimit-* headers, pauses the whole lane on a 429 until Retry-After
// (at most [LaneConfig.MaxRetryAfter]), and feeds the adaptive controller.
//
// The server's headers are the truth about the minute: a limit header
// replaces the configured limit, and a remaining header sets the level,
// lower or higher, taking into account the refill since the send, what the
// server had not yet seen, and whether the provider gives unused tokens back
// (which the headers show); a stale header only lowers it, for a minute
// after a 429 no header raises it, and neither does one on a lane that runs
// on a share of the quota below 1, after its first. A correction also moves
// the ready times of the reservations already queued ([Lane.ReadyAt],
// [Bucket.ReadyAt]): a level cut below zero delays them by the missing
// tokens, a lower rate stretches their remaining wait and a higher one
// shortens it, a raised level brings them forward (and wakes a waiting
// Admit); any number of corrections compose, none is forgotten. A lane starts by probe ([ColdStartProbe]): one request
// goes at once (with a configured quota, what a second of it holds: the
// early trial) and the first answer's headers set the levels; a lane tells
// a per-minute bucket from a short one ([ProviderKind]) from the answers,
// and [Lane.SetShareAt] runs it on a share of the provider's quota. See
// docs/design/rate-limiting.md, "Reading the server".
//
// # Strategies
//
//   - retry: no admission control; the caller backs off after 429s.
//   - rpm: RPM bucket with debt (FIFO), then a fixed concurrency slot.
//   - shape: RPM and TPM buckets, a fixed slot, pacing of 60s/RPM inside the
//     slot (until the provider is known to enforce per minute; then only
//     near an empty bucket), and a cold start by probe ([ColdStart]).
//   - adaptive: shape with the concurrency limit computed by a [Controller]
//     ([Elastic], the BBR-like controller of docs/design/rate-limiting.md,
//     unless [LaneConfig] sets another) and the quotas
//     learned when unknown: from the server's headers, or, when it sends
//     none, a TPM quota from its 429s.
//
// [DefaultStrategy] is shape when a quota is configured, adaptive when not.
//
// # Buckets and golang.org/x/time/rate
//
// x/time/rate was weighed first: its Limiter has reservations with debt,
// FIFO wait times, cancellation and explicit times, and is the model for
// this API. It cannot express what llmq needs, so [Bucket] is our own:
// settlement that drives the level negative after the fact (rate has no way
// to take tokens without a reservation, and its burst is an int), a capacity
// independent of the reservation size with float token counts, setting or
// lowering the level from a server's header, the linear warm-up of
// docs/design/rate-limiting.md (cumulative tokens R t²/2T, then RT/2 + R(t−T)),
// and an atomic reservation across several limiters (rate offers no
// peek-then-commit under a lock).
// [Pacer] and [ConcurrencyLimiter] (FIFO, limit changeable at run time) are
// small and ours as well.
//
// # Performance
//
// BenchmarkAdmission (bench_test.go) runs rate beside the lane in the same
// process, with one Limiter and with two (RPM and TPM, ReserveN on each, as
// a caller of rate would do without the lane's all-or-nothing reservation),
// uncontended and from 64 goroutines; limits high enough that nothing
// waits:
//
//	go test -run XXX -bench Admission -benchtime=1000000x -count=6 ./shaping/
//
// Medians of 18 runs (three sessions of -count=6) on a shared 2-core AMD
// EPYC, load average 1.6 to 2.4, Go 1.26; "before" is the code prior to the
// fast path below, measured in the same sessions. Run-to-run noise on this
// machine is about ±20%.
//
//	                               before            now
//	rate, 1 Limiter, uncontended     75 ns 0 alloc     74 ns 0 alloc
//	rate, 2 Limiters, uncontended   131 ns 0 alloc    121 ns 0 alloc
//	Lane.ReserveAt, uncontended     242 ns 0 alloc     84 ns 0 alloc
//	rate, 1 Limiter, 64 goroutines  137 ns 0 alloc    149 ns 0 alloc
//	rate, 2 Limiters, 64 goroutines 196 ns 0 alloc    233 ns 0 alloc
//	Lane.ReserveAt, 64 goroutines   420 ns 0 alloc    262 ns 0 alloc
//	Lane.Admit+Done, uncontended    794 ns 1 alloc    305 ns 0 alloc
//
// The headers-as-truth, probe and short-bucket work left this within noise:
// medians of 10 runs of each build, alternated, on the same machine at a
// load average of 11 (so every figure about three times the one above):
// Lane.ReserveAt 292 ns before, 307 ns after (uncontended) and 266 ns, 270
// ns (64 goroutines); Admit+Done 1015 ns, 1016 ns; rate with 2 Limiters
// 304 ns, 293 ns and 303 ns, 324 ns in the same runs; still no allocation.
// The hot path gained a pacing flag and a capacity check, no lock.
//
// Uncontended, a lane admission (RPM + TPM) costs 1.2 to 1.3 times one rate
// Limiter and less than two. With 64 goroutines it costs 1.6 to 1.9 times
// one Limiter and about as much as two: the time goes to the contended
// mutex hand-off, and the lane's single critical section covers both
// buckets and the all-or-nothing check, where each of rate's covers one.
//
// What makes it cheap: a lane owns its RPM and TPM buckets (they never
// leave the package), so the lane's lock guards them and a reservation
// without quotas takes one lock, not three; shared quota buckets keep their
// own locks, taken after the lane's in bucket id order, and every other
// path to an owned bucket (ReadyAt, CancelAt, Done, calibration, Snapshot)
// holds the lane's lock too. The instant is converted to the buckets'
// float seconds once when both share an origin, the Reservation is built in
// place rather than copied through the call chain, and the hot path has no
// defer, closure or charge list. Whether a send is paced is decided there
// too (a flag on the Reservation), so a burst skips the pacer's lock.
// [Lane.Admit] ticks the controller and
// reserves under one lock hold and skips the waits' re-checks when the
// reservation is ready at once. A [Permit] is a small value handle onto a
// pooled record with a generation counter: Done or Cancel advances the
// generation before the record is recycled, so a stale copy is refused and
// never touches a reused record, and Admit+Done allocates nothing.
//
// # Estimation
//
// [Estimator] counts prompt tokens offline with github.com/tiktoken-go/tokenizer
// (o200k for gpt-4o, gpt-4.1, gpt-5 and o-series, cl100k otherwise) and
// keeps per-model statistics of actual/estimated prompt tokens (p50, p95);
// the p95 becomes a safety factor applied to later estimates.
//
// # Pure core for simulations
//
// [Lane.ReserveAt], [Lane.ReadyAt], [Lane.CancelAt], [Lane.TryAcquireSlot],
// [Lane.PaceReservationAt], [Lane.SendAt] and [Permit.DoneAt] never block.
// The package's tests drive them from a discrete-event loop on virtual time
// against an in-memory upstream (RPM, TPM, per-minute or short buckets,
// saturation, 429s) and assert the comparison of
// docs/design/rate-limiting.md, on both kinds of provider: a worker's lane takes a backlog landing on an idle provider in
// at least 95% of the time the provider allows (its bucket at once, then its
// refill); shape holds 97% of the binding quota under 5x overload; retry
// storms (and loses goodput where rejected requests use up quota); and
// adaptive finds an unknown quota, and its halving, within 30 simulated
// seconds, from headers or from 429s alone.
//
// # Clocks
//
// The waiting layer reads the time from a [github.com/jonboulle/clockwork.Clock],
// the one clock type of llmq ([LaneConfig.Clock], [Bucket.Wait]), so a
// worker passes its own clock straight through and no adapter or second
// clock interface exists. The algorithms never read a clock: they take the
// time as an argument. The default is clockwork.NewRealClock(); tests use
// clockwork.NewFakeClockAt(t) with Advance and BlockUntilContext (to wait
// until an Admit is parked on the clock). The discrete-event simulation
// needs no timer introspection: it never blocks, it only moves the fake
// clock to the time of each event.
package shaping
