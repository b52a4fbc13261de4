package shaping

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLaneShareOscillates: a replica's share raised and lowered every
// 500 ms (0.17, 0.48) while reservations wait, one of them larger than the
// lane's capacity at the low share: each is ready within its tokens and
// those queued ahead of it over the mean share's refill, plus a second. A
// raised share must bring the queued ready times earlier, as a lowered one
// moves them later; otherwise every lowering compounds and the lane stalls.
func TestLaneShareOscillates(t *testing.T) {
	t.Parallel()
	const tpm = 6000.0 // 100 tokens a second
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: tpm, ColdStart: ColdStartStatic,
		WarmUp: -1, Start: StartEmpty, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	shares := [2]float64{0.17, 0.48}
	require.NoError(t, lane.SetShareAt(t0, shares[0]))
	require.InDelta(t, 0.17*tpm, lane.tpm.Capacity(), 1e-9)
	sizes := []int{120, 2000, 120, 500} // 2000 > 1020, the capacity at 0.17
	rs := make([]Reservation, len(sizes))
	bounds := make([]time.Time, len(sizes))
	mean := (shares[0] + shares[1]) / 2
	ahead := 0
	for i, n := range sizes {
		rs[i], err = lane.ReserveAt(t0, Request{PromptTokens: n - 1, MaxOutputTokens: 1})
		require.NoError(t, err)
		ahead += n
		bounds[i] = sec(float64(ahead)/(mean*tpm/60) + 1)
	}
	next := 0
	for step := 0; next < len(rs) && step < 1000; step++ {
		now := sec(0.5 * float64(step))
		require.NoError(t, lane.SetShareAt(now, shares[step%2]))
		for next < len(rs) && !lane.ReadyAt(&rs[next]).After(now) {
			t.Logf("%d tokens ready at %v (bound %v)", sizes[next], now.Sub(t0), bounds[next].Sub(t0))
			require.False(t, now.After(bounds[next]), "%d tokens: ready at %v, bound %v", sizes[next], now.Sub(t0), bounds[next].Sub(t0))
			lane.SendAt(now, rs[next])
			next++
		}
		if next < len(rs) {
			require.False(t, now.After(bounds[next]), "%d tokens still waiting at %v (ready at %v), bound %v",
				sizes[next], now.Sub(t0), lane.ReadyAt(&rs[next]).Sub(t0), bounds[next].Sub(t0))
		}
	}
	require.Equal(t, len(rs), next)
}

// TestLaneSharesOneProvider: three replicas' lanes on one minute bucket take
// a backlog each, their shares summing to 1, fixed or rotating every 500 ms.
// The provider never refuses a request, the backlogs are done within 120% of
// the physical limit, and the rotation costs at most 5% over fixed shares
// (docs/design/replicas.md#testlanesharesoneprovider).
func TestLaneSharesOneProvider(t *testing.T) {
	t.Parallel()
	const third = 1.0 / 3
	fixed := runShares(t, [3][3]float64{{third, third, third}, {third, third, third}, {third, third, third}})
	rotating := runShares(t, [3][3]float64{{0.17, 0.35, 0.48}, {0.48, 0.17, 0.35}, {0.35, 0.48, 0.17}})
	for _, r := range []sharesRun{fixed, rotating} {
		require.Zero(t, r.limited)
		require.Less(t, r.makespan, 1.2*r.physical)
	}
	require.Less(t, rotating.makespan, 1.05*fixed.makespan)
}

type sharesRun struct {
	calls, limited     int
	makespan, physical float64
}

// runShares runs three lanes of 100 backlog jobs each on one 600 RPM / 60k
// TPM provider, their shares set every 500 ms from rotations in turn.
func runShares(t *testing.T, rotations [3][3]float64) sharesRun {
	t.Helper()
	const rpm, tpm = 600.0, 60000.0
	clock := clockwork.NewFakeClockAt(t0)
	up := newUpstream(upstreamConfig{RPM: rpm, TPM: tpm, Headers: true, TTFT: 200 * time.Millisecond, PerToken: 5 * time.Millisecond}, t0)
	rng := rand.New(rand.NewPCG(13, 42))
	var reps []*simReplica
	backlogs := map[*simReplica][]*simJob{}
	for range 3 {
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: rpm, TPM: tpm, Clock: clock})
		require.NoError(t, err)
		r := &simReplica{lane: l}
		for range 100 {
			backlogs[r] = append(backlogs[r], backlogJob(rng))
		}
		reps = append(reps, r)
	}
	end := runReplicas(t, clock, up, reps, replicaJobs{
		take: func(r *simReplica) *simJob {
			if len(backlogs[r]) == 0 {
				return nil
			}
			j := backlogs[r][0]
			backlogs[r] = backlogs[r][1:]
			return j
		},
		giveBack: func(r *simReplica, j *simJob) { backlogs[r] = append([]*simJob{j}, backlogs[r]...) },
	}, func(now time.Time) {
		if step := now.Sub(t0) / (500 * time.Millisecond); now.Sub(t0)%(500*time.Millisecond) == 0 {
			for i, r := range reps {
				require.NoError(t, r.lane.SetShareAt(now, rotations[step%3][i]))
			}
		}
	})
	for _, r := range reps {
		require.Empty(t, backlogs[r])
	}
	run := sharesRun{
		calls: up.ok + up.limited, limited: up.limited, makespan: end.Sub(t0).Seconds(),
		physical: (up.okTokens - tpm) / (tpm / 60),
	}
	t.Logf("shares %v: makespan %.1f s, physical limit %.1f s, %d calls, %d answered 429", rotations[0], run.makespan, run.physical, run.calls, run.limited)
	return run
}

// simReplica is one replica's lane in a virtual-clock run of replicas
// (runReplicas): the job it reserved for and has not sent, and the calls
// it has in flight.
type simReplica struct {
	lane     *Lane
	job      *simJob
	res      *Reservation
	sendAt   time.Time // zero: not yet paced
	inFlight int
}

// replicaJobs is where a run's replicas take their jobs from and give a
// refused one back.
type replicaJobs struct {
	take     func(r *simReplica) *simJob // nil: none left for r
	giveBack func(r *simReplica, j *simJob)
}

// runReplicas drives reps against up every 10 ms of clock, for at most 10
// minutes, until no replica has a job or a call left: each replica
// reserves for the next job jobs give it, sends it when its lane admits it
// and gives a refused one back. tick runs first at every step. It returns
// when the last call that was not refused ended.
func runReplicas(t *testing.T, clock *clockwork.FakeClock, up *upstream, reps []*simReplica, jobs replicaJobs, tick func(now time.Time)) time.Time {
	t.Helper()
	type flight struct {
		r      *simReplica
		permit *Permit
		ans    answer
		doneAt time.Time
		job    *simJob
	}
	var flights []*flight
	const step = 10 * time.Millisecond
	end := t0
	for now := t0; now.Before(t0.Add(10 * time.Minute)); now = now.Add(step) {
		clock.Advance(now.Sub(clock.Now()))
		tick(now)
		kept := flights[:0]
		for _, f := range flights {
			if f.doneAt.After(now) {
				kept = append(kept, f)
				continue
			}
			f.r.inFlight--
			if f.ans.limited {
				jobs.giveBack(f.r, f.job)
			} else {
				up.finish(now, f.ans)
				end = now
			}
			require.NoError(t, f.permit.DoneAt(now, f.ans.outcome))
		}
		flights = kept
		idle := true
		for _, r := range reps {
			if r.job == nil {
				r.job = jobs.take(r)
			}
			if r.job == nil {
				continue
			}
			idle = false
			if r.res == nil {
				if r.lane.Share() == 0 {
					continue // as Admit: a lane on share 0 holds its job unreserved
				}
				res, err := r.lane.ReserveAt(now, Request{PromptTokens: r.job.prompt, MaxOutputTokens: r.job.maxOut})
				require.NoError(t, err)
				r.res = &res
			}
			if r.sendAt.IsZero() {
				if r.lane.ReadyAt(r.res).After(now) || r.lane.PausedUntil().After(now) || !r.lane.TryAcquireSlot() {
					continue
				}
				r.sendAt = r.lane.PaceReservationAt(now, r.res)
			}
			if r.sendAt.After(now) {
				continue
			}
			p := r.lane.SendAt(now, *r.res)
			a := up.call(now, r.job)
			flights = append(flights, &flight{r: r, permit: p, ans: a, doneAt: now.Add(a.latency), job: r.job})
			r.inFlight++
			r.job, r.res, r.sendAt = nil, nil, time.Time{}
		}
		if idle && len(flights) == 0 {
			break
		}
	}
	return end
}
