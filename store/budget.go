package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// Budgets is the tenants' and projects' cost budgets (reservations held by
// the worker's calls, settled after them) and what the scopes used
// (usage.go). It is reached by Store.Budgets.
type Budgets struct{ *base }

// Budgets: every call of a job whose tenant or project has a cost budget
// reserves its estimated price on each of those budgets before it starts
// (ReserveBudget), atomically across workers, and settles it to the real
// price after (SettleBudget) or gives it back (ReleaseBudget). The rows live
// in Postgres (migration 0011), so every worker and replica shares them.
// docs/design/tenants.md#budgets.

// budgetSlack absorbs the rounding of float64 sums of USD amounts when a
// reservation is checked against a limit: a billionth of a dollar.
const budgetSlack = 1e-9

// BudgetReservation asks ReserveBudget for one call's reservation.
type BudgetReservation struct {
	// Lease is the job's and its holder's: the reservation is given back
	// by the reaper once the job is no longer held under it.
	Lease Lease
	// Project is the job's project ("" for none).
	Project string
	// Low says the job runs at low priority: it waits once a budget
	// passes llmq.BudgetHoldAt.
	Low bool
	// CostUSD is the call's price with its whole output allowance;
	// CappedCostUSD with the allowance capped at OutputCap (what the call
	// reserves once a budget passes llmq.BudgetHoldAt).
	CostUSD, CappedCostUSD float64
}

// BudgetOutcome is what ReserveBudget decided.
type BudgetOutcome struct {
	// Reserved says the call may go ahead; ReservedUSD is what it holds on
	// each of its budgets (0 when it has none).
	Reserved    bool
	ReservedUSD float64
	// Capped says a budget passed llmq.BudgetHoldAt: the call's output is
	// capped at OutputCap (the smallest cap of the job's budgets).
	Capped    bool
	OutputCap int
	// Refused is the budget that refused the call (nil when reserved).
	// Exceeded says the call would pass it; otherwise the job is low
	// priority and the budget passed llmq.BudgetHoldAt.
	Refused  *llmq.Budget
	Exceeded bool
	// Alerts are the thresholds this decision crossed first in their
	// period, already recorded as alerted: the caller sends them.
	Alerts []BudgetAlert
}

// BudgetAlert is a threshold of a budget crossed for the first time in its
// period.
type BudgetAlert struct {
	Budget llmq.Budget
	// Percent is 70, 90 or 100.
	Percent     int
	PeriodStart time.Time
	// SpentUSD and ReservedUSD are the budget's at the crossing, the
	// deciding call's estimate included in ReservedUSD.
	SpentUSD, ReservedUSD float64
}

// budgetRow is one budget as locked by a reservation.
type budgetRow struct {
	b               llmq.Budget
	start, end      time.Time
	spent, reserved float64
	alerted         int
}

// budgetChange is what a decision writes to one row.
type budgetChange struct {
	reserve float64
	alerted int
	hold    string
}

// Hold values of a budget row (budgets.hold).
const (
	holdLow = "low"
	holdAll = "all"
)

// decideBudget is the reservation's policy, pure: the rows are the job's
// budgets as locked. A call that would pass any budget is refused (the
// budget's scope waits, unless its policy rejects); once a budget would
// reach llmq.BudgetHoldAt, a low-priority call is refused and the others
// reserve their capped price. Thresholds are alerted on the demand: spent
// + reserved + this call's estimate.
func decideBudget(rows []budgetRow, r BudgetReservation) (BudgetOutcome, []budgetChange) {
	out := BudgetOutcome{OutputCap: llmq.OutputCapDefault}
	if len(rows) == 0 {
		return BudgetOutcome{Reserved: true}, nil
	}
	est := r.CostUSD
	for i, row := range rows {
		if i == 0 || row.b.OutputCap < out.OutputCap {
			out.OutputCap = row.b.OutputCap
		}
		if row.spent+row.reserved+r.CostUSD >= llmq.BudgetHoldAt*row.b.LimitUSD {
			out.Capped, est = true, r.CappedCostUSD
		}
	}
	ch := make([]budgetChange, len(rows))
	for i, row := range rows {
		demand := row.spent + row.reserved + est
		ch[i].alerted = row.alerted
		switch {
		case demand > row.b.LimitUSD+budgetSlack:
			if out.Refused == nil || !out.Exceeded {
				out.Refused, out.Exceeded = &rows[i].b, true
			}
			if row.b.Overage != llmq.OverageReject {
				ch[i].hold = holdAll
			}
		case r.Low && demand >= llmq.BudgetHoldAt*row.b.LimitUSD:
			if out.Refused == nil {
				out.Refused = &rows[i].b
			}
			ch[i].hold = holdLow
		}
	}
	out.Reserved = out.Refused == nil
	if out.Reserved {
		out.ReservedUSD = est
	}
	for i, row := range rows {
		if out.Reserved {
			ch[i].reserve = est
		}
		demand := row.spent + row.reserved + est
		for _, pct := range []int{70, 90, 100} {
			crossed := demand >= float64(pct)/100*row.b.LimitUSD
			if pct == 100 {
				crossed = demand > row.b.LimitUSD+budgetSlack // a call refused at this budget
			}
			if crossed && row.alerted < pct {
				ch[i].alerted = pct
				out.Alerts = append(out.Alerts, BudgetAlert{Budget: row.b, Percent: pct, PeriodStart: row.start,
					SpentUSD: row.spent, ReservedUSD: row.reserved + est})
			}
		}
	}
	return out, ch
}

// ReserveBudget reserves one call's price on every budget of the job's
// tenant and project (llmq.Tenants.Budgets of the store's tenants), for
// the periods that hold now, or none: one transaction locks the budget
// rows (created at their configured limit on first use) in key order, so
// concurrent reservations of one scope, from any worker, queue on the
// lock and each sees the others' reservations: together they cannot pass a
// limit. It records the thresholds crossed as alerted and, on a refusal,
// the hold of the refusing scope. A job without budgets is reserved at
// once without a write.
func (s *Budgets) ReserveBudget(ctx context.Context, r BudgetReservation) (BudgetOutcome, error) {
	budgets := s.order.tenants().Budgets(r.Lease.Tenant, r.Project)
	if len(budgets) == 0 {
		return BudgetOutcome{Reserved: true}, nil
	}
	now := s.clock()
	rows := make([]budgetRow, len(budgets))
	for i, b := range budgets {
		rows[i] = budgetRow{b: b, start: b.Period.Start(now), end: b.Period.End(now)}
	}
	slices.SortFunc(rows, func(a, b budgetRow) int { return compareBudgetKeys(a, b) })
	var out BudgetOutcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockBudgets(ctx, tx, rows); err != nil {
			return err
		}
		var ch []budgetChange
		out, ch = decideBudget(rows, r)
		return writeBudgets(ctx, tx, r.Lease, rows, ch)
	})
	if err != nil {
		return BudgetOutcome{}, fmt.Errorf("store: reserve budget %q: %w", r.Lease.String(), err)
	}
	return out, nil
}

// compareBudgetKeys orders rows as the budgets' primary key.
func compareBudgetKeys(a, b budgetRow) int {
	if c := cmpStrings(a.b.Project, b.b.Project); c != 0 {
		return c
	}
	if c := cmpStrings(string(a.b.Period), string(b.b.Period)); c != 0 {
		return c
	}
	return a.start.Compare(b.start)
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lockBudgets creates the rows that do not exist yet, brings their limits
// to the configuration and locks them in key order (one tenant: project,
// period, start), reading what they hold.
func lockBudgets(ctx context.Context, tx pgx.Tx, rows []budgetRow) error {
	n := len(rows)
	projects, periods := make([]string, n), make([]string, n)
	starts, ends := make([]time.Time, n), make([]time.Time, n)
	limits := make([]float64, n)
	for i, r := range rows {
		projects[i], periods[i], starts[i], ends[i], limits[i] = r.b.Project, string(r.b.Period), r.start, r.end, r.b.LimitUSD
	}
	res, err := tx.Query(ctx, `INSERT INTO budgets AS b (tenant, project, period, period_start, period_end, limit_usd)
		SELECT $1, u.project, u.period, u.start, u.end_, u.limit_ FROM unnest($2::text[], $3::text[], $4::timestamptz[],
			$5::timestamptz[], $6::numeric[]) AS u(project, period, start, end_, limit_)
		ORDER BY u.project, u.period, u.start
		ON CONFLICT (tenant, project, period, period_start) DO UPDATE SET limit_usd = excluded.limit_usd
		RETURNING b.project, b.period, b.spent_usd::float8, b.reserved_usd::float8, b.alerted`,
		rows[0].b.Tenant, projects, periods, starts, ends, limits)
	if err != nil {
		return err
	}
	var project, period string
	var spent, reserved float64
	var alerted int
	_, err = pgx.ForEachRow(res, []any{&project, &period, &spent, &reserved, &alerted}, func() error {
		for i := range rows {
			if rows[i].b.Project == project && string(rows[i].b.Period) == period {
				rows[i].spent, rows[i].reserved, rows[i].alerted = spent, reserved, alerted
			}
		}
		return nil
	})
	return err
}

// writeBudgets applies a decision's changes to the locked rows and records
// the reservation, if any, under l. A held scope whose policy is degrade
// is marked so: its deferrable jobs are still claimed, to move to the
// batch lane.
func writeBudgets(ctx context.Context, tx pgx.Tx, l Lease, rows []budgetRow, ch []budgetChange) error {
	n := len(rows)
	projects, periods := make([]string, n), make([]string, n)
	starts := make([]time.Time, n)
	reserve := make([]float64, n)
	alerted := make([]int, n)
	holds := make([]string, n)
	degrade := make([]bool, n)
	for i, r := range rows {
		projects[i], periods[i], starts[i] = r.b.Project, string(r.b.Period), r.start
		reserve[i], alerted[i], holds[i] = ch[i].reserve, ch[i].alerted, ch[i].hold
		degrade[i] = r.b.Overage == llmq.OverageDegrade
	}
	if _, err := tx.Exec(ctx, `UPDATE budgets b SET reserved_usd = b.reserved_usd + u.reserve, alerted = u.alerted,
			hold = CASE WHEN u.hold = '' THEN b.hold WHEN b.hold = 'all' THEN 'all' ELSE u.hold END,
			degrade = CASE WHEN u.hold = '' THEN b.degrade ELSE u.degrade END
		FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::numeric[], $6::int[], $8::text[], $7::bool[])
			AS u(project, period, start, reserve, alerted, hold, degrade)
		WHERE b.tenant = $1 AND b.project = u.project AND b.period = u.period AND b.period_start = u.start`,
		l.Tenant, projects, periods, starts, reserve, alerted, degrade, holds); err != nil {
		return err
	}
	if !slices.ContainsFunc(ch, func(c budgetChange) bool { return c.reserve > 0 }) {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO budget_reservations (tenant, job_id, lease_token, project, period, period_start, amount_usd)
		SELECT $1, $2, $3, u.project, u.period, u.start, u.amount FROM unnest($4::text[], $5::text[], $6::timestamptz[],
			$7::numeric[]) AS u(project, period, start, amount)
		ON CONFLICT (tenant, job_id, project, period, period_start) DO UPDATE
			SET amount_usd = budget_reservations.amount_usd + excluded.amount_usd, lease_token = excluded.lease_token`,
		l.Tenant, l.ID, l.Token, projects, periods, starts, reserve)
	return err
}

// SettleBudget settles the reservation of the call the holder of l made:
// each budget it was reserved on is charged costUSD, the real price, in
// place of the estimate. A job with no reservation under l changes
// nothing. (Thresholds are alerted when a reservation crosses them: its
// estimate bounds the price, but for the prompt estimate's error.)
func (s *Budgets) SettleBudget(ctx context.Context, l Lease, costUSD float64) error {
	if err := s.endReservations(ctx, leaseReservations, []any{l.Tenant, l.ID, l.Token}, costUSD); err != nil {
		return fmt.Errorf("store: settle budget %q: %w", l.String(), err)
	}
	return nil
}

// leaseReservations selects the reservations of one holder's call.
const leaseReservations = `r.tenant = $1 AND r.job_id = $2 AND r.lease_token = $3`

// ReleaseBudget gives back the reservation of a call the holder of l did
// not make, or that failed (nothing is charged), and lifts the holds of
// its budgets: a job they held may fit now.
func (s *Budgets) ReleaseBudget(ctx context.Context, l Lease) error {
	if err := s.endReservations(ctx, leaseReservations, []any{l.Tenant, l.ID, l.Token}, -1); err != nil {
		return fmt.Errorf("store: release budget %q: %w", l.String(), err)
	}
	return nil
}

// ReleaseOrphanBudgets gives back the reservations whose job is no longer
// held under their lease token (its worker died mid-call, or lost the
// lease), as ReleaseBudget. It returns how many it gave back.
func (s *Budgets) ReleaseOrphanBudgets(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT r.tenant, r.job_id, r.lease_token FROM budget_reservations r
		WHERE NOT EXISTS (SELECT FROM jobs j WHERE j.tenant = r.tenant AND j.id = r.job_id
			AND j.lease_token = r.lease_token AND j.status IN ('running', 'retrying'))`)
	if err != nil {
		return 0, fmt.Errorf("store: release orphan budgets: %w", err)
	}
	var orphans []Lease
	var l Lease
	if _, err := pgx.ForEachRow(rows, []any{&l.Tenant, &l.ID, &l.Token}, func() error {
		orphans = append(orphans, l)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("store: release orphan budgets: %w", err)
	}
	// Each in a transaction of its own: one reservation's rows at a time,
	// locked in key order as everywhere else. A reservation settled or
	// given back meanwhile is simply not found.
	for i, o := range orphans {
		if err := s.endReservations(ctx, leaseReservations, []any{o.Tenant, o.ID, o.Token}, -1); err != nil {
			return i, fmt.Errorf("store: release orphan budgets: %w", err)
		}
	}
	return len(orphans), nil
}

// endReservations ends the reservations matching where (over
// budget_reservations r, args from $1) in a transaction of its own; cost
// < 0 releases them (no charge, holds lifted), else each budget is
// charged cost.
func (s *Budgets) endReservations(ctx context.Context, where string, args []any, cost float64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return endReservationsTx(ctx, tx, where, args, cost)
	})
}

// endReservationsTx locks the budget rows of the matching reservations in
// key order (as ReserveBudget does, so the two never deadlock), deletes
// the reservations and moves their amounts out of reserved_usd, charging
// cost to spent_usd (cost >= 0) or lifting the rows' holds (cost < 0).
func endReservationsTx(ctx context.Context, tx pgx.Tx, where string, args []any, cost float64) error {
	tag, err := tx.Exec(ctx, `SELECT FROM budgets b JOIN budget_reservations r
			ON (r.tenant, r.project, r.period, r.period_start) = (b.tenant, b.project, b.period, b.period_start)
		WHERE `+where+` ORDER BY b.tenant, b.project, b.period, b.period_start FOR UPDATE OF b`, args...)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	charge, lift := cost, false
	if cost < 0 {
		charge, lift = 0, true
	}
	if _, err := tx.Exec(ctx, `WITH gone AS (DELETE FROM budget_reservations r WHERE `+where+`
			RETURNING r.tenant, r.project, r.period, r.period_start, r.amount_usd)
		UPDATE budgets b SET reserved_usd = b.reserved_usd - g.amount_usd, spent_usd = b.spent_usd + $`+fmt.Sprint(len(args)+1)+`,
			hold = CASE WHEN $`+fmt.Sprint(len(args)+2)+` THEN '' ELSE b.hold END
		FROM gone g WHERE (b.tenant, b.project, b.period, b.period_start) = (g.tenant, g.project, g.period, g.period_start)`,
		append(args, charge, lift)...); err != nil {
		return err
	}
	return nil
}

// budgetHeldFilter leaves, in the claim (q: the job, now: the parameter
// of now), the jobs a budget of their scope holds: every job ('all') or
// the low-priority ones ('low'), except the deferrable jobs of a scope
// whose policy is degrade (claimed, to move to the batch lane).
func budgetHeldFilter(now string) string {
	return ` AND NOT EXISTS (SELECT FROM budgets b WHERE b.tenant = q.tenant AND b.project IN ('', q.project)
	AND b.hold <> '' AND b.period_end > ` + now + ` AND (b.hold = '` + holdAll + `' OR q.priority = 'low')
	AND NOT (b.degrade AND q."deferrable"))`
}

// fillWaitingReasons sets the WaitingReason of the queued records: budget
// for a job its scope's budget holds (as the claim leaves it), else
// tenant_quota when its tenant or project is held by its own quota
// (fillScopeReasons), else as fillModelReasons says.
func (s *base) fillWaitingReasons(ctx context.Context, recs []*JobRecord) error {
	if err := s.fillModelReasons(ctx, recs); err != nil {
		return err
	}
	if err := s.fillScopeReasons(ctx, recs); err != nil {
		return err
	}
	defer s.fillPausedReasons(recs)
	if !s.order.tenants().HasBudgets() {
		return nil
	}
	var tenants []string
	for _, r := range recs {
		if r.Status == llmq.StatusQueued && r.Lane == LaneLive {
			tenants = append(tenants, r.Tenant)
		}
	}
	if len(tenants) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, `SELECT tenant, project, hold, degrade FROM budgets
		WHERE tenant = ANY($1) AND hold <> '' AND period_end > $2`, tenants, s.clock())
	if err != nil {
		return err
	}
	type hold struct {
		tenant, project, hold string
		degrade               bool
	}
	var holds []hold
	var h hold
	if _, err := pgx.ForEachRow(rows, []any{&h.tenant, &h.project, &h.hold, &h.degrade}, func() error {
		holds = append(holds, h)
		return nil
	}); err != nil {
		return err
	}
	for _, r := range recs {
		if r.Status != llmq.StatusQueued || r.Lane != LaneLive {
			continue
		}
		for _, h := range holds {
			if h.tenant == r.Tenant && (h.project == "" || h.project == r.Project) &&
				(h.hold == holdAll || r.Priority == llmq.PriorityLow) && !(h.degrade && r.Deferrable) {
				r.WaitingReason = WaitingReasonBudget
			}
		}
	}
	return nil
}

// MoveToBatch hands the job l holds back to queued in the batch lane (its
// budget's policy is degrade): the batch collector takes it into the next
// batch, at the batch price. reason is recorded as its lane reason.
func (s *Budgets) MoveToBatch(ctx context.Context, l Lease, reason string) error {
	_, err := s.fenced(ctx, "move to batch", tRelease, l, `, lease_owner = '', lease_expires_at = NULL, phase = '',
		lane = '`+LaneBatch+`', lane_reason = $5`, reason)
	return err
}

// BudgetUsage is one budget as it stands: its configuration and, for the
// current period, what is spent and reserved.
type BudgetUsage struct {
	llmq.Budget
	PeriodStart           time.Time
	SpentUSD, ReservedUSD float64
	// State is llmq.StateOf the spend, or exceeded once a call was
	// refused at the budget in the period.
	State llmq.BudgetState
	// Hold says which of the scope's jobs wait for the budget: all, low
	// (the low-priority ones) or none ("").
	Hold string
}

// BudgetUsages returns every configured budget of tenant ("" : of every
// tenant) for the periods that hold now, in llmq.Tenants.AllBudgets order.
func (s *Budgets) BudgetUsages(ctx context.Context, tenant string) ([]BudgetUsage, error) {
	now := s.clock()
	var out []BudgetUsage
	for _, b := range s.order.tenants().AllBudgets() {
		if tenant == "" || b.Tenant == tenant {
			out = append(out, BudgetUsage{Budget: b, PeriodStart: b.Period.Start(now)})
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT tenant, project, period, period_start, spent_usd::float8, reserved_usd::float8,
			CASE WHEN period_end > $2 THEN hold ELSE '' END, alerted
		FROM budgets WHERE ($1 = '' OR tenant = $1) AND period_start = ANY($3)`,
		tenant, now, []time.Time{llmq.PeriodDay.Start(now), llmq.PeriodMonth.Start(now)})
	if err != nil {
		return nil, fmt.Errorf("store: budget usages: %w", err)
	}
	var t, p, period, hold string
	var start time.Time
	var spent, reserved float64
	var alerted int
	refused := map[int]bool{}
	if _, err := pgx.ForEachRow(rows, []any{&t, &p, &period, &start, &spent, &reserved, &hold, &alerted}, func() error {
		for i := range out {
			u := &out[i]
			if u.Tenant == t && u.Project == p && string(u.Period) == period && u.PeriodStart.Equal(start) {
				u.SpentUSD, u.ReservedUSD, u.Hold, refused[i] = spent, reserved, hold, alerted >= 100
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: budget usages: %w", err)
	}
	for i := range out {
		out[i].State = llmq.StateOf(out[i].SpentUSD, out[i].ReservedUSD, out[i].LimitUSD)
		if refused[i] {
			out[i].State = llmq.BudgetExceeded
		}
	}
	return out, nil
}

// chargeBatchBudgets charges the budgets of the jobs batch id stored as
// succeeded at now (IngestBatch, in its transaction tx) with their batch
// price: the batch lane reserves nothing, its calls count once their
// results are home. The rows are locked in key order, as by ReserveBudget.
func (s *base) chargeBatchBudgets(ctx context.Context, tx pgx.Tx, id string, now time.Time) error {
	all := s.order.tenants().AllBudgets()
	if len(all) == 0 {
		return nil
	}
	n := len(all)
	tenants, projects, periods := make([]string, n), make([]string, n), make([]string, n)
	starts, ends := make([]time.Time, n), make([]time.Time, n)
	limits := make([]float64, n)
	for i, b := range all {
		tenants[i], projects[i], periods[i], limits[i] = b.Tenant, b.Project, string(b.Period), b.LimitUSD
		starts[i], ends[i] = b.Period.Start(now), b.Period.End(now)
	}
	_, err := tx.Exec(ctx, `INSERT INTO budgets AS b (tenant, project, period, period_start, period_end, limit_usd, spent_usd)
		SELECT c.tenant, c.project, c.period, c.start, c.end_, c.limit_, sum(j.cost_usd)
		FROM unnest($3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::numeric[])
			AS c(tenant, project, period, start, end_, limit_)
		JOIN jobs j ON j.tenant = c.tenant AND (c.project = '' OR j.project = c.project)
		WHERE j.batch_id = $1 AND j.status = 'succeeded' AND j.finished_at = $2
		GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4
		ON CONFLICT (tenant, project, period, period_start) DO UPDATE SET spent_usd = b.spent_usd + excluded.spent_usd`,
		id, now, tenants, projects, periods, starts, ends, limits)
	return err
}
