package shaping

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLanePeersRaise: a lane on a third of the quota whose level a header
// lowered (the other replicas spent more than their thirds, at a cold
// start) gets it back from the next header once the ledger has told it
// what the others hold: its third of what the server shows, less what it
// reserved since, but never more than what none of the others holds.
// Without the peers, a header on a share only lowers.
func TestLanePeersRaise(t *testing.T) {
	t.Parallel()
	const tpm = 60000.0
	headers := func(remaining float64) RateLimitHeaders {
		return RateLimitHeaders{LimitTokens: tpm, HasLimitTokens: true, RemainingTokens: remaining, HasRemainingTokens: true}
	}
	level := func(l *Lane, at time.Time) float64 { return l.tpm.LevelAt(at) }
	setup := func(t *testing.T, peers *ReplicaState) *Lane {
		t.Helper()
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: tpm, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		require.NoError(t, l.SetShareAt(t0, 1.0/3))
		// The first header ends the probe: a third of what the server has.
		l.ObserveAt(t0, headers(60000))
		require.InDelta(t, 20000, level(l, t0), 1e-6)
		// The others spent 45,000 meanwhile: the level is cut to a third
		// of the 15,000 left.
		l.ObserveAt(sec(1), headers(15000))
		require.InDelta(t, 5000, level(l, sec(1)), 1e-6)
		if peers != nil {
			l.SetPeersAt(sec(1), *peers)
		}
		return l
	}

	// Without the ledger's word, the server's 45,000 again (the others'
	// backlogs done, their credit given up) is not the lane's.
	l := setup(t, nil)
	l.ObserveAt(sec(2), headers(45000))
	require.InDelta(t, 5000+tpm/60/3, level(l, sec(2)), 1e-6)

	// The others hold nothing: a third of what the server has.
	l = setup(t, &ReplicaState{})
	l.ObserveAt(sec(2), headers(45000))
	require.InDelta(t, 15000, level(l, sec(2)), 1e-6)

	// They hold 35,000: the lane takes what is left of the 45,000, less
	// their refill over peersSlack (two thirds of a second of refill).
	l = setup(t, &ReplicaState{Tokens: 35000})
	l.ObserveAt(sec(2), headers(45000))
	require.InDelta(t, 10000-2.0/3*tpm/60, level(l, sec(2)), 1e-6)

	// What the lane reserved since the send is off the raise.
	l = setup(t, &ReplicaState{})
	_, err := l.ReserveAt(sec(2), Request{PromptTokens: 1000, MaxOutputTokens: 500})
	require.NoError(t, err)
	l.calibrateLocked(sec(2), sec(2), marks{req: l.sentReq, tok: l.sentTok, ref: l.refTok, rfd: l.rfdTok}, headers(45000), false)
	require.InDelta(t, 15000-1500, level(l, sec(2)), 1e-6)
}

// TestLaneStateCountsReservationsNotSent: the credit a lane tells the
// other replicas is its level plus what it reserved and has not sent: a
// level in debt for a reservation still waiting has gathered refill the
// provider holds for it, and another replica must not take it.
func TestLaneStateCountsReservationsNotSent(t *testing.T) {
	t.Parallel()
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 6000, ColdStart: ColdStartStatic, WarmUp: -1,
		Start: StartEmpty, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r, err := l.ReserveAt(t0, Request{PromptTokens: 2000, MaxOutputTokens: 1000})
	require.NoError(t, err)
	// 10 s later: 1,000 tokens of refill gathered for the 3,000 waiting.
	require.Equal(t, ReplicaState{Requests: 100, Tokens: 1000}, l.StateAt(sec(10)))
	l.SendAt(sec(30), r)
	require.Equal(t, ReplicaState{Requests: 299, Tokens: 0}, l.StateAt(sec(30)))
}

// TestLanePeersShortBucket: a short bucket one replica learned from a 429
// is the others' at their next ledger round: they cap their bursts to what
// it learned and pace every send, without a 429 of their own.
func TestLanePeersShortBucket(t *testing.T) {
	t.Parallel()
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.NoError(t, l.SetShareAt(t0, 0.5))
	l.SetPeersAt(t0, ReplicaState{Tokens: 1000})
	require.Equal(t, ProviderUnknown, l.Snapshot().Provider)
	l.SetPeersAt(sec(1), ReplicaState{ShortRequests: 20, ShortTokens: 6000})
	s := l.SnapshotAt(sec(1))
	require.Equal(t, ProviderShort, s.Provider)
	require.Equal(t, ReplicaState{ShortRequests: 20, ShortTokens: 6000, Requests: l.StateAt(sec(1)).Requests, Tokens: l.StateAt(sec(1)).Tokens}, l.StateAt(sec(1)))
	require.InDelta(t, 0.5*20, s.Buckets[0].Capacity, 1e-9)
	require.InDelta(t, 0.5*6000, s.Buckets[1].Capacity, 1e-9)
}

// TestLanesShareThroughLedger: three replicas' lanes on one provider take
// one backlog, their shares and peers set every 500 ms from a ledger as
// workers do. On a minute bucket they spend at least 95% of the physical
// limit with at most 2% of the calls answered 429; on a short bucket of 5 s
// one replica holds the whole quota and they spend it as one lane (95%, 1%).
// The figures, and the random seed left out of the 429 bound:
// docs/design/replicas.md#testlanessharethroughledger.
func TestLanesShareThroughLedger(t *testing.T) {
	t.Parallel()
	for _, short := range []time.Duration{0, 5 * time.Second} {
		for _, seed := range []uint64{1, 2, 3, 4, 5} {
			r := runLedger(t, short, seed)
			t.Logf("short %v seed %d: makespan %.1f s, physical limit %.1f s, share %.3f; %d calls, %d answered 429",
				short, seed, r.makespan, r.physical, r.physical/r.makespan, r.calls, r.limited)
			require.GreaterOrEqual(t, r.physical/r.makespan, 0.95, "short %v seed %d", short, seed)
			switch {
			case short == 0:
				require.LessOrEqual(t, float64(r.limited), 0.02*float64(r.calls), "seed %d", seed)
			case seed != 2:
				require.LessOrEqual(t, float64(r.limited), 0.01*float64(r.calls), "seed %d", seed)
			}
		}
	}
}

// runLedger runs TestLanesShareThroughLedger's backlog of 200 jobs.
func runLedger(t *testing.T, short time.Duration, seed uint64) sharesRun {
	t.Helper()
	const rpm, tpm = 600.0, 60000.0
	const period = 500 * time.Millisecond
	clock := clockwork.NewFakeClockAt(t0)
	up := newUpstream(upstreamConfig{RPM: rpm, TPM: tpm, Headers: true, TTFT: 200 * time.Millisecond, PerToken: 5 * time.Millisecond, Short: short}, t0)
	rng := rand.New(rand.NewPCG(seed, 42))
	var backlog []*simJob
	for range 200 {
		backlog = append(backlog, backlogJob(rng))
	}
	var reps []*simReplica
	rows := map[*simReplica]*Replica{}
	states := map[*simReplica]ReplicaState{}
	for i := range 3 {
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: rpm, TPM: tpm, Clock: clock})
		require.NoError(t, err)
		share := 1.0
		if i > 0 {
			share = ShareFloorDefault
		}
		require.NoError(t, l.SetShareAt(t0, share))
		r := &simReplica{lane: l}
		reps = append(reps, r)
		rows[r] = &Replica{Name: string(rune('a' + i)), Share: share}
	}
	// ledger is one replica's round: it writes its row and sets its share
	// and peers from every row.
	ledger := func(now time.Time, self *simReplica) {
		row := rows[self]
		row.Demand = float64(self.inFlight)
		if self.job != nil {
			row.Demand++
		}
		if len(backlog) > 0 {
			row.Demand += 256
		}
		row.Share = max(self.lane.Share(), ShareLeast)
		states[self] = self.lane.StateAt(now)
		row.Short = states[self].ShortTokens > 0 || states[self].ShortRequests > 0
		var all []Replica
		var peers ReplicaState
		for _, r := range reps {
			row := *rows[r]
			row.Self = r == self
			all = append(all, row)
			if r != self {
				st := states[r]
				peers.Requests += st.Requests
				peers.Tokens += st.Tokens
				peers.ShortRequests = max(peers.ShortRequests, st.ShortRequests)
				peers.ShortTokens = max(peers.ShortTokens, st.ShortTokens)
			}
		}
		require.NoError(t, self.lane.SetShareAt(now, ReplicaShare(all, ShareFloorDefault)))
		self.lane.SetPeersAt(now, peers)
	}
	end := runReplicas(t, clock, up, reps, replicaJobs{
		take: func(*simReplica) *simJob {
			if len(backlog) == 0 {
				return nil
			}
			j := backlog[0]
			backlog = backlog[1:]
			return j
		},
		giveBack: func(_ *simReplica, j *simJob) { backlog = append([]*simJob{j}, backlog...) },
	}, func(now time.Time) {
		for i, r := range reps {
			// The replicas' rounds are staggered, as workers started
			// one after the other are.
			if (now.Sub(t0)-time.Duration(i)*170*time.Millisecond)%period == 0 {
				ledger(now, r)
			}
		}
	})
	require.Empty(t, backlog)
	bucket := tpm
	if short > 0 {
		bucket = tpm / 60 * short.Seconds()
	}
	return sharesRun{
		calls: up.ok + up.limited, limited: up.limited, makespan: end.Sub(t0).Seconds(),
		physical: (up.okTokens-bucket)/(tpm/60) + up.latencies.Seconds()/float64(up.ok),
	}
}

// TestLaneShareZero: a lane on share 0 holds none of the quota (another
// replica holds a short bucket whole): its headroom is 0 and Admit waits
// for a share before it reserves, failing at its deadline without one; a
// share given wakes it, and it is admitted from the buckets of that share.
func TestLaneShareZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(t0)
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, ColdStart: ColdStartStatic, WarmUp: -1, Clock: clock})
	require.NoError(t, err)
	require.NoError(t, l.SetShareAt(t0, 0))
	require.Zero(t, l.Share())
	require.Zero(t, l.HeadroomAt(t0, time.Second, Request{PromptTokens: 10, MaxOutputTokens: 10}))

	wait := func(by time.Time) chan error {
		done := make(chan error, 1)
		go func() {
			p, err := l.AdmitBy(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10}, by)
			if err == nil {
				err = p.Done(Outcome{})
			}
			done <- err
		}()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		require.NoError(t, clock.BlockUntilContext(wctx, 1))
		return done
	}
	// Without a share by its deadline: a WaitError, nothing reserved.
	done := wait(sec(2))
	clock.Advance(2 * time.Second)
	var we *WaitError
	require.ErrorAs(t, <-done, &we)
	require.Equal(t, sec(2), we.Deadline)
	require.Equal(t, uint64(0), l.Snapshot().Admitted)

	// A share given wakes it: it reserves then, from the level it kept
	// on share 0 (its capacity, ShareLeast of the minute: 0.6 of a
	// request), and waits for the rest at the refill of its new share:
	// 40 ms at 10 requests a second.
	done = wait(sec(60))
	require.NoError(t, l.SetShareAt(sec(2), 1))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	clock.Advance(40*time.Millisecond - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("admitted before its refill (err %v)", err)
	default:
	}
	clock.Advance(time.Nanosecond)
	require.NoError(t, <-done)
	require.Equal(t, uint64(1), l.Snapshot().Admitted)
}

// TestLaneShortWholeWaitsForItsTokens: on a short-bucket provider whose
// whole quota the lane holds, a request larger than the burst it trusts
// waits for all its tokens, which the provider's bucket then holds; on a
// share of it (the others spending too), for a full bucket, as before.
func TestLaneShortWholeWaitsForItsTokens(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{1, 0.5} {
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, ColdStart: ColdStartStatic, WarmUp: -1,
			Start: StartEmpty, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		require.NoError(t, l.SetShareAt(t0, share))
		l.SetPeersAt(t0, ReplicaState{ShortRequests: 20, ShortTokens: 2000})
		level, capacity := l.tpm.LevelAt(t0), l.tpm.Capacity()
		require.InDelta(t, 2000*share, capacity, 1e-9)
		r, err := l.ReserveAt(t0, Request{PromptTokens: 2500, MaxOutputTokens: 500})
		require.NoError(t, err)
		need := capacity // a full bucket
		if share == 1 {
			need = 3000 // all its tokens
		}
		rate := 1000 * share
		require.WithinDuration(t, t0.Add(time.Duration((need-level)/rate*float64(time.Second))), l.ReadyAt(&r), time.Microsecond, "share %v", share)
	}
}

// TestLanePeersTryTheKindTogether: a replica's lane on a tenth of a quota
// whose kind is unknown, told by the ledger of its peers, trusts a tenth of
// ShortBucket of refill after its probe (not a tenth of the whole minute:
// thirty replicas trusting theirs at once sent a short bucket thirty
// refusals), half again the deficit the provider admitted as it grows, its level
// raised by its part of each growth, and the whole minute once the deficit
// proves a minute bucket.
func TestLanePeersTryTheKindTogether(t *testing.T) {
	t.Parallel()
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.NoError(t, l.SetShareAt(t0, 0.1))
	l.SetPeersAt(t0, ReplicaState{})
	l.ObserveAt(t0, headers600(600, 60000))
	require.Equal(t, []BucketSnapshot{
		{Name: "rpm", Level: 5, Capacity: 5, Limit: 60},
		{Name: "tpm", Level: 500, Capacity: 500, Limit: 6000},
	}, snapshotBuckets(l, t0), "a tenth of 5 s of refill")
	// The provider admitted a deficit of 4,000 tokens: the replicas may try
	// 6,000 together; the lane holds a tenth of the 2,000 of them left.
	l.ObserveAt(t0, headers600(600, 56000))
	require.InDelta(t, 600, l.tpm.Capacity(), 1e-9)
	require.InDelta(t, 200, l.tpm.LevelAt(t0), 1e-9)
	require.Equal(t, ProviderUnknown, l.SnapshotAt(t0).Provider)
	// 12,000, more than twice 5 s of refill: a minute bucket.
	l.ObserveAt(t0, headers600(600, 48000))
	require.Equal(t, ProviderMinute, l.SnapshotAt(t0).Provider)
	require.InDelta(t, 6000, l.tpm.Capacity(), 1e-9)
	require.InDelta(t, 4800, l.tpm.LevelAt(t0), 1e-9, "a tenth of the 48,000 left")
	require.InDelta(t, 60, l.rpm.Capacity(), 1e-9)

	// Without the ledger (shares set by hand, no word of the peers), the
	// lane trusts its share of the whole minute, as a lane alone does.
	alone, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.NoError(t, alone.SetShareAt(t0, 0.1))
	alone.ObserveAt(t0, headers600(600, 60000))
	require.InDelta(t, 6000, alone.tpm.Capacity(), 1e-9)
}

// TestLanePeersSpreadProbe: a lane on a share that the ledger tells of its
// peers before its probe's answer, on a provider of unknown kind, starts
// its tokens at its seed's part of its bucket, so that the probes of
// replicas started together go over ShortBucket rather than at once. A
// lane alone on the quota, one told of its peers after its first answer,
// or one whose peers learned a short bucket keeps its level.
func TestLanePeersSpreadProbe(t *testing.T) {
	t.Parallel()
	const tpm = 600000.0
	headers := RateLimitHeaders{LimitTokens: tpm, HasLimitTokens: true, RemainingTokens: tpm, HasRemainingTokens: true}
	lane := func(t *testing.T, seed uint64, share float64) *Lane {
		t.Helper()
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: tpm, Clock: clockwork.NewFakeClockAt(t0), Seed: seed})
		require.NoError(t, err)
		require.NoError(t, l.SetShareAt(t0, share))
		return l
	}
	probe := 5 * tpm / 60 / 100 // ShortBucket of refill, on a hundredth

	// The probe (a request above the capacity) waits for a full bucket,
	// which the seed sets within ShortBucket.
	readies := map[time.Time]bool{}
	for seed := range uint64(20) {
		l := lane(t, seed+1, 0.01)
		require.InDelta(t, probe, l.tpm.LevelAt(t0), 1e-6)
		l.SetPeersAt(t0, ReplicaState{})
		require.Less(t, l.tpm.LevelAt(t0), probe)
		res, err := l.ReserveAt(t0, Request{PromptTokens: 2000, MaxOutputTokens: 100})
		require.NoError(t, err)
		want := t0.Add(time.Duration(l.spread * float64(LaneShortBucketDefault)))
		require.WithinDuration(t, want, l.ReadyAt(&res), time.Millisecond)
		readies[l.ReadyAt(&res)] = true
	}
	require.Len(t, readies, 20, "the seeds spread the probes")

	// Alone on the quota: the staged burst, not the spread.
	l := lane(t, 1, 1)
	l.SetPeersAt(t0, ReplicaState{})
	require.InDelta(t, 5*tpm/60, l.tpm.LevelAt(t0), 1e-6)

	// Told of its peers after its first answer: the probe is over.
	l = lane(t, 1, 0.01)
	l.ObserveAt(t0, headers)
	before := l.tpm.LevelAt(t0)
	l.SetPeersAt(t0, ReplicaState{})
	require.InDelta(t, before, l.tpm.LevelAt(t0), 1e-6)

	// Its peers learned a short bucket: the kind is known.
	l = lane(t, 1, 0.01)
	l.SetPeersAt(t0, ReplicaState{ShortTokens: 40000})
	require.Equal(t, ProviderShort, l.kind)
	require.InDelta(t, 400, l.tpm.LevelAt(t0), 1e-6)
}
