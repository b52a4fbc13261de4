package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store/storetest"
)

// claimRules are the names of claimPlan's rules: its bool fields, each
// one rule.
func claimRules(t *testing.T) []string {
	t.Helper()
	var rules []string
	typ := reflect.TypeFor[claimPlan]()
	for i := range typ.NumField() {
		if typ.Field(i).Type.Kind() == reflect.Bool {
			rules = append(rules, typ.Field(i).Name)
		}
	}
	require.GreaterOrEqual(t, len(rules), 5)
	return rules
}

// planOf is the plan with the rules of mask's bits on.
func planOf(rules []string, mask int, o ClaimOrder) claimPlan {
	p := claimPlan{Order: o}
	v := reflect.ValueOf(&p).Elem()
	for i, r := range rules {
		v.FieldByName(r).SetBool(mask&(1<<i) != 0)
	}
	return p
}

// TestClaimPlans: every combination of the claim's rules (claimPlan's
// fields, found by reflection: a new rule is tested here as it is added)
// makes a statement Postgres prepares with as many parameters as it binds,
// and plans (EXPLAIN); and each rule changes the statement.
func TestClaimPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, storetest.NewDB(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: 8, TypicalTokens: 100, HoldDeadlineAfter: now.Add(time.Hour),
		LiveReason: "live", TenantCaps: map[string]int{"a": 2, "b": 0}, HeldProjects: []ScopeRef{{Tenant: "a", Project: "p"}}, TokenRoom: 500}
	v := claimValues{now: now, urgentBefore: now.Add(time.Minute), tenants: []string{"a", "b"}, weights: []float64{3, 1}}
	rules := claimRules(t)
	orders := []ClaimOrder{nil, {{Column: "est_prompt_tokens", Desc: true}, {Column: "id"}}}
	for mask := range 1 << len(rules) {
		for _, o := range orders {
			p := planOf(rules, mask, o)
			sql, args := p.statement(r, v)
			sd, err := conn.Prepare(ctx, "", sql)
			require.NoError(t, err, "%+v", p)
			require.Len(t, sd.ParamOIDs, len(args), "%+v: the parameters Postgres reads are those bound", p)
			_, err = conn.Exec(ctx, "EXPLAIN "+sql, args...)
			require.NoError(t, err, "%+v", p)
		}
		for i, rule := range rules {
			if mask&(1<<i) == 0 {
				continue
			}
			without, _ := planOf(rules, mask&^(1<<i), nil).statement(r, v)
			with, _ := planOf(rules, mask, nil).statement(r, v)
			require.NotEqual(t, without, with, "rule %s changes the statement", rule)
		}
	}
}

// TestClaimPlanOfRequest: each rule of the plan follows its request field
// (and the store's budgets).
func TestClaimPlanOfRequest(t *testing.T) {
	t.Parallel()
	require.Equal(t, claimPlan{}, newClaimPlan(ClaimRequest{}, false))
	o := ClaimOrder{{Column: "id"}}
	got := newClaimPlan(ClaimRequest{Order: o, HoldDeferrable: true, FallbackOnly: true, TokenRoom: 1,
		HeldProjects: []ScopeRef{{Tenant: "a", Project: "p"}}}, true)
	require.Equal(t, claimPlan{Order: o, HoldDeferrable: true, FallbackOnly: true, Budgets: true, Scoped: true, Roomed: true}, got)
	require.True(t, newClaimPlan(ClaimRequest{TenantCaps: map[string]int{"a": 0}}, false).Scoped)
	require.Equal(t, len(claimRules(t)), strings.Count(fmt.Sprintf("%+v", got), "true"), "every rule is set from the request")
}
