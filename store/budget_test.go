package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// budgetTenants: acme spends at most 10 USD a month, its project p 1 USD a
// day (and waits when over); project r rejects, project d degrades.
var budgetTenants = llmq.Tenants{"acme": {Scope: llmq.Scope{MonthlyCost: 10}, Projects: map[string]llmq.Scope{
	"p": {DailyCost: 1, OutputCap: 32}, "r": {DailyCost: 1, Overage: llmq.OverageReject},
	"d": {DailyCost: 1, Overage: llmq.OverageDegrade}}},
	"solo": {Scope: llmq.Scope{DailyCost: 1, Overage: llmq.OverageReject}}}

func budgetSetup(t *testing.T) *testBundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock), store.WithOrder(store.Order{Tenants: budgetTenants}))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return &testBundle{ctx: ctx, store: s, clock: clock}
}

// budgetOf returns acme's budget of project and period as it stands.
func (b *testBundle) budgetOf(t *testing.T, project string, period llmq.Period) store.BudgetUsage {
	t.Helper()
	us, err := b.store.Budgets().BudgetUsages(b.ctx, "acme")
	require.NoError(t, err)
	for _, u := range us {
		if u.Project == project && u.Period == period {
			return u
		}
	}
	t.Fatalf("no budget %s/%s", project, period)
	return store.BudgetUsage{}
}

func lease(id string) store.Lease {
	return store.Lease{Key: store.Key{Tenant: "acme", ID: id}, Token: 1}
}

// TestBudgetReserveSettleRelease: a call reserves its estimate on every
// budget of its scope, settles to its price or gives it back; the
// thresholds alert once each; past 90% a low-priority call waits and the
// others reserve their capped price; a call that would pass the budget is
// refused and the scope held.
func TestBudgetReserveSettleRelease(t *testing.T) {
	t.Parallel()
	b := budgetSetup(t)
	reserve := func(id string, cost, capped float64, low bool) store.BudgetOutcome {
		t.Helper()
		out, err := b.store.Budgets().ReserveBudget(b.ctx, store.BudgetReservation{Lease: lease(id), Project: "p", Low: low,
			CostUSD: cost, CappedCostUSD: capped})
		require.NoError(t, err)
		return out
	}
	day := func() store.BudgetUsage { return b.budgetOf(t, "p", llmq.PeriodDay) }
	month := func() store.BudgetUsage { return b.budgetOf(t, "", llmq.PeriodMonth) }

	out := reserve("a", 0.5, 0.1, false)
	require.Equal(t, store.BudgetOutcome{Reserved: true, ReservedUSD: 0.5, OutputCap: 32}, out)
	require.Equal(t, 0.5, day().ReservedUSD)
	require.Equal(t, 0.5, month().ReservedUSD, "every budget of the scope")
	require.NoError(t, b.store.Budgets().SettleBudget(b.ctx, lease("a"), 0.25))
	require.Equal(t, []float64{0.25, 0}, []float64{day().SpentUSD, day().ReservedUSD})
	require.Equal(t, []float64{0.25, 0}, []float64{month().SpentUSD, month().ReservedUSD})
	require.NoError(t, b.store.Budgets().SettleBudget(b.ctx, lease("a"), 0.25), "settled once: a second settle finds no reservation")
	require.Equal(t, 0.25, day().SpentUSD)

	out = reserve("b", 0.5, 0.1, false) // demand 0.75: 70% crossed
	require.True(t, out.Reserved)
	require.Len(t, out.Alerts, 1)
	require.Equal(t, store.BudgetAlert{Budget: budgetTenants.Budgets("acme", "p")[1], Percent: 70,
		PeriodStart: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), SpentUSD: 0.25, ReservedUSD: 0.5}, out.Alerts[0])
	require.Equal(t, llmq.Budget70, day().State)
	require.NoError(t, b.store.Budgets().ReleaseBudget(b.ctx, lease("b")))
	require.Equal(t, []float64{0.25, 0}, []float64{day().SpentUSD, day().ReservedUSD}, "a failed call costs nothing")
	out = reserve("c", 0.5, 0.1, false)
	require.Empty(t, out.Alerts, "70% is alerted once per period")
	require.NoError(t, b.store.Budgets().SettleBudget(b.ctx, lease("c"), 0.5)) // spent 0.75

	// Past 90%: the full price would reach it, so the call reserves its
	// capped price; a low-priority one waits.
	out = reserve("d", 0.2, 0.1, false)
	require.Equal(t, store.BudgetOutcome{Reserved: true, ReservedUSD: 0.1, Capped: true, OutputCap: 32}, out)
	out = reserve("e", 0.2, 0.1, true)
	require.False(t, out.Reserved)
	require.False(t, out.Exceeded)
	require.Equal(t, "p", out.Refused.Project)
	require.Equal(t, []int{90}, percents(out.Alerts))
	require.Equal(t, "low", day().Hold)
	require.Equal(t, 0.1, day().ReservedUSD, "a refused call reserves nothing")

	// 0.75 + 0.1 reserved + 0.2 capped > 1: refused, the scope held.
	out = reserve("f", 0.4, 0.2, false)
	require.Equal(t, store.BudgetOutcome{Capped: true, OutputCap: 32, Refused: &budgetTenants.Budgets("acme", "p")[1],
		Exceeded: true, Alerts: out.Alerts}, out)
	require.Equal(t, []int{100}, percents(out.Alerts))
	require.Equal(t, "all", day().Hold)
	require.Equal(t, llmq.BudgetExceeded, day().State, "0.75 spent + 0.1 reserved, but a call was refused")
	out = reserve("g", 0.15, 0.15, false) // exactly at the limit: 0.75 + 0.1 + 0.15
	require.True(t, out.Reserved, "a reservation up to the limit fits")
	require.Empty(t, out.Alerts)
	require.Equal(t, llmq.BudgetExceeded, day().State)

	require.NoError(t, b.store.Budgets().ReleaseBudget(b.ctx, lease("d")))
	require.Equal(t, "", day().Hold, "a reservation given back lifts the hold: a held job may fit now")
	require.Equal(t, 0.15, day().ReservedUSD)
	require.Equal(t, 0.15, month().ReservedUSD)

	// December 1st is a new day and a new month: nothing spent, nothing
	// alerted (g's reservation stays with November's budgets).
	b.clock.Advance(12 * time.Hour)
	out = reserve("h", 0.8, 0.1, false)
	require.Equal(t, []int{70}, percents(out.Alerts))
	require.Equal(t, []float64{0, 0.8}, []float64{day().SpentUSD, day().ReservedUSD})
	require.Equal(t, []float64{0, 0.8}, []float64{month().SpentUSD, month().ReservedUSD})
	require.NoError(t, b.store.Budgets().SettleBudget(b.ctx, lease("g"), 0.15))
	require.Equal(t, 0.0, day().SpentUSD, "a call is charged to the period it reserved in")
}

func percents(as []store.BudgetAlert) []int {
	var out []int
	for _, a := range as {
		out = append(out, a.Percent)
	}
	return out
}

// TestBudgetBurstAtTheEdge: 200 concurrent reservations of 0.01 USD
// against a budget 95% spent: exactly the 5 that fit are reserved, and
// the budget ends exactly full. Tenant solo has one budget; acme/r two
// (acme's month and r's day), locked together.
func TestBudgetBurstAtTheEdge(t *testing.T) {
	t.Parallel()
	for _, scope := range []store.Key{{Tenant: "solo"}, {Tenant: "acme", ID: "r"}} {
		t.Run(scope.String(), func(t *testing.T) {
			t.Parallel()
			b := budgetSetup(t)
			res := func(id string, cost float64) store.BudgetOutcome {
				out, err := b.store.Budgets().ReserveBudget(b.ctx, store.BudgetReservation{Project: scope.ID,
					Lease: store.Lease{Key: store.Key{Tenant: scope.Tenant, ID: id}, Token: 1}, CostUSD: cost, CappedCostUSD: cost})
				require.NoError(t, err)
				return out
			}
			require.Equal(t, []int{70, 90}, percents(res("seed", 0.95).Alerts))
			require.NoError(t, b.store.Budgets().SettleBudget(b.ctx, store.Lease{Key: store.Key{Tenant: scope.Tenant, ID: "seed"}, Token: 1}, 0.95))

			var (
				mu                 sync.Mutex
				reserved, exceeded int
				alerts             []int
				group              sync.WaitGroup
				start              = make(chan struct{})
			)
			for i := range 200 {
				group.Go(func() {
					<-start
					out := res(fmt.Sprint("burst-", i), 0.01)
					mu.Lock()
					defer mu.Unlock()
					if out.Reserved {
						reserved++
					}
					if out.Exceeded {
						exceeded++
					}
					alerts = append(alerts, percents(out.Alerts)...)
				})
			}
			close(start)
			group.Wait()
			require.Equal(t, 5, reserved)
			require.Equal(t, 195, exceeded)
			require.Equal(t, []int{100}, alerts, "the last threshold once, whatever the concurrency")
			us, err := b.store.Budgets().BudgetUsages(b.ctx, scope.Tenant)
			require.NoError(t, err)
			for _, u := range us {
				if u.Project == scope.ID && u.Period == llmq.PeriodDay {
					require.InDelta(t, 0.95, u.SpentUSD, 1e-12)
					require.InDelta(t, 0.05, u.ReservedUSD, 1e-12)
					require.Equal(t, "", u.Hold, "a rejecting budget holds nothing: its jobs are dead-lettered")
				}
			}
		})
	}
}

// TestBudgetHoldsTheClaim: a held scope's jobs stay queued with waiting
// reason budget (low-priority ones only, for a low hold; deferrable ones
// of a degrading scope are claimed, to move to the batch lane); the
// reaper's sweep gives back the reservations of jobs no longer held.
func TestBudgetHoldsTheClaim(t *testing.T) {
	t.Parallel()
	b := budgetSetup(t)
	job := func(id, project string, p llmq.Priority, deferrable bool) *llmq.Job {
		j := newJob(t, id)
		j.Project, j.Priority, j.Deadline, j.Deferrable = project, p, nil, deferrable
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
		return j
	}
	claim := func() []string {
		t.Helper()
		recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 100})
		require.NoError(t, err)
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	job("first", "p", llmq.PriorityNormal, false)
	held := claim()
	require.Equal(t, []string{"first"}, held)
	l := store.Lease{Key: store.Key{Tenant: "acme", ID: "first"}, Token: 1}
	out, err := b.store.Budgets().ReserveBudget(b.ctx, store.BudgetReservation{Lease: l, Project: "p", CostUSD: 0.95, CappedCostUSD: 0.95})
	require.NoError(t, err)
	require.True(t, out.Reserved)
	out, err = b.store.Budgets().ReserveBudget(b.ctx, store.BudgetReservation{Lease: lease("x"), Project: "p", CostUSD: 0.1, CappedCostUSD: 0.1})
	require.NoError(t, err)
	require.True(t, out.Exceeded)

	job("p-normal", "p", llmq.PriorityNormal, false)
	job("p-low", "p", llmq.PriorityLow, true)
	job("other", "q", llmq.PriorityNormal, false)
	job("d-def", "d", llmq.PriorityNormal, true)
	rec, err := b.store.Jobs().Get(b.ctx, "acme", "p-normal")
	require.NoError(t, err)
	require.Equal(t, store.WaitingReasonBudget, rec.WaitingReason)
	rec, err = b.store.Jobs().Get(b.ctx, "acme", "other")
	require.NoError(t, err)
	require.Equal(t, "", rec.WaitingReason)
	require.ElementsMatch(t, []string{"other", "d-def"}, claim(), "p is held; the others are not")

	// The holder of "first" dies: its reservation is given back, the hold
	// lifted, and p's jobs are claimed again.
	require.NoError(t, b.store.Queue().Release(b.ctx, l))
	n, err := b.store.Budgets().ReleaseOrphanBudgets(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	u := b.budgetOf(t, "p", llmq.PeriodDay)
	require.Equal(t, []any{0.0, 0.0, ""}, []any{u.SpentUSD, u.ReservedUSD, u.Hold})
	require.ElementsMatch(t, []string{"first", "p-normal", "p-low"}, claim())
	n, err = b.store.Budgets().ReleaseOrphanBudgets(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// A degrading scope past 90% holds its low-priority jobs but for the
	// deferrable ones, which the worker moves to the batch lane.
	_, err = b.store.Budgets().ReserveBudget(b.ctx, store.BudgetReservation{Lease: lease("y"), Project: "d", CostUSD: 0.95, CappedCostUSD: 0.95})
	require.NoError(t, err)
	out, err = b.store.Budgets().ReserveBudget(b.ctx, store.BudgetReservation{Lease: lease("z"), Project: "d", Low: true})
	require.NoError(t, err)
	require.False(t, out.Reserved)
	job("d-low", "d", llmq.PriorityLow, false)
	job("d-low-def", "d", llmq.PriorityLow, true)
	job("d-normal", "d", llmq.PriorityNormal, false)
	require.ElementsMatch(t, []string{"d-low-def", "d-normal"}, claim())
	dl := store.Lease{Key: store.Key{Tenant: "acme", ID: "d-low-def"}, Token: 1}
	require.NoError(t, b.store.Budgets().MoveToBatch(b.ctx, dl, "budget: acme/d daily"))
	rec, err = b.store.Jobs().Get(b.ctx, "acme", "d-low-def")
	require.NoError(t, err)
	require.Equal(t, []string{string(llmq.StatusQueued), store.LaneBatch, "budget: acme/d daily", store.WaitingReasonBatch},
		[]string{string(rec.Status), rec.Lane, rec.LaneReason, rec.WaitingReason})

	// The batch lane reserves nothing: its price is charged when the
	// results come home.
	before := b.budgetOf(t, "d", llmq.PeriodDay)
	monthBefore := b.budgetOf(t, "", llmq.PeriodMonth)
	_, jobs, err := b.store.Batches().ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_1", Model: "big", MaxJobs: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = b.store.Batches().MarkBatchSubmitted(b.ctx, store.BatchSubmission{ID: "lb_1", ProviderBatchID: "batch_1", Status: store.BatchValidating})
	require.NoError(t, err)
	_, err = b.store.Batches().IngestBatch(b.ctx, store.BatchIngest{BatchID: "lb_1", Results: []store.BatchResult{
		{Job: dl.Key, Response: []byte(`{}`), UsedModel: "big", CostUSD: 0.02, LiveCostUSD: 0.04}}})
	require.NoError(t, err)
	require.InDelta(t, before.SpentUSD+0.02, b.budgetOf(t, "d", llmq.PeriodDay).SpentUSD, 1e-12)
	require.InDelta(t, monthBefore.SpentUSD+0.02, b.budgetOf(t, "", llmq.PeriodMonth).SpentUSD, 1e-12)
	require.InDelta(t, 0, b.budgetOf(t, "p", llmq.PeriodDay).SpentUSD, 1e-12, "another project's budget is not charged")
}
