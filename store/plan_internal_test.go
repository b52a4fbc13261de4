package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store/storetest"
)

// Plan tests read a statement's plan as Postgres ran it (EXPLAIN ANALYZE,
// rolled back) on a new database, whose statistics still say the tables
// are empty (as after a deploy, or a burst before autovacuum's first
// ANALYZE: the plans are made from those).

// TestClaimReadsWhatItTakes: a claim of n jobs reads n entries of
// jobs_fair_idx, however many jobs tie on sched_key (one ingest batch
// shares its created_at), bounded in tokens or not.
func TestClaimReadsWhatItTakes(t *testing.T) {
	t.Parallel()
	for _, roomed := range []bool{false, true} {
		t.Run(fmt.Sprintf("roomed=%v", roomed), func(t *testing.T) {
			t.Parallel()
			s := planStore(t)
			const queued, limit = 2000, 16
			s.ingest(t, 0, queued, "default")
			// Jobs already claimed leave entries behind in the index until
			// they are found dead: the claim below walks them like a real one.
			for range 10 {
				_, err := s.Queue().Claim(context.Background(), ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: limit})
				require.NoError(t, err)
			}
			now := time.Now()
			tenants, ws := weights(s.order.Tenants)
			sql, args := claimPlan{Roomed: roomed}.statement(ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: limit, TokenRoom: 1e9},
				claimValues{now: now, urgentBefore: now.Add(time.Minute), tenants: tenants, weights: ws})
			plan := s.explain(t, sql, args...)
			var claimed int
			plan.walk(func(n planNode) {
				if n.NodeType == "ModifyTable" && n.Operation == "Update" {
					claimed = n.ActualRows
				}
				if n.IndexName == "jobs_fair_idx" {
					require.Zero(t, n.RowsRemovedByFilter, "a probe of jobs_fair_idx filtered rows out: %+v", n)
					require.LessOrEqual(t, n.ActualRows*n.ActualLoops, limit, "jobs_fair_idx read past what the claim takes: %+v", n)
				}
			})
			require.Equal(t, limit, claimed)
		})
	}
}

// TestClaimLocksByPrimaryKey: with statistics taken when every job had
// finished, a backlog of queued jobs looks rare to the planner; the
// claim's lock of each job it picks still finds it through jobs_pkey,
// never by walking the queued jobs of its tenant or model
// (jobs_tenant_status_created_idx, jobs_fair_idx).
func TestClaimLocksByPrimaryKey(t *testing.T) {
	t.Parallel()
	s := planStore(t)
	ctx := context.Background()
	s.ingest(t, 0, 2000, "default")
	_, err := s.pool.Exec(ctx, `UPDATE jobs SET status = 'succeeded', finished_at = now()`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	s.ingest(t, 10000, 3000, "default")
	var scans int
	s.explain(t, claimLockSQL("$1", "$2"), "default", "j10005").walk(func(n planNode) {
		if n.RelationName == "jobs" {
			require.Equal(t, "jobs_pkey", n.IndexName, "%+v", n)
			require.Equal(t, 1, n.ActualRows, "%+v", n)
			scans++
		}
	})
	require.Equal(t, 1, scans)
}

// TestListAllTenantsReadsPages: a page of one status across tenants reads
// each tenant's newest jobs of that status and no job of another status,
// however many newer jobs there are (an operator listing the running jobs
// behind a backlog of queued ones).
func TestListAllTenantsReadsPages(t *testing.T) {
	t.Parallel()
	s := planStore(t)
	s.ingest(t, 0, 30, "a", "b", "c")
	_, err := s.Queue().Claim(context.Background(), ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: 30})
	require.NoError(t, err)
	const limit = 5
	s.ingest(t, 100, 3000, "a", "b", "c")
	plan := s.explain(t, listAllTenantsSQL(`true AND status = $1`, 2), string(llmq.StatusRunning), limit+1)
	require.Equal(t, limit+1, plan.ActualRows)
	plan.walk(func(n planNode) {
		if n.RelationName != "jobs" {
			return
		}
		require.Zero(t, n.RowsRemovedByFilter, "jobs read and dropped: %+v", n)
		require.LessOrEqual(t, n.ActualRows*n.ActualLoops, 3*(limit+1), "read past the tenants' pages: %+v", n)
	})
}

// TestCountByStatusReadsUpToTheLimit: a bounded count reads the index
// only, at most the limit of entries per tenant and status, however many
// jobs there are (across tenants, the outer limit stops the loop over
// them: TestListPaging checks the counts).
func TestCountByStatusReadsUpToTheLimit(t *testing.T) {
	t.Parallel()
	s := planStore(t)
	s.ingest(t, 0, 3000, "a", "b", "c")
	const limit = 10
	statuses := make([]string, len(llmq.Statuses))
	for i, st := range llmq.Statuses {
		statuses[i] = string(st)
	}
	for _, tenant := range []string{"", "b"} {
		plan := s.explain(t, countByStatusSQL, tenant, limit, statuses)
		counted := false
		plan.walk(func(n planNode) {
			if n.RelationName != "jobs" {
				return
			}
			require.Equal(t, "Index Only Scan", n.NodeType, "tenant %q: %+v", tenant, n)
			require.Zero(t, n.RowsRemovedByFilter, "tenant %q: entries read and dropped: %+v", tenant, n)
			require.LessOrEqual(t, n.ActualRows, limit, "tenant %q: read past the limit: %+v", tenant, n)
			counted = counted || n.IndexName == "jobs_tenant_status_created_idx"
		})
		require.True(t, counted, "tenant %q: counted on jobs_tenant_status_created_idx", tenant)
	}
}

// TestUsageReadsTheTenantsJobs: a tenant's usage reads its rows of
// job_usage (one per statement that finished jobs, before a fold) and, of
// its jobs, only those that finished in the seconds at the ends of the
// last minute (jobs_tenant_finished_idx), not the jobs it finished earlier
// that day or in the minute's whole seconds, nor any other tenant's.
func TestUsageReadsTheTenantsJobs(t *testing.T) {
	t.Parallel()
	s := planStore(t)
	s.ingest(t, 0, 3000, "a", "b", "c")
	ctx := context.Background()
	for _, f := range []struct{ ids, at string }{
		{`id < 'j00010'`, "06:00:00"},
		{`id >= 'j00010' AND id < 'j00013'`, "11:59:00.5"}, // j00010 is b's, j00011 c's, j00012 a's
		{`id = 'j00013'`, "11:59:30"},                      // b's
		{`id > 'j00013'`, "06:00:00"},
	} {
		_, err := s.pool.Exec(ctx, `UPDATE jobs SET status = 'succeeded', finished_at = $1, attempts = 1 WHERE `+f.ids,
			"2026-11-30T"+f.at+"Z")
		require.NoError(t, err)
	}
	scope, args := usageArgs(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), "b")
	plan := s.explain(t, usageSQL(scope), args...)
	read := map[string]int{}
	plan.walk(func(n planNode) {
		if n.RelationName == "jobs" {
			require.Zero(t, n.RowsRemovedByFilter, "jobs read and dropped: %+v", n)
		}
		if n.IndexName != "" {
			require.Contains(t, []string{"jobs_tenant_finished_idx", "job_usage_day_key", "job_usage_second_key",
				"job_usage_fresh_idx"}, n.IndexName, "%+v", n)
			read[n.RelationName] += n.ActualRows * n.ActualLoops
		}
	})
	require.Equal(t, map[string]int{"jobs": 1, "job_usage": 4}, read, "b's job finished at 11:59:00.5, b's row of each statement")
}

// TestModelStatsReadsTheTenantsCalls: a tenant's statistics of calls read
// its calls of the window (job_attempts_tenant_started_idx), not every
// tenant's calls of it filtered by tenant, in the plan made for the
// tenant and in the generic plan Postgres may switch a prepared statement
// to (pgx prepares every statement it runs).
func TestModelStatsReadsTheTenantsCalls(t *testing.T) {
	t.Parallel()
	s := planStore(t)
	tenants := make([]string, 10)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%d", i)
	}
	s.ingest(t, 0, 3000, tenants...)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// Every job's call of an hour ago and its call of two days ago.
	_, err := s.pool.Exec(context.Background(), `INSERT INTO job_attempts (tenant, job_id, seq, attempt, model, started_at)
		SELECT tenant, id, s, s, 'm', $1::timestamptz - (CASE s WHEN 1 THEN interval '48 hours' ELSE interval '1 hour' END)
		FROM jobs, generate_series(1, 2) s`, now)
	require.NoError(t, err)
	scope, args := modelMinutesArgs("t3", now.Add(-24*time.Hour), now)
	for name, plan := range map[string]planNode{
		"custom":  s.explain(t, modelMinutesSQL(scope), args...),
		"generic": s.explainGeneric(t, modelMinutesSQL(scope), args...),
	} {
		read := 0
		plan.walk(func(n planNode) {
			require.NotEqual(t, "Seq Scan", n.NodeType, "%s plan: %+v", name, n)
			if n.RelationName == "job_attempts" {
				require.Zero(t, n.RowsRemovedByFilter, "%s plan: calls read and dropped: %+v", name, n)
			}
			if strings.HasPrefix(n.IndexName, "job_attempts") {
				require.Equal(t, "job_attempts_tenant_started_idx", n.IndexName, "%s plan: %+v", name, n)
				read += n.ActualRows * n.ActualLoops
			}
		})
		require.Equal(t, 300, read, "%s plan: t3's 300 calls of the window", name)
	}
}

// planDB is a store on a database of its own.
type planDB struct{ *Store }

func planStore(t *testing.T) planDB {
	t.Helper()
	s, err := Open(context.Background(), storetest.NewDB(t))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return planDB{s}
}

// ingest records n jobs of model m, ids from first on, in one batch (one
// created_at), their tenants taking turns.
func (s planDB) ingest(t *testing.T, first, n int, tenants ...string) {
	t.Helper()
	jobs := make([]NewJob, n)
	for i := range jobs {
		j, err := llmq.Decode(fmt.Appendf(nil, `{"id":"j%05d","tenant":%q,"body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`,
			first+i, tenants[i%len(tenants)]), llmq.DecodeOptions{})
		require.NoError(t, err)
		jobs[i] = NewJob{Job: j}
	}
	_, err := s.Queue().Ingest(context.Background(), jobs)
	require.NoError(t, err)
}

// explain runs sql with args in a transaction it rolls back and returns
// the plan as it ran.
func (s planDB) explain(t *testing.T, sql string, args ...any) planNode {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&out))
	var plan []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plan))
	return plan[0].Plan
}

// explainGeneric is explain with the generic plan of the prepared
// statement, the one made without the arguments' values.
func (s planDB) explainGeneric(t *testing.T, sql string, args ...any) planNode {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE generic AS `+sql)
	require.NoError(t, err)
	// EXECUTE takes its arguments as literals, not as bound parameters.
	lits := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case time.Time:
			lits[i] = "'" + a.Format(time.RFC3339Nano) + "'::timestamptz"
		case string:
			lits[i] = "'" + strings.ReplaceAll(a, "'", "''") + "'"
		case float64, int:
			lits[i] = fmt.Sprint(a)
		case []int64:
			lits[i] = "ARRAY" + strings.ReplaceAll(fmt.Sprint(a), " ", ",") + "::bigint[]"
		default:
			t.Fatalf("explainGeneric: no literal for %T", a)
		}
	}
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE generic(`+strings.Join(lits, ", ")+`)`).Scan(&out))
	var plan []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plan))
	return plan[0].Plan
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	NodeType            string     `json:"Node Type"`
	Operation           string     `json:"Operation"`
	RelationName        string     `json:"Relation Name"`
	IndexName           string     `json:"Index Name"`
	ActualRows          int        `json:"Actual Rows"`
	ActualLoops         int        `json:"Actual Loops"`
	RowsRemovedByFilter int        `json:"Rows Removed by Filter"`
	Plans               []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}
