package store

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/llmq/llmq"
)

// The order of claims. A queued job carries a static key, sched_key,
// computed once when it is recorded (SchedKey); a claim takes each
// tenant's queued jobs of one model with the smallest keys first, the
// tenants taking turns by weight (claimPlan). Static keys
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
	// Live, when set, is read at every use instead of Tenants: the
	// tenants kept as data, changed at run time
	// (docs/design/tenants.md#tenants-as-data).
	Live func() llmq.Tenants
}

// tenants are the tenants the order applies now: Live's, else Tenants.
func (o Order) tenants() llmq.Tenants {
	if o.Live != nil {
		return o.Live()
	}
	return o.Tenants
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Order) WithDefaults() Order {
	o.AgingStep = cmp.Or(o.AgingStep, AgingStepDefault)
	o.DeadlineLead = cmp.Or(o.DeadlineLead, DeadlineLeadDefault)
	return o
}

// SchedKey is the claim-order key of a job recorded at created with
// priority p, deadline (nil: none) and size delay size (see
// [NewJob.SizeDelay]); smaller keys are claimed first:
//
//	min(created + rank(p) x AgingStep + size, deadline - DeadlineLead)
//
// with rank high 0, normal 1, low 2 (docs/design/queue-of-record.md#schedkey).
func SchedKey(created time.Time, p llmq.Priority, deadline *time.Time, size time.Duration, o Order) time.Time {
	k := created.Add(time.Duration(p.Rank())*o.AgingStep + max(0, size))
	if deadline != nil {
		if d := deadline.Add(-o.DeadlineLead); d.Before(k) {
			k = d
		}
	}
	return k.UTC().Truncate(time.Microsecond)
}

// ClaimOrder describes the order in which a claim takes the queued jobs of
// one tenant: the terms of its ORDER BY, most significant first. Between
// tenants the claim takes turns by fair share (claimPlan, fair.go). Every
// claim statement is built from one, so a new order inside a tenant (size)
// is a new description, not a new statement.
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

// orderBy renders o as the text after ORDER BY, each column qualified by
// alias a; it panics on a column that is not a sortable column of jobs (a
// programming error, never user input).
func (o ClaimOrder) orderBy(a string) string {
	if len(o) == 0 {
		o = ClaimOrderDefault
	}
	terms := make([]string, len(o))
	for i, t := range o {
		if !orderColumns[t.Column] {
			panic(fmt.Sprintf("store: claim order: unknown column %q", t.Column))
		}
		terms[i] = a + "." + t.Column
		if t.Desc {
			terms[i] += " DESC"
		}
	}
	return strings.Join(terms, ", ")
}

// prefixed qualifies every column of a column list with table alias a.
func prefixed(a, cols string) string {
	fields := strings.Split(cols, ",")
	for i, f := range fields {
		fields[i] = a + "." + strings.TrimSpace(f)
	}
	return strings.Join(fields, ", ")
}
