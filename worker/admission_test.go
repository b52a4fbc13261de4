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
	"github.com/llmq/llmq/worker"
)

// tightModel has a 1 RPM lane (strategy rpm: one request now, the next a
// minute later), so that on the worker's fake clock each Advance of a
// minute admits exactly one job and the order of admissions is the
// scheduler's.
const tightModel = "tight"

// admissionBundle is a worker whose lanes run on a fake clock.
type admissionBundle struct {
	*testBundle
	w     *worker.Worker
	clock *clockwork.FakeClock
	ctx   context.Context
}

func setupAdmission(t *testing.T, seed uint64, agingStep time.Duration) *admissionBundle {
	t.Helper()
	// The simulator sends no rate-limit headers (no limits), which would
	// recalibrate the lane to the simulator's own quota.
	tb := setup(t, upstreamsim.Config{Seed: seed, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	clock := clockwork.NewFakeClockAt(time.Now())
	w := tb.start(t, func(c *worker.Config) {
		c.Clock, c.Strategy, c.AgingStep = clock, shaping.StrategyRPM, agingStep
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

// holding waits until the lane's dispatcher waits on the clock for the
// next minute with one job and queued jobs wait behind it.
func (ab *admissionBundle) holding(t *testing.T, queued int) {
	t.Helper()
	// The gauges' ticker is the other waiter.
	require.NoError(t, ab.clock.BlockUntilContext(ab.ctx, 2))
	deadline := time.Now().Add(10 * time.Second)
	for got := ab.w.Waiting(tightModel); got != queued; got = ab.w.Waiting(tightModel) {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs queued, want %d", got, queued)
		}
		time.Sleep(time.Millisecond) // polling the worker's queue; not a correctness wait
	}
}

// next lets the lane admit one more job and returns the id of the job that
// finished, checking that it is the only one.
func (ab *admissionBundle) next(t *testing.T, ids []string) string {
	t.Helper()
	before := ab.succeeded(t, ids)
	ab.clock.Advance(time.Minute)
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
		rec, err := ab.store.GetByID(context.Background(), id)
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

// TestWorkerAdmitsByPriority: low jobs queued first, high jobs queued after
// them, on a lane that admits one job a minute: once the low job already
// in the lane is through, both high jobs go before the other low ones.
func TestWorkerAdmitsByPriority(t *testing.T) {
	t.Parallel()
	ab := setupAdmission(t, 21, time.Hour) // no aging within this test
	lows := []string{"low-1", "low-2", "low-3"}
	highs := []string{"high-1", "high-2"}
	for _, id := range lows {
		ab.publish(t, jobJSON(id, tightModel, withPriority(llmq.PriorityLow)))
	}
	ab.holding(t, 2)
	for _, id := range highs {
		ab.publish(t, jobJSON(id, tightModel, withPriority(llmq.PriorityHigh)))
	}
	ab.holding(t, 4)

	all := append(append([]string(nil), lows...), highs...)
	first := ab.next(t, all)
	require.Contains(t, lows, first, "the low job the lane held before the high ones came")
	ab.holding(t, 3)
	require.Contains(t, highs, ab.next(t, all))
	ab.holding(t, 2)
	require.Contains(t, highs, ab.next(t, all))
	ab.holding(t, 1)
	require.Contains(t, lows, ab.next(t, all))
	ab.holding(t, 0)
	require.Contains(t, lows, ab.next(t, all))
	require.EqualValues(t, 6, ab.sim.Sim.Stats().Models[tightModel].Accepted, "one call per job")
}

// TestWorkerAgingLetsALowJobPass: with an aging step of one minute, a low
// job queued at T0 ranks with a high job queued at T0+2min, and wins the
// tie by arriving first; until then fresher high jobs pass it.
func TestWorkerAgingLetsALowJobPass(t *testing.T) {
	t.Parallel()
	ab := setupAdmission(t, 22, time.Minute)
	high := withPriority(llmq.PriorityHigh)
	ids := []string{"h-0", "h-1", "h-2", "h-3", "low"}
	ab.publish(t, jobJSON("h-0", tightModel, high))
	ab.holding(t, 0) // h-0 waits in the lane for T0+1min
	ab.publish(t, jobJSON("low", tightModel, withPriority(llmq.PriorityLow)))
	ab.publish(t, jobJSON("h-1", tightModel, high))
	ab.holding(t, 2)

	// T0+1min: low ranks 2-1 = 1, h-1 (queued at T0) 0-1 = -1.
	require.Equal(t, "h-0", ab.next(t, ids))
	ab.holding(t, 1)
	ab.publish(t, jobJSON("h-2", tightModel, high))
	ab.holding(t, 2)
	// T0+2min: low ranks 2-2 = 0, h-2 (queued at T0+1min) 0-1 = -1.
	require.Equal(t, "h-1", ab.next(t, ids))
	ab.holding(t, 1)
	ab.publish(t, jobJSON("h-3", tightModel, high))
	ab.holding(t, 2)
	// T0+3min: low ranks 2-3 = -1, h-3 (queued at T0+2min) 0-1 = -1: a
	// tie, and low came first.
	require.Equal(t, "h-2", ab.next(t, ids))
	ab.holding(t, 1)
	require.Equal(t, "low", ab.next(t, ids))
	ab.holding(t, 0)
	require.Equal(t, "h-3", ab.next(t, ids))
}

// TestWorkerExpiresAJobThatCannotStartByItsDeadline: the lane's next
// request is a minute away; a job whose deadline comes sooner is expired at
// admission without any call, and one whose deadline leaves time waits and
// runs.
func TestWorkerExpiresAJobThatCannotStartByItsDeadline(t *testing.T) {
	t.Parallel()
	ab := setupAdmission(t, 23, 0)
	deadline := func(d time.Duration) string {
		return `,"deadline":"` + ab.clock.Now().Add(d).UTC().Format(time.RFC3339Nano) + `"`
	}
	ab.publish(t, jobJSON("too-late", tightModel, deadline(30*time.Second)))
	rec := ab.waitTerminal(t, []string{"too-late"}, 10*time.Second)["too-late"]
	require.Equal(t, llmq.StatusExpired, rec.Status)
	require.Equal(t, store.ErrorCodeExpired, rec.ErrorCode)
	require.Empty(t, rec.UsedModel)
	require.EqualValues(t, 1, ab.sim.Sim.Stats().Models[tightModel].Accepted, "the plug's call only")

	ab.publish(t, jobJSON("in-time", tightModel, deadline(5*time.Minute)))
	ab.holding(t, 0)
	require.Equal(t, "in-time", ab.next(t, []string{"in-time"}))
	require.EqualValues(t, 2, ab.sim.Sim.Stats().Models[tightModel].Accepted)
}
