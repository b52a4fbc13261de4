package shaping

import (
	"fmt"
	"math"
	"time"
)

// The provider as a lane learns it from the answers: the cold start's probe,
// the kind of enforcement (a per-minute bucket, or one of a few seconds),
// and the share of the provider's quota the lane runs on. See
// docs/design/rate-limiting.md, "Reading the server".

// ProviderKind is how a provider enforces its limits, as a lane tells from
// its answers (never from configuration).
type ProviderKind string

const (
	// ProviderUnknown: no answer has shown the kind yet.
	ProviderUnknown ProviderKind = "unknown"
	// ProviderMinute: the provider admitted a deficit larger than any short
	// bucket holds (twice LaneConfig.ShortBucket of refill): its remaining
	// headers describe a per-minute bucket, and the lane spends what they
	// say is available at once. A refusal with room still shows a short
	// bucket.
	ProviderMinute ProviderKind = "minute"
	// ProviderShort: the provider refused a request while its remaining
	// headers showed room for twice it: it enforces its limits over a few
	// seconds (quantized limits, "60,000 requests/minute may be enforced as
	// 1,000 requests/second"). The lane's burst is capped to what the
	// provider was seen to admit, and it paces every send.
	ProviderShort ProviderKind = "short"
	// ProviderNoHeaders: the answers so far carried no x-ratelimit-*
	// header; the lane keeps its warm-up and its probe's small burst.
	ProviderNoHeaders ProviderKind = "no_headers"
)

// distrustAfter429 is how long after a 429 that no short bucket explains
// the headers may only lower the levels: the refusal showed that what they
// said was not what the provider admits (another client on the key, or a
// header that lies). After it, a minute bucket has refilled and can be
// believed again.
const distrustAfter429 = time.Minute

// view is the lane's picture of one provider limit (requests or tokens per
// minute) in the provider's units; the lane's bucket holds Share times it.
type view struct {
	// limit is the per-minute limit: configured, or from the headers.
	limit float64
	// burst is what the lane trusts the provider to admit at once: the
	// limit (a minute bucket), what a short-bucket provider was seen to
	// admit, or the probe before the first answer with headers.
	burst float64
	// admitted is the largest deficit (limit − remaining) an answer that
	// was not refused showed.
	admitted float64
	// anchor, on a short-bucket provider, is the remaining its refusal
	// showed: its short bucket was about empty then, so it holds about
	// remaining − anchor (at most the burst) as the headers go on.
	anchor float64
	// remaining is the newest remaining header (has: there was one), for
	// a 429 that comes without headers.
	remaining float64
	has       bool
	// fromHeader: a limit header has set the limit.
	fromHeader bool
}

// probeBurst is the probe's burst for a limit: ShortBucket of refill, at
// least one request, at most the limit.
func (l *Lane) probeBurst(limit float64) float64 {
	return min(limit, max(1, l.cfg.ShortBucket.Seconds()*limit/60))
}

// floorBurst is the least burst a short-bucket provider is trusted with:
// one second of refill, at least one request.
func floorBurst(limit float64) float64 { return min(limit, max(1, limit/60)) }

// startProbeLocked sets a cold-starting bucket to the probe: its capacity
// is ShortBucket of refill, full for tokens (so the first request goes at
// once, whatever its size) and, for requests, first: the early trial
// (earlyTrial) or the probe's one request; the rest of the level comes
// from the first answer's headers, or from the warm-up while none carries
// them.
func (l *Lane) startProbeLocked(now time.Time, b *Bucket, v *view, first float64) {
	v.burst = l.probeBurst(v.limit)
	l.applyLocked(now, b, v)
	b.level = min(first, b.capacity)
}

// earlyTrial is the requests a lane with a configured quota sends at once
// before its probe's answer: what a second of the quota holds, of requests
// and, at the default max output each, of tokens; at least the probe. Any
// provider the lane assumes admits it, short bucket or not (a second of
// refill is the least burst a short-bucket lane trusts: floorBurst), and
// the trials the first answer starts count it spent
// (docs/design/rate-limiting.md#cold-start-from-what-the-provider-says-is-available).
func (l *Lane) earlyTrial() float64 {
	n := floorBurst(l.cfg.RPM)
	if l.cfg.TPM > 0 && l.cfg.Strategy != StrategyRPM {
		n = min(n, floorBurst(l.cfg.TPM)/float64(l.cfg.DefaultMaxOutput))
	}
	return max(1, math.Floor(n))
}

// earlyLocked reports whether the lane is in its early trial: a requests
// quota configured, and no answer yet.
func (l *Lane) earlyLocked() bool {
	return l.probing && l.kind == ProviderUnknown && l.rpm != nil
}

// endEarlyTrialLocked leaves a lane put on a share of the quota before any
// answer the probe's one request of its early trial: replicas' early
// trials together would pass what a short bucket holds, and a replica's
// probe is spread instead (spreadProbeLocked).
func (l *Lane) endEarlyTrialLocked(now time.Time) {
	if l.earlyLocked() && l.share < 1 {
		l.rpm.LowerAt(now, 1)
	}
}

// endProbeLocked ends a cold start's probe at the first answer with
// headers: the warm-up stops, and the buckets trust the provider's whole
// minute (unless a refusal has already shown a short bucket).
func (l *Lane) endProbeLocked(now time.Time) {
	if !l.probing {
		return
	}
	l.probing = false
	for _, q := range l.views() {
		if q.b == nil {
			continue
		}
		q.b.endWarmUpAt(now)
		if l.kind != ProviderShort {
			q.v.burst = l.unknownBurst(q.v)
			l.applyLocked(now, q.b, q.v)
		}
	}
}

type bucketView struct {
	b *Bucket
	v *view
}

func (l *Lane) views() [2]bucketView {
	return [2]bucketView{{l.rpm, &l.rpmQ}, {l.tpm, &l.tpmQ}}
}

// setKindLocked records the provider's kind; the lane paces every send
// unless the provider is known to enforce per minute (or the lane is
// static: a warm-up protects against growth-rate limits).
func (l *Lane) setKindLocked(k ProviderKind) {
	l.kind = k
	l.trying = l.trying && k == ProviderUnknown
	l.paceAll = l.cfg.ColdStart != ColdStartProbe || k != ProviderMinute
}

// admittedLocked records a fresh answer that was not refused, whose header
// said remaining: the provider admitted a deficit of limit − remaining.
// More than twice ShortBucket of refill proves a per-minute bucket; on a
// short-bucket provider the trusted burst grows to what it admitted.
func (l *Lane) admittedLocked(now time.Time, b *Bucket, v *view, remaining float64) {
	v.remaining, v.has = remaining, true
	v.admitted = max(v.admitted, v.limit-remaining)
	switch l.kind {
	case ProviderUnknown:
		if v.admitted > 2*l.cfg.ShortBucket.Seconds()*v.limit/60 {
			l.setKindLocked(ProviderMinute)
			l.unguardLocked(now)
		} else if burst := l.unknownBurst(v); burst > v.burst {
			l.growBurstLocked(now, b, v, burst)
		}
	case ProviderShort:
		if a := min(v.admitted, l.shortMax(v.limit)); a > v.burst {
			v.burst = a
			l.applyLocked(now, b, v)
		}
	}
}

// unknownBurst is what a lane trusts the provider of view v to admit at
// once after its probe, while the provider's kind is unknown: the whole
// limit, but for a lane that neither tries the provider itself (the staged
// burst of lane_trial.go, on the whole quota alone) nor was told its kind
// by the ledger: a replica on a share of the quota. Then the replicas'
// bursts together stay within what the provider was seen to admit, grown
// by half (ShortBucket of refill at first), until its deficit proves a
// minute bucket: a short one refuses the growth's last requests only,
// rather than every replica's share of a whole minute
// (docs/design/replicas.md#trying-the-kind-together).
func (l *Lane) unknownBurst(v *view) float64 {
	if !l.guardedLocked() {
		return v.limit
	}
	return min(v.limit, max(l.probeBurst(v.limit), unknownGrowth*v.admitted))
}

// guardedLocked reports whether the lane tries a provider of unknown kind
// with the other replicas on its quota (unknownBurst).
func (l *Lane) guardedLocked() bool {
	return l.cfg.ColdStart == ColdStartProbe && l.kind == ProviderUnknown && !l.trying && l.share < 1 && l.peersKnown
}

// unknownGrowth is how much past the deficit the provider admitted the
// replicas of a provider of unknown kind try together (unknownBurst).
const unknownGrowth = 1.5

// unguardLocked gives the buckets the whole limit once the provider is
// known to enforce per minute.
func (l *Lane) unguardLocked(now time.Time) {
	for _, q := range l.views() {
		if q.b != nil && q.v.burst < q.v.limit {
			l.growBurstLocked(now, q.b, q.v, q.v.limit)
		}
	}
}

// growBurstLocked raises the burst of view v to burst, and b's level by the
// lane's part of the growth: the level is its part of the provider's
// remaining less what the lane does not trust (limit − burst), which
// shrank.
func (l *Lane) growBurstLocked(now time.Time, b *Bucket, v *view, burst float64) {
	grown := burst - v.burst
	v.burst = burst
	l.applyLocked(now, b, v)
	b.AdjustAt(now, grown*l.part())
}

// shortMax is the most a short bucket holds: twice ShortBucket of refill
// (a provider that admits more enforces per minute).
func (l *Lane) shortMax(limit float64) float64 {
	return min(limit, 2*l.cfg.ShortBucket.Seconds()*limit/60)
}

// refusedLocked learns from a 429 on a request of tokens sent at sentAt,
// before its headers are applied. A refusal with room for twice the request
// means a short bucket: the lane caps its burst to what the provider admitted
// (halving it on a known short bucket). A refusal without room makes the
// headers only lower the levels for a minute
// (docs/design/rate-limiting.md#refusedlocked).
func (l *Lane) refusedLocked(now, sentAt time.Time, tokens float64, h RateLimitHeaders) {
	if !l.roomLocked(tokens, h) {
		l.distrustUntil = now.Add(distrustAfter429)
		return
	}
	refused := [2]struct {
		has       bool
		remaining float64
	}{{h.HasRemainingRequests, h.RemainingRequests}, {h.HasRemainingTokens, h.RemainingTokens}}
	switch l.kind {
	case ProviderUnknown, ProviderMinute:
		guarded := l.guardedLocked()
		l.setKindLocked(ProviderShort)
		l.shortAt, l.shortSent = now, sentAt
		for i, q := range l.views() {
			if q.b == nil {
				continue
			}
			admitted := q.v.admitted
			if r := refused[i]; r.has {
				admitted = max(admitted, q.v.limit-r.remaining)
			}
			if guarded {
				// The replicas tried the burst together: the provider's
				// bucket holds between what it admitted and that.
				admitted = max(admitted, (admitted+q.v.burst)/2)
			}
			q.v.burst = max(floorBurst(q.v.limit), min(admitted, l.shortMax(q.v.limit)))
			q.v.anchor = q.v.limit - q.v.burst
			if r := refused[i]; r.has {
				q.v.anchor = r.remaining
			}
			l.applyLocked(now, q.b, q.v)
		}
	case ProviderShort:
		if !sentAt.After(l.shortAt) {
			return // sent before the lane knew: no news
		}
		for i, q := range l.views() {
			if q.b == nil {
				continue
			}
			q.v.burst = max(floorBurst(q.v.limit), q.v.burst/2)
			// Refused where the anchor said the short bucket held twice
			// the request: the minute the headers show drifted from it
			// (it refills on while a full short bucket does not), and
			// the anchor moves to this refusal's remaining.
			if r := refused[i]; r.has && r.remaining-q.v.anchor > 2*[2]float64{1, tokens}[i] {
				q.v.anchor = r.remaining
			}
			l.applyLocked(now, q.b, q.v)
		}
	default:
		l.distrustUntil = now.Add(distrustAfter429)
	}
}

// roomLocked reports whether the remaining headers of a refused request of
// tokens (or the newest ones, where it has none) showed room for twice it
// in every bucket they name, and name at least one.
func (l *Lane) roomLocked(tokens float64, h RateLimitHeaders) bool {
	known := false
	check := func(b *Bucket, v *view, has bool, remaining, need float64) bool {
		if b == nil {
			return true
		}
		if !has {
			if !v.has {
				return true
			}
			remaining = v.remaining
		}
		known = true
		return remaining >= 2*need
	}
	ok := check(l.rpm, &l.rpmQ, h.HasRemainingRequests, h.RemainingRequests, 1)
	ok = check(l.tpm, &l.tpmQ, h.HasRemainingTokens, h.RemainingTokens, tokens) && ok
	return ok && known
}

// SetShareAt makes the lane run on share, in [0, 1], of the provider's quota
// from now on: its buckets' refill and capacity, and the levels read from
// headers, scale with it; the level (the lane's credit) stays, cut to a
// lowered capacity, so N replicas that each set 1/N spend together what one
// lane would. On share 0 it admits nothing and Admit waits for a share.
// Why: docs/design/replicas.md#setshareat.
func (l *Lane) SetShareAt(now time.Time, share float64) error {
	if !(share >= 0 && share <= 1) {
		return fmt.Errorf("%w: lane %q share must be in [0, 1], got %v", ErrInvalidConfig, l.cfg.Name, share)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if share == l.share {
		return nil
	}
	l.share = share
	// Replicas learn the provider's kind through the ledger, not each by
	// a staged burst of its own (lane_trial.go).
	l.trying = l.trying && share == 1
	for _, q := range l.views() {
		if q.b == nil {
			continue
		}
		l.applyLocked(now, q.b, q.v)
	}
	l.endEarlyTrialLocked(now)
	l.wakeLocked()
	if l.ctrl != nil {
		l.guideLocked()
	}
	return nil
}

// part is the share the lane's buckets run on: its share, at least
// ShareLeast (a lane on share 0 admits nothing, but its buckets keep a
// refill).
func (l *Lane) part() float64 { return max(l.share, ShareLeast) }

// SetShare is SetShareAt on the lane's clock.
func (l *Lane) SetShare(share float64) error { return l.SetShareAt(l.clock.Now(), share) }

// Share returns the share of the provider's quota the lane runs on.
func (l *Lane) Share() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.share
}

// ReplicaState is what a replica's lane tells the other replicas on its
// quota through the quota ledger ([Lane.StateAt]), or what they tell it,
// summed over them ([Lane.SetPeersAt]); docs/design/replicas.md.
type ReplicaState struct {
	// Requests and Tokens are the credit held at the provider: what the
	// RPM and TPM buckets hold, the reservations not yet sent included (of
	// every other replica, summed).
	Requests, Tokens float64
	// ShortRequests and ShortTokens, when positive, say that the provider
	// enforces a short bucket ([ProviderShort]) and how much of it is
	// trusted at once: the burst the lane learned, in the provider's units
	// (the smallest any other replica learned).
	ShortRequests, ShortTokens float64
}

// StateAt returns what the lane tells the other replicas at now: the
// credit its buckets hold, and the short bucket it learned, if any. The
// credit is the level plus what the lane reserved and has not sent: a
// level in debt has gathered the refill it has so far for the reservations
// waiting on it, and the provider holds that refill until they are sent.
func (l *Lane) StateAt(now time.Time) ReplicaState {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s ReplicaState
	if l.rpm != nil {
		s.Requests = max(0, l.rpm.LevelAt(now)+l.resReq-l.canReq-l.sentReq)
	}
	if l.tpm != nil {
		s.Tokens = max(0, l.tpm.LevelAt(now)+l.resTok-l.canTok-l.sentTok)
	}
	if l.kind == ProviderShort {
		s.ShortRequests, s.ShortTokens = l.rpmQ.burst, l.tpmQ.burst
	}
	return s
}

// SetPeersAt tells the lane what the other replicas on its quota hold and
// know, from the quota ledger. Their credit bounds what a header may raise
// the lane's level to (levelLocked): the lane takes at most what none of
// them holds, so a part of the provider's bucket that one replica gave up
// (a share lowered, a level cut by a header, a replica gone) goes to the
// others instead of staying unused, without counting the others' credit
// twice. A short bucket one of them learned from a 429 is the lane's too:
// the replicas learn the provider's kind once, not once each.
func (l *Lane) SetPeersAt(now time.Time, peers ReplicaState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.peers) == peersKept {
		l.peers = append(l.peers[:0], l.peers[1:]...)
	}
	first := !l.peersKnown
	l.peers, l.peersKnown = append(l.peers, peersAt{at: now, ReplicaState: peers}), true
	if l.kind != ProviderShort && (peers.ShortRequests > 0 || peers.ShortTokens > 0) {
		l.learnShortLocked(now, peers)
	}
	if first {
		l.spreadProbeLocked(now)
	}
}

// learnShortLocked takes the short bucket another replica learned.
func (l *Lane) learnShortLocked(now time.Time, peers ReplicaState) {
	l.setKindLocked(ProviderShort)
	l.shortAt = now
	for i, q := range l.views() {
		if q.b == nil {
			continue
		}
		learned := [2]float64{peers.ShortRequests, peers.ShortTokens}[i]
		if learned <= 0 {
			learned = q.v.admitted
		}
		q.v.burst = max(floorBurst(q.v.limit), min(learned, l.shortMax(q.v.limit)))
		q.v.anchor = q.v.limit - q.v.burst
		l.applyLocked(now, q.b, q.v)
	}
}

// spreadProbeLocked lowers the token level of a lane that the ledger tells
// of its peers before its probe's answer, on a provider of unknown kind,
// so that its bucket fills at a random time (LaneConfig.Seed) within
// ShortBucket. Its probe, which goes when its bucket is full whatever its
// size, goes then: replicas started together send their probes over
// ShortBucket rather than at once, where a hundred probes of a thousand
// tokens, each past its sliver of the bucket, are twice a short bucket
// (docs/design/scale.md).
func (l *Lane) spreadProbeLocked(now time.Time) {
	if !l.probing || !l.guardedLocked() || l.tpm == nil {
		return
	}
	b := l.tpm
	b.mu.Lock()
	s := b.rel(now)
	refill := b.cum(s+l.spread*l.cfg.ShortBucket.Seconds()) - b.cum(s)
	b.mu.Unlock()
	b.LowerAt(now, b.Capacity()-refill)
}

// peersAt is what the ledger told of the other replicas at a time.
type peersAt struct {
	at time.Time
	ReplicaState
}

// peersKept is how many of the ledger's answers a lane keeps: about 4 s of
// them at the default period, longer than an answer takes.
const peersKept = 8

// peersSinceLocked is the most credit the other replicas held since at,
// as far as the ledger told: the most of its answers from the one in force
// at at on (all it kept when at is older). A later answer alone would miss
// what they spent after at, which the header sent at at does not show
// either.
func (l *Lane) peersSinceLocked(at time.Time) (requests, tokens float64) {
	from := 0
	for i, p := range l.peers {
		if !p.at.After(at) {
			from = i
		}
	}
	for _, p := range l.peers[from:] {
		requests, tokens = max(requests, p.Requests), max(tokens, p.Tokens)
	}
	return requests, tokens
}

// peersSlack is how much older than the answer the ledger's figures of the
// other replicas' credit may be: about a ledger period and its round trip.
// A header raises a level only above what the others may have refilled
// meanwhile.
const peersSlack = time.Second
