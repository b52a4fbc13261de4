package store

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/llmq/llmq"
)

// The order of claims. A queued job carries a static key, sched_key,
// computed once when it is recorded (SchedKey); a claim takes the queued
// jobs of one model with the smallest keys first (claimSQL). Static keys
// keep the claim an index range scan: no clock in the query, no re-sorting
// of the backlog. docs/design/queue-of-record.md has the formula and why.

// Order defaults.
const (
	// AgingStepDefault is how long a job waits to gain one priority level.
	AgingStepDefault = 30 * time.Second
	// DeadlineLeadDefault is how long before its deadline a job sorts
	// first.
	DeadlineLeadDefault = time.Minute
)

// Order holds the parameters of the claim order.
type Order struct {
	// AgingStep: a job enqueued one step before another sorts as if one
	// priority level higher (a low job waiting 2 steps goes with a new
	// high one). Default AgingStepDefault.
	AgingStep time.Duration
	// DeadlineLead: a job with a deadline sorts no later than its deadline
	// minus this lead, so jobs whose deadline is near go first. Default
	// DeadlineLeadDefault.
	DeadlineLead time.Duration
	// Tenants are the configured tenants: their weights share the claims
	// between tenants (fair share), their priority caps lower the sched
	// keys of their jobs. Nil: every tenant has weight 1 and no cap.
	Tenants llmq.Tenants
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Order) WithDefaults() Order {
	o.AgingStep = cmp.Or(o.AgingStep, AgingStepDefault)
	o.DeadlineLead = cmp.Or(o.DeadlineLead, DeadlineLeadDefault)
	return o
}

// SchedKey is the claim-order key of a job recorded at created with
// priority p and deadline (nil: none):
//
//	min(created + rank(p) x AgingStep, deadline - DeadlineLead)
//
// with rank high 0, normal 1, low 2. Smaller keys are claimed first: a
// high job before a normal one enqueued at the same time, a low job
// enqueued 2 x AgingStep before a high one together with it (the effective
// rank rank - wait/AgingStep of an in-process priority queue, without a
// clock in the query), and any job whose deadline comes within
// DeadlineLead before the others.
func SchedKey(created time.Time, p llmq.Priority, deadline *time.Time, o Order) time.Time {
	k := created.Add(time.Duration(p.Rank()) * o.AgingStep)
	if deadline != nil {
		if d := deadline.Add(-o.DeadlineLead); d.Before(k) {
			k = d
		}
	}
	return k.UTC().Truncate(time.Microsecond)
}

// ClaimOrder describes the order in which a claim takes queued jobs: the
// terms of its ORDER BY, most significant first. Every claim statement is
// built from one by claimSQL, so a new order (fair share between tenants,
// size) is a new description, not a new statement.
type ClaimOrder []OrderTerm

// OrderTerm is one term of a ClaimOrder: a column of jobs, ascending
// unless Desc.
type OrderTerm struct {
	Column string
	Desc   bool
}

// ClaimOrderDefault is today's order: the static key (deadline, then
// priority with aging), then creation, then id for a total order.
var ClaimOrderDefault = ClaimOrder{{Column: "sched_key"}, {Column: "created_at"}, {Column: "id"}}

// orderColumns are the columns a ClaimOrder may name.
var orderColumns = map[string]bool{"sched_key": true, "created_at": true, "id": true, "tenant": true,
	"est_prompt_tokens": true, "est_output_tokens": true, "deadline": true}

// orderBy renders o as the text after ORDER BY; it panics on a column that
// is not a sortable column of jobs (a programming error, never user input).
func (o ClaimOrder) orderBy() string {
	if len(o) == 0 {
		o = ClaimOrderDefault
	}
	terms := make([]string, len(o))
	for i, t := range o {
		if !orderColumns[t.Column] {
			panic(fmt.Sprintf("store: claim order: unknown column %q", t.Column))
		}
		terms[i] = t.Column
		if t.Desc {
			terms[i] += " DESC"
		}
	}
	return strings.Join(terms, ", ")
}

// claimSQL is the claim of up to $4 queued jobs of model $1 for owner $2,
// leased until $3 at $5, in order o: each moves to running (tClaim) with a
// new lease token, phase waiting_for_quota. $6 is the lane reason recorded
// on a deferrable job the live lane takes for the first time (empty leaves it
// unset). With holdDeferrable, deferrable jobs whose lane is undecided and
// whose deadline, if any, is after $7 are left for the batch lane. With
// fallbackOnly, only jobs with a fallback model of their own are taken.
func claimSQL(o ClaimOrder, holdDeferrable, fallbackOnly bool) string {
	var filter string
	if holdDeferrable {
		filter += ` AND NOT ("deferrable" AND lane_reason = '' AND (deadline IS NULL OR deadline > $7))`
	}
	if fallbackOnly {
		filter += ` AND fallback_models <> '{}'`
	}
	return `UPDATE jobs j SET status = ` + tClaim.to + `, lease_owner = $2, lease_expires_at = $3,
		lease_token = j.lease_token + 1, phase = '` + PhaseWaitingForQuota + `', updated_at = $5,
		lane_reason = CASE WHEN j."deferrable" AND j.lane_reason = '' THEN $6 ELSE j.lane_reason END
	FROM (SELECT tenant, id FROM jobs
		WHERE status ` + tClaim.in + ` AND requested_model = $1 AND lane = '` + LaneLive + `'` + filter + `
		ORDER BY ` + o.orderBy() + ` LIMIT $4 FOR UPDATE SKIP LOCKED) c
	WHERE j.tenant = c.tenant AND j.id = c.id
	RETURNING ` + prefixed("j", jobColumns)
}

// prefixed qualifies every column of a column list with table alias a.
func prefixed(a, cols string) string {
	fields := strings.Split(cols, ",")
	for i, f := range fields {
		fields[i] = a + "." + strings.TrimSpace(f)
	}
	return strings.Join(fields, ", ")
}
