package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/worker"
)

// tightModel has a 1 RPM lane (strategy rpm: one request now, the next a
// minute later), so that on the worker's fake clock each Advance of a
// minute lets the scheduler claim, and the lane admit, exactly one job: the
// order of the calls is the claim order of Postgres.
const tightModel = "tight"

// admissionBundle is a worker and a store on one fake clock.
type admissionBundle struct {
	*testBundle
	w     *worker.Worker
	clock *clockwork.FakeClock
	ctx   context.Context
}

func setupAdmission(t *testing.T, seed uint64, order store.Order) *admissionBundle {
	t.Helper()
	// The simulator sends no rate-limit headers (no limits), which would
	// recalibrate the lane to the simulator's own quota.
	tb := setup(t, upstreamsim.Config{Seed: seed, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	clock := clockwork.NewFakeClockAt(time.Now())
	st, err := store.Open(context.Background(), storetest.NewDB(t), store.WithClock(clock), store.WithOrder(order))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	tb.store, tb.letters.store = st, st
	w := tb.start(t, func(c *worker.Config) {
		c.Store, c.Clock, c.Strategy = st.Queue(), clock, shaping.StrategyRPM
		c.Catalog.Default = llmq.Model{RPM: 1}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ab := &admissionBundle{testBundle: tb, w: w, clock: clock, ctx: ctx}
	// The plug takes the lane's one request of this minute.
	ab.publish(t, jobJSON("plug", tightModel, ""))
	require.Equal(t, llmq.StatusSucceeded, ab.waitTerminal(t, []string{"plug"}, 20*time.Second)["plug"].Status)
	return ab
}

// record publishes jobs and waits until they are recorded in Postgres (at
// the clock's time).
func (ab *admissionBundle) record(t *testing.T, jobs map[string]string) {
	t.Helper()
	for id, extra := range jobs {
		ab.publish(t, jobJSON(id, tightModel, extra))
	}
	require.Eventually(t, func() bool {
		return ab.count(t, fmt.Sprintf(`requested_model = '%s' AND id <> 'plug'`, tightModel)) == len(jobs)
	}, 10*time.Second, time.Millisecond)
}

// lead records a job that the idle lane claims at once and holds, waiting
// for the next minute: the jobs recorded after it wait queued in Postgres.
func (ab *admissionBundle) lead(t *testing.T) {
	t.Helper()
	ab.publish(t, jobJSON("lead", tightModel, ""))
	require.Eventually(t, func() bool { return ab.count(t, `id = 'lead' AND status = 'running'`) == 1 },
		10*time.Second, time.Millisecond)
}

// next lets a minute pass (and a second: the bucket's refill is floating
// point) and returns the id of the one job that finished.
func (ab *admissionBundle) next(t *testing.T, ids []string) string {
	t.Helper()
	before := ab.succeeded(t, ids)
	ab.clock.Advance(time.Minute + time.Second)
	var done []string
	require.Eventually(t, func() bool {
		done = ab.succeeded(t, ids)
		return len(done) > len(before)
	}, 10*time.Second, 5*time.Millisecond)
	require.Len(t, done, len(before)+1, "one admission per minute")
	for _, id := range done {
		if !contains(before, id) {
			return id
		}
	}
	t.Fatalf("no new job among %v", done)
	return ""
}

func (ab *admissionBundle) succeeded(t *testing.T, ids []string) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		rec, err := ab.store.Jobs().Get(context.Background(), llmq.DefaultTenant, id)
		if err == nil && rec.Status == llmq.StatusSucceeded {
			out = append(out, id)
		}
	}
	return out
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func withPriority(p llmq.Priority) string { return fmt.Sprintf(`,"priority":%q`, p) }

// TestWorkerClaimsByPriority: low jobs queued first, high jobs queued after
// them, on a lane that admits one job a minute: once the job the lane held
// is through, both high jobs go before the low ones; the backlog waits
// queued in Postgres, not running.
func TestWorkerClaimsByPriority(t *testing.T) {
	t.Parallel()
	ab := setupAdmission(t, 21, store.Order{AgingStep: time.Hour}) // no aging within this test
	ab.lead(t)
	low, high := withPriority(llmq.PriorityLow), withPriority(llmq.PriorityHigh)
	jobs := map[string]string{"lead": "", "low-1": low, "low-2": low, "low-3": low}
	ab.record(t, jobs)
	ab.clock.Advance(time.Second)
	jobs["high-1"], jobs["high-2"] = high, high
	ab.record(t, jobs)
	require.Equal(t, 1, ab.count(t, `status = 'running'`), "nothing is claimed that the lane cannot admit soon")
	require.Equal(t, store.WaitingReasonProviderQuota, ab.get(t, "low-1").WaitingReason)

	all := []string{"lead", "low-1", "low-2", "low-3", "high-1", "high-2"}
	require.Equal(t, "lead", ab.next(t, all))
	first, second := ab.next(t, all), ab.next(t, all)
	require.ElementsMatch(t, []string{"high-1", "high-2"}, []string{first, second})
	for range 3 {
		require.Contains(t, []string{"low-1", "low-2", "low-3"}, ab.next(t, all))
	}
	require.EqualValues(t, 7, ab.sim.Sim.Stats().Models[tightModel].Accepted, "one call per job")
}

// TestWorkerAgingLetsALowJobPass: with an aging step of 10 s, a low job
// recorded at T0 sorts at T0+20s: after a high job recorded at T0+15s, and
// before one recorded at T0+25s.
func TestWorkerAgingLetsALowJobPass(t *testing.T) {
	t.Parallel()
	ab := setupAdmission(t, 22, store.Order{AgingStep: 10 * time.Second})
	ab.lead(t)
	high := withPriority(llmq.PriorityHigh)
	jobs := map[string]string{"lead": "", "low": withPriority(llmq.PriorityLow)}
	ab.record(t, jobs)
	ab.clock.Advance(15 * time.Second)
	jobs["h-15"] = high
	ab.record(t, jobs)
	ab.clock.Advance(10 * time.Second)
	jobs["h-25"] = high
	ab.record(t, jobs)

	ids := []string{"lead", "low", "h-15", "h-25"}
	require.Equal(t, "lead", ab.next(t, ids))
	require.Equal(t, "h-15", ab.next(t, ids))
	require.Equal(t, "low", ab.next(t, ids))
	require.Equal(t, "h-25", ab.next(t, ids))
}

// TestWorkerExpiresOverdueQueuedJobs: a queued job whose deadline passes
// before the lane has room for it is expired by the reaper, without a
// call; one whose deadline leaves time runs.
func TestWorkerExpiresOverdueQueuedJobs(t *testing.T) {
	t.Parallel()
	ab := setupAdmission(t, 23, store.Order{})
	ab.lead(t)
	deadline := func(d time.Duration) string {
		return `,"deadline":"` + ab.clock.Now().Add(d).UTC().Format(time.RFC3339Nano) + `"`
	}
	ab.record(t, map[string]string{"lead": "", "too-late": deadline(30 * time.Second)})
	ab.clock.Advance(35 * time.Second) // the reaper sweeps every 5 s
	rec := ab.waitTerminal(t, []string{"too-late"}, 10*time.Second)["too-late"]
	require.Equal(t, llmq.StatusExpired, rec.Status)
	require.Equal(t, store.ErrorCodeExpired, rec.ErrorCode)
	require.Zero(t, rec.Attempts)
	require.EqualValues(t, 1, ab.sim.Sim.Stats().Models[tightModel].Accepted, "the plug's call only")

	ab.record(t, map[string]string{"lead": "", "too-late": "", "in-time": deadline(5 * time.Minute)})
	require.Equal(t, "lead", ab.next(t, []string{"lead", "in-time"}))
	require.Equal(t, "in-time", ab.next(t, []string{"lead", "in-time"}))
	require.EqualValues(t, 3, ab.sim.Sim.Stats().Models[tightModel].Accepted)
}
