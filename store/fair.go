package store

import (
	"maps"
	"slices"
	"strconv"

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

// claimSQL is the claim of up to $4 queued jobs of model $1 for owner $2,
// leased until $3 at $5, tenants taking turns by weight and each tenant's
// jobs in order o: each moves to running (tClaim) with a new lease token,
// phase waiting_for_quota. $6 is the lane reason recorded on a deferrable
// job the live lane takes for the first time (empty leaves it unset). $7
// and $8 are the configured tenants and their weights (others weigh
// WeightDefault); $9 is the tokens of a job recorded without an estimate;
// a job whose deadline is before $10 goes first, whatever its tenant's
// turn. With holdDeferrable, deferrable jobs whose lane is undecided and
// whose deadline, if any, is after $11 are left for the batch lane. With
// fallbackOnly, only jobs with a fallback model of their own are taken.
// With budgets, jobs a budget of their scope holds are left (budget.go).
// With scoped, the next three parameters (from $11, or $12 after
// holdDeferrable's) are tenants, the most jobs of each to take (a tenant
// capped at 0 takes no turn) and the "tenant/project" names of the
// projects whose jobs are left: the scopes held by their own quota.
// With roomed, the last parameter bounds the tokens taken: jobs are taken
// in claim order while their costs add up to at most it, so the first
// that does not fit stops the claim, and is returned after the claimed
// jobs as it is, queued and unclaimed (ClaimRequest.TokenRoom).
//
// One statement: the tenants with queued jobs (a loose scan of
// jobs_fair_idx, one probe per tenant), at most $4 jobs of each (an index
// range each), the claim, and the virtual times advanced; the fair_share
// rows are locked in (model, tenant) order, so concurrent claims of one
// model queue on them and never deadlock.
func claimSQL(o ClaimOrder, holdDeferrable, fallbackOnly, budgets, scoped, roomed bool) string {
	var filter string
	next := 11
	if budgets {
		filter += budgetHeldFilter
	}
	if holdDeferrable {
		filter += ` AND NOT (q."deferrable" AND q.lane_reason = '' AND (q.deadline IS NULL OR q.deadline > $11))`
		next++
	}
	if fallbackOnly {
		filter += ` AND q.fallback_models <> '{}'`
	}
	capCol, capJoin, capWhere, capLimit := "", "", "", "$4"
	if scoped {
		p := func(i int) string { return "$" + strconv.Itoa(next+i) }
		capCol = `, coalesce(cap.n, $4) AS cap`
		capJoin = `
		LEFT JOIN unnest(` + p(0) + `::text[], ` + p(1) + `::bigint[]) AS cap(tenant, n) ON cap.tenant = t.tenant`
		capWhere = ` AND coalesce(cap.n, 1) > 0`
		capLimit = "least($4, t.cap)"
		filter += ` AND (q.project = '' OR q.tenant || '/' || q.project <> ALL(` + p(2) + `::text[]))`
		next += 3
	}
	// The jobs in claim order; roomed, those that fit the room, and the
	// first that does not (left).
	order := `urgent DESC, tag, tenant`
	ordered, ranked, left := `SELECT * FROM cand ORDER BY `+order, ``, ``
	if roomed {
		room := `$` + strconv.Itoa(next) + `::float8`
		ranked = `
	ranked AS (SELECT *, sum(cost) OVER (ORDER BY ` + order + ` ROWS UNBOUNDED PRECEDING) AS upto FROM cand),`
		ordered = `SELECT * FROM ranked r WHERE r.upto <= ` + room + ` ORDER BY ` + order
		left = `
	UNION ALL
	(SELECT ` + prefixed("q", jobColumns) + ` FROM jobs q
		JOIN (SELECT tenant, id FROM ranked WHERE upto > ` + room + ` ORDER BY ` + order + ` LIMIT 1) f
			ON q.tenant = f.tenant AND q.id = f.id)`
	}
	// The loose scan reads lane, which the index lacks: an index-only scan
	// would not mark the entries of claimed jobs dead, and every claim
	// would walk them again until a vacuum.
	return `WITH RECURSIVE tenants AS (
		(SELECT tenant FROM jobs WHERE status = 'queued' AND requested_model = $1 AND lane = '` + LaneLive + `'
			ORDER BY tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT j.tenant FROM jobs j WHERE j.status = 'queued' AND j.requested_model = $1 AND j.tenant > t.tenant
			AND j.lane = '` + LaneLive + `' ORDER BY j.tenant LIMIT 1) FROM tenants t WHERE t.tenant IS NOT NULL),
	clock AS (SELECT coalesce(max(vtime), 0) AS v FROM fair_share WHERE model = $1 AND tenant = ''),
	turn AS (SELECT t.tenant, coalesce(w.weight, ` + strconv.Itoa(llmq.WeightDefault) + `) AS weight,
			greatest(coalesce(f.vtime, c.v), c.v) AS start` + capCol + `
		FROM tenants t CROSS JOIN clock c
		LEFT JOIN unnest($7::text[], $8::float8[]) AS w(tenant, weight) ON w.tenant = t.tenant
		LEFT JOIN fair_share f ON f.model = $1 AND f.tenant = t.tenant` + capJoin + `
		WHERE t.tenant IS NOT NULL` + capWhere + `),
	cand AS (SELECT q.tenant, q.id, q.urgent, q.cost, q.cost / t.weight AS step,
			t.start + sum(q.cost / t.weight) OVER (PARTITION BY q.tenant ORDER BY ` + o.orderBy("q") + `
				ROWS UNBOUNDED PRECEDING) - q.cost / t.weight AS tag
		FROM turn t CROSS JOIN LATERAL (
			SELECT q.tenant, q.id, q.sched_key, q.created_at, q.est_prompt_tokens, q.est_output_tokens, q.deadline,
				coalesce(q.deadline < $10, false) AS urgent,
				CASE WHEN q.est_prompt_tokens + q.est_output_tokens > 0
					THEN q.est_prompt_tokens + q.est_output_tokens ELSE $9::float8 END AS cost
			FROM jobs q
			WHERE q.status ` + tClaim.in + ` AND q.requested_model = $1 AND q.tenant = t.tenant
				AND q.lane = '` + LaneLive + `'` + filter + `
			ORDER BY ` + o.orderBy("q") + ` LIMIT ` + capLimit + `) q),` + ranked + `
	pick AS (SELECT c.tenant, c.id, c.urgent, c.tag, c.step
		FROM (` + ordered + `) c
		CROSS JOIN LATERAL (` + claimLockSQL("c.tenant", "c.id") + `) l
		LIMIT $4),
	claimed AS (UPDATE jobs j SET status = ` + tClaim.to + `, lease_owner = $2, lease_expires_at = $3,
			lease_token = j.lease_token + 1, phase = '` + PhaseWaitingForQuota + `', updated_at = $5,
			lane_reason = CASE WHEN j."deferrable" AND j.lane_reason = '' THEN $6 ELSE j.lane_reason END
		FROM pick p WHERE j.tenant = p.tenant AND j.id = p.id
		RETURNING ` + prefixed("j", jobColumns) + `, p.urgent AS pick_urgent, p.tag AS pick_tag),
	advance AS (INSERT INTO fair_share AS f (model, tenant, vtime)
		SELECT $1, a.tenant, a.vtime FROM (
			SELECT '' AS tenant, min(p.tag) AS vtime FROM pick p HAVING count(*) > 0
			UNION ALL
			SELECT p.tenant, (SELECT v FROM clock) + sum(p.step) FROM pick p GROUP BY p.tenant) a
		ORDER BY a.tenant
		ON CONFLICT (model, tenant) DO UPDATE SET vtime = CASE WHEN f.tenant = '' THEN greatest(f.vtime, excluded.vtime)
			ELSE greatest(f.vtime, (SELECT v FROM clock)) + (excluded.vtime - (SELECT v FROM clock)) END)
	(SELECT ` + jobColumns + ` FROM claimed ORDER BY pick_urgent DESC, pick_tag, tenant)` + left
}

// claimLockSQL locks the queued job of key (tenant, id), SQL expressions,
// for the claim, skipping it when another claim holds it.
func claimLockSQL(tenant, id string) string {
	return `SELECT FROM jobs j WHERE j.tenant = ` + tenant + ` AND j.id = ` + id + ` AND ` + tClaim.keyed("j.status") +
		` FOR UPDATE SKIP LOCKED`
}

// weights are the configured tenants and their weights, as claimSQL's $7
// and $8.
func weights(ts llmq.Tenants) ([]string, []float64) {
	names := slices.Sorted(maps.Keys(ts))
	ws := make([]float64, len(names))
	for i, n := range names {
		ws[i] = ts.Weight(n)
	}
	return names, ws
}
