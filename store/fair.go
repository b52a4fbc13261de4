package store

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/llmq/llmq"
)

// Fair share between tenants in the claim: start-time fair queuing over
// the tokens the jobs are estimated to use. Each (model, tenant) has a
// virtual time in fair_share, the tokens given to the tenant divided by its
// weight; a claim tags each tenant's next jobs (in the tenant's claim
// order) with the virtual time at which each would start, takes the jobs
// with the smallest tags, and advances the tenants it served. Backlogged
// tenants so get tokens in proportion to their weights, an idle tenant's
// turn goes to the others (work-conserving), and a tenant returning from
// idle starts at the model's virtual clock (the smallest tag the last
// claim took): it banks no credit. docs/design/tenants.md.

// claimPlan is a claim statement: which rules apply, one field per rule.
// Its statement binds each value as it writes the text (params numbers
// them), so a new rule is a field, the filter it adds and a case of
// TestClaimPlans, which prepares and EXPLAINs every combination.
// docs/design/queue-of-record.md.
type claimPlan struct {
	// Order is the order of each tenant's jobs; nil = ClaimOrderDefault.
	Order ClaimOrder
	// HoldDeferrable leaves deferrable jobs whose lane is undecided, and
	// whose deadline, if any, is after HoldDeadlineAfter, to the batch lane.
	HoldDeferrable bool
	// FallbackOnly takes only jobs with a fallback model of their own.
	FallbackOnly bool
	// Budgets leaves the jobs a budget of their scope holds (budget.go).
	Budgets bool
	// Scoped caps the jobs of each tenant of TenantCaps (a tenant capped
	// at 0 takes no turn) and leaves the jobs of HeldProjects.
	Scoped bool
	// Roomed takes jobs while their costs add up to at most TokenRoom; the
	// first that does not fit stops the claim and is returned after the
	// claimed jobs, queued and unclaimed (ClaimWithin).
	Roomed bool
}

// newClaimPlan is the plan of r on a store whose tenants have budgets or
// not.
func newClaimPlan(r ClaimRequest, budgets bool) claimPlan {
	return claimPlan{Order: r.Order, HoldDeferrable: r.HoldDeferrable, FallbackOnly: r.FallbackOnly, Budgets: budgets,
		Scoped: len(r.TenantCaps) > 0 || len(r.HeldProjects) > 0, Roomed: r.TokenRoom > 0}
}

// params are the parameters of a statement, numbered as they are bound.
type params struct{ args []any }

// bind appends v and returns its placeholder.
func (p *params) bind(v any) string {
	p.args = append(p.args, v)
	return "$" + strconv.Itoa(len(p.args))
}

// claimValues are the values a claim binds besides the request's own: the
// store's clock and order.
type claimValues struct {
	now time.Time
	// urgentBefore: a job whose deadline is before it goes first,
	// whatever its tenant's turn.
	urgentBefore time.Time
	tenants      []string
	weights      []float64
}

// statement is the claim of up to r.Limit queued jobs of r.Model for
// r.Owner, leased until now + r.Lease, tenants taking turns by weight and
// each tenant's jobs in p.Order; each moves to running (tClaim) with a new
// lease token. One statement; the fair_share rows are locked in (model,
// tenant) order so concurrent claims never deadlock
// (docs/design/tenants.md#the-fair-claim-statement).
func (p claimPlan) statement(r ClaimRequest, v claimValues) (string, []any) {
	var ps params
	model, owner, until, limit, now := ps.bind(r.Model), ps.bind(r.Owner), ps.bind(v.now.Add(r.Lease)), ps.bind(r.Limit), ps.bind(v.now)
	reason, tenants, weights := ps.bind(r.LiveReason), ps.bind(v.tenants), ps.bind(v.weights)
	typical, urgent := ps.bind(float64(max(r.TypicalTokens, 1))), ps.bind(v.urgentBefore)
	var filter string
	if p.Budgets {
		filter += budgetHeldFilter(now)
	}
	if p.HoldDeferrable {
		filter += ` AND NOT (q."deferrable" AND q.lane_reason = '' AND (q.deadline IS NULL OR q.deadline > ` + ps.bind(r.HoldDeadlineAfter) + `))`
	}
	if p.FallbackOnly {
		filter += ` AND q.fallback_models <> '{}'`
	}
	capCol, capJoin, capWhere, capLimit := "", "", "", limit
	if p.Scoped {
		capped, caps, held := r.scopes()
		capCol = `, coalesce(cap.n, ` + limit + `) AS cap`
		capJoin = `
		LEFT JOIN unnest(` + ps.bind(capped) + `::text[], ` + ps.bind(caps) + `::bigint[]) AS cap(tenant, n) ON cap.tenant = t.tenant`
		capWhere = ` AND coalesce(cap.n, 1) > 0`
		capLimit = "least(" + limit + ", t.cap)"
		filter += ` AND (q.project = '' OR q.tenant || '/' || q.project <> ALL(` + ps.bind(held) + `::text[]))`
	}
	ranked, ordered, left := p.roomed(&ps, r.TokenRoom)
	o := p.Order
	// The loose scan reads lane, which the index lacks: an index-only scan
	// would not mark the entries of claimed jobs dead, and every claim
	// would walk them again until a vacuum.
	return `WITH RECURSIVE tenants AS (
		(SELECT tenant FROM jobs WHERE status = 'queued' AND requested_model = ` + model + ` AND lane = '` + LaneLive + `'
			ORDER BY tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT j.tenant FROM jobs j WHERE j.status = 'queued' AND j.requested_model = ` + model + ` AND j.tenant > t.tenant
			AND j.lane = '` + LaneLive + `' ORDER BY j.tenant LIMIT 1) FROM tenants t WHERE t.tenant IS NOT NULL),
	clock AS (SELECT coalesce(max(vtime), 0) AS v FROM fair_share WHERE model = ` + model + ` AND tenant = ''),
	turn AS (SELECT t.tenant, coalesce(w.weight, ` + strconv.Itoa(llmq.WeightDefault) + `) AS weight,
			greatest(coalesce(f.vtime, c.v), c.v) AS start` + capCol + `
		FROM tenants t CROSS JOIN clock c
		LEFT JOIN unnest(` + tenants + `::text[], ` + weights + `::float8[]) AS w(tenant, weight) ON w.tenant = t.tenant
		LEFT JOIN fair_share f ON f.model = ` + model + ` AND f.tenant = t.tenant` + capJoin + `
		WHERE t.tenant IS NOT NULL` + capWhere + `),
	cand AS (SELECT q.tenant, q.id, q.urgent, q.cost, q.cost / t.weight AS step,
			t.start + sum(q.cost / t.weight) OVER (PARTITION BY q.tenant ORDER BY ` + o.orderBy("q") + `
				ROWS UNBOUNDED PRECEDING) - q.cost / t.weight AS tag
		FROM turn t CROSS JOIN LATERAL (
			SELECT q.tenant, q.id, q.sched_key, q.created_at, q.est_prompt_tokens, q.est_output_tokens, q.deadline,
				coalesce(q.deadline < ` + urgent + `, false) AS urgent,
				CASE WHEN q.est_prompt_tokens + q.est_output_tokens > 0
					THEN q.est_prompt_tokens + q.est_output_tokens ELSE ` + typical + `::float8 END AS cost
			FROM jobs q
			WHERE q.status ` + tClaim.in + ` AND q.requested_model = ` + model + ` AND q.tenant = t.tenant
				AND q.lane = '` + LaneLive + `'` + filter + `
			ORDER BY ` + o.orderBy("q") + ` LIMIT ` + capLimit + `) q),` + ranked + `
	pick AS (SELECT c.tenant, c.id, c.urgent, c.tag, c.step
		FROM (` + ordered + `) c
		CROSS JOIN LATERAL (` + claimLockSQL("c.tenant", "c.id") + `) l
		LIMIT ` + limit + `),
	claimed AS (UPDATE jobs j SET status = ` + tClaim.to + `, lease_owner = ` + owner + `, lease_expires_at = ` + until + `,
			lease_token = j.lease_token + 1, phase = '` + PhaseWaitingForQuota + `', updated_at = ` + now + `,
			lane_reason = CASE WHEN j."deferrable" AND j.lane_reason = '' THEN ` + reason + ` ELSE j.lane_reason END
		FROM pick p WHERE j.tenant = p.tenant AND j.id = p.id
		RETURNING ` + prefixed("j", jobColumns) + `, p.urgent AS pick_urgent, p.tag AS pick_tag),
	advance AS (INSERT INTO fair_share AS f (model, tenant, vtime)
		SELECT ` + model + `, a.tenant, a.vtime FROM (
			SELECT '' AS tenant, min(p.tag) AS vtime FROM pick p HAVING count(*) > 0
			UNION ALL
			SELECT p.tenant, (SELECT v FROM clock) + sum(p.step) FROM pick p GROUP BY p.tenant) a
		ORDER BY a.tenant
		ON CONFLICT (model, tenant) DO UPDATE SET vtime = CASE WHEN f.tenant = '' THEN greatest(f.vtime, excluded.vtime)
			ELSE greatest(f.vtime, (SELECT v FROM clock)) + (excluded.vtime - (SELECT v FROM clock)) END)
	(SELECT ` + jobColumns + ` FROM claimed ORDER BY pick_urgent DESC, pick_tag, tenant)` + left, ps.args
}

// roomed returns the claim's ranked CTE, its jobs in claim order and the
// job it leaves: with p.Roomed, the jobs that fit room and the first that
// does not (returned after the claimed ones); without, all and none.
func (p claimPlan) roomed(ps *params, room float64) (ranked, ordered, left string) {
	const order = `urgent DESC, tag, tenant`
	if !p.Roomed {
		return ``, `SELECT * FROM cand ORDER BY ` + order, ``
	}
	bound := ps.bind(room) + `::float8`
	ranked = `
	ranked AS (SELECT *, sum(cost) OVER (ORDER BY ` + order + ` ROWS UNBOUNDED PRECEDING) AS upto FROM cand),`
	ordered = `SELECT * FROM ranked r WHERE r.upto <= ` + bound + ` ORDER BY ` + order
	left = `
	UNION ALL
	(SELECT ` + prefixed("q", jobColumns) + ` FROM jobs q
		JOIN (SELECT tenant, id FROM ranked WHERE upto > ` + bound + ` ORDER BY ` + order + ` LIMIT 1) f
			ON q.tenant = f.tenant AND q.id = f.id)`
	return ranked, ordered, left
}

// scopes are r's TenantCaps as sorted tenants and their caps (at least 0)
// and its HeldProjects as "tenant/project" names.
func (r ClaimRequest) scopes() (capped []string, caps []int64, held []string) {
	capped = slices.Sorted(maps.Keys(r.TenantCaps))
	caps = make([]int64, len(capped))
	for i, t := range capped {
		caps[i] = int64(max(0, r.TenantCaps[t]))
	}
	held = make([]string, len(r.HeldProjects))
	for i, p := range r.HeldProjects {
		held[i] = p.Tenant + "/" + p.Project
	}
	return capped, caps, held
}

// claimLockSQL locks the queued job of key (tenant, id), SQL expressions,
// for the claim, skipping it when another claim holds it.
func claimLockSQL(tenant, id string) string {
	return `SELECT FROM jobs j WHERE j.tenant = ` + tenant + ` AND j.id = ` + id + ` AND ` + tClaim.keyed("j.status") +
		` FOR UPDATE SKIP LOCKED`
}

// weights are the configured tenants and their weights, as a claim binds
// them.
func weights(ts llmq.Tenants) ([]string, []float64) {
	names := slices.Sorted(maps.Keys(ts))
	ws := make([]float64, len(names))
	for i, n := range names {
		ws[i] = ts.Weight(n)
	}
	return names, ws
}
