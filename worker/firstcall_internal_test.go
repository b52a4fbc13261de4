package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// stageSums reads each stage's sum of firstCallStage, in milliseconds,
// and the jobs counted by what woke their round.
func stageSums(t *testing.T, reg *prometheus.Registry) (ms map[string]int64, by map[string]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	ms, by = map[string]int64{}, map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "llmq_first_call_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var stage, woken string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "stage":
					stage = l.GetValue()
				case "woken_by":
					woken = l.GetValue()
				}
			}
			ms[stage] += time.Duration(m.GetHistogram().GetSampleSum() * float64(time.Second)).Round(time.Millisecond).Milliseconds()
			if stage == "wake" {
				by[woken] += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return ms, by
}

// TestFirstCallStages: a job's time from its record to its first call
// splits into stages that add up to it, each from the mark before; a mark
// before the record (a round woken before it, lanes without room since
// before it) ends its stage at once.
func TestFirstCallStages(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name    string
		created time.Time
		f       firstCall
		want    map[string]int64
	}{{
		name: "woken after the record", created: at(0),
		f: firstCall{claimTimes: claimTimes{wake: claimWake{at: at(5), by: wokenByNotify}, sent: at(7), got: at(20)},
			queued: at(21), admitted: at(24)},
		want: map[string]int64{"wake": 5, "room": 0, "round": 2, "claim": 13, "dispatch": 1, "lane": 3, "record": 106},
	}, {
		name: "a round woken before the record claims it", created: at(10),
		f: firstCall{claimTimes: claimTimes{wake: claimWake{at: at(5), by: wokenByOther}, sent: at(12), got: at(20)},
			queued: at(21), admitted: at(21)},
		want: map[string]int64{"wake": 0, "room": 0, "round": 2, "claim": 8, "dispatch": 1, "lane": 0, "record": 109},
	}, {
		name: "no room from after the record", created: at(0),
		f: firstCall{claimTimes: claimTimes{heldSince: at(4), wake: claimWake{at: at(100), by: wokenByOther}, sent: at(101), got: at(110)},
			queued: at(110), admitted: at(110)},
		want: map[string]int64{"wake": 4, "room": 96, "round": 1, "claim": 9, "dispatch": 0, "lane": 0, "record": 20},
	}, {
		name: "no room since before the record", created: at(50),
		f: firstCall{claimTimes: claimTimes{heldSince: at(4), wake: claimWake{at: at(100), by: wokenByTick}, sent: at(101), got: at(110)},
			queued: at(110), admitted: at(110)},
		want: map[string]int64{"wake": 0, "room": 50, "round": 1, "claim": 9, "dispatch": 0, "lane": 0, "record": 20},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m := newMetrics(reg)
			tc.f.observe(m.firstCallStage, tc.created, at(130))
			ms, by := stageSums(t, reg)
			require.Equal(t, tc.want, ms)
			require.Equal(t, map[string]uint64{tc.f.wake.by: 1}, by)
			var total int64
			for _, v := range ms {
				total += v
			}
			require.Equal(t, at(130).Sub(tc.created).Milliseconds(), total, "the stages add up to the time to the call")
		})
	}
}

// TestClaimerWake: a round takes the first wake-up asked since the round
// before, with its reason (a notification learns the model too), and
// forgets it; a round no one woke was woken by the tick, at its own time.
func TestClaimerWake(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := newClaimer(claimerConfig{Store: &memClaims{}, Lanes: &laneSet{}, Scopes: openClaimScopes(t), Held: func() int64 { return 0 },
		Start: func(*store.JobRecord, claimTimes) {}, Clock: clock})
	require.NoError(t, err)
	first := clock.Now()
	c.heard("m")
	clock.Advance(time.Millisecond)
	c.poke()
	c.pokeBy(wokenByIngest)
	require.Equal(t, claimWake{at: first, by: wokenByNotify}, c.takeWake(), "the first wake-up, not the last")
	require.True(t, c.newModels["m"], "the model heard is claimed for")
	clock.Advance(time.Millisecond)
	require.Equal(t, claimWake{at: clock.Now(), by: wokenByTick}, c.takeWake(), "taken: the next round is the tick's")
	<-c.wake
}

// openClaimScopes are scopes of no tenant quota.
func openClaimScopes(t *testing.T) *scopes {
	t.Helper()
	ss, err := newScopes(scopesConfig{Tenants: func() llmq.Tenants { return nil }, Metrics: newScopeMetrics(prometheus.NewRegistry())})
	require.NoError(t, err)
	return ss
}

// TestClaimerRoomSince: a round that finds the lanes without room notes
// when, and so does a claim that comes back full (the jobs it left wait
// for room from then) unless noted before; the claims carry it to the jobs
// they start until one comes back short.
func TestClaimerRoomSince(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cat := llmq.Catalog{Models: map[string]llmq.Model{"m": {RPM: 60_000, TPM: 10_000_000}}}
	ls := startedLaneSet(t, clock, cat)
	st := &memClaims{queued: map[string][]*store.JobRecord{"m": {{ID: "1"}, {ID: "2"}}}}
	held := int64(1)
	var starts []claimTimes
	c, err := newClaimer(claimerConfig{Store: st, Lanes: ls, Scopes: openClaimScopes(t), Owner: "w1", MaxInFlight: 1,
		Catalog: func() llmq.Catalog { return cat }, Held: func() int64 { return held },
		Start: func(_ *store.JobRecord, at claimTimes) { starts = append(starts, at) },
		Clock: clock, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	s := &scheduler{models: map[string]bool{}, heldSince: map[string]time.Time{}, notes: map[string]modelNote{},
		scopeNotes: map[store.ScopeRef]time.Time{}}
	round := func() {
		clock.Advance(time.Second)
		s.wake = c.takeWake()
		c.scheduleRound(context.Background(), s)
	}
	c.learnModel("m")
	round()
	noRoom := clock.Now()
	require.Empty(t, st.requests, "no room: nothing claimed")
	round()
	require.Empty(t, st.requests)
	held = 0
	round()
	require.Len(t, starts, 1, "room for one")
	require.Equal(t, noRoom, starts[0].heldSince, "no room since the first round that found none")
	round()
	require.Len(t, starts, 2)
	require.Equal(t, noRoom, starts[1].heldSince, "the claim before came back full: still no room since then")
	round() // short: nothing left
	st.queued["m"] = []*store.JobRecord{{ID: "3"}, {ID: "4"}}
	c.learnModel("m")
	round()
	full := clock.Now()
	require.Len(t, starts, 3)
	require.Zero(t, starts[2].heldSince, "room at the claim before")
	round()
	require.Len(t, starts, 4)
	require.Equal(t, full, starts[3].heldSince, "the job the full claim left waited for room from then")
}

// startedLaneSet is a begun lane set of the models of cat, under the shape
// strategy, on clock, whose calls answer nothing.
func startedLaneSet(t *testing.T, clock clockwork.Clock, cat llmq.Catalog) *laneSet {
	t.Helper()
	up := upstreamFunc(func(context.Context, string, []byte) Reply { return Reply{} })
	ls, err := newLaneSet(laneSetConfig{Upstream: up, Scopes: openScopes{}, Metrics: newMetrics(prometheus.NewRegistry()),
		BudgetAllows: func(*job, float64) bool { return true }, Catalog: func() llmq.Catalog { return cat },
		Strategy: shaping.StrategyShape, QuotaScope: "sim", Clock: clock})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ls.begin(ctx, ctx)
	return ls
}
