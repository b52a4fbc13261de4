package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store/storetest"
)

// TestClaimReadsWhatItTakes: a claim of n jobs reads n entries of
// jobs_fair_idx, however many jobs tie on sched_key (one ingest batch
// shares its created_at), even on a table whose statistics still say it is
// empty (a new database, a burst before autovacuum's first ANALYZE: the
// plans are made from those). It reads the claim's plan as Postgres ran it
// (EXPLAIN ANALYZE, rolled back).
func TestClaimReadsWhatItTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, storetest.NewDB(t))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	const queued, limit = 2000, 16
	jobs := make([]NewJob, queued)
	for i := range jobs {
		j, err := llmq.Decode(fmt.Appendf(nil, `{"id":"j%05d","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, i),
			llmq.DecodeOptions{})
		require.NoError(t, err)
		jobs[i] = NewJob{Job: j}
	}
	_, err = s.Ingest(ctx, jobs)
	require.NoError(t, err)
	// Jobs already claimed leave entries behind in the index until
	// they are found dead: the claim below walks them like a real one.
	for range 10 {
		_, err = s.Claim(ctx, ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: limit})
		require.NoError(t, err)
	}

	now := time.Now()
	tenants, ws := weights(s.order.Tenants)
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+claimSQL(nil, false, false, false, false),
		"m", "w", now.Add(time.Minute), limit, now, "", tenants, ws, 1.0, now.Add(time.Minute)).Scan(&out))
	var plan []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plan))
	var claimed int
	plan[0].Plan.walk(func(n planNode) {
		if n.NodeType == "ModifyTable" && n.Operation == "Update" {
			claimed = n.ActualRows
		}
		if n.IndexName == "jobs_fair_idx" {
			require.Zero(t, n.RowsRemovedByFilter, "a probe of jobs_fair_idx filtered rows out: %+v", n)
			require.LessOrEqual(t, n.ActualRows*n.ActualLoops, limit, "jobs_fair_idx read past what the claim takes: %+v", n)
		}
	})
	require.Equal(t, limit, claimed)
}

// TestListAllTenantsReadsPages: a page of one status across tenants reads
// each tenant's newest jobs of that status and no job of another status,
// however many newer jobs there are (an operator listing the running jobs
// behind a backlog of queued ones).
func TestListAllTenantsReadsPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, storetest.NewDB(t))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	job := func(tenant string, i int) NewJob {
		j, err := llmq.Decode(fmt.Appendf(nil, `{"id":"j%05d","tenant":%q,"body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`,
			i, tenant), llmq.DecodeOptions{})
		require.NoError(t, err)
		return NewJob{Job: j}
	}
	var old []NewJob
	for i := range 30 {
		old = append(old, job([]string{"a", "b", "c"}[i%3], i))
	}
	_, err = s.Ingest(ctx, old)
	require.NoError(t, err)
	_, err = s.Claim(ctx, ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: 30})
	require.NoError(t, err)
	const queued, limit = 3000, 5
	var backlog []NewJob
	for i := range queued {
		backlog = append(backlog, job([]string{"a", "b", "c"}[i%3], 100+i))
	}
	_, err = s.Ingest(ctx, backlog)
	require.NoError(t, err)

	var out []byte
	require.NoError(t, s.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+listAllTenantsSQL(`true AND status = $1`, 2),
		string(llmq.StatusRunning), limit+1).Scan(&out))
	var plan []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plan))
	require.Equal(t, limit+1, plan[0].Plan.ActualRows)
	plan[0].Plan.walk(func(n planNode) {
		if n.RelationName != "jobs" {
			return
		}
		require.Zero(t, n.RowsRemovedByFilter, "jobs read and dropped: %+v", n)
		require.LessOrEqual(t, n.ActualRows*n.ActualLoops, 3*(limit+1), "read past the tenants' pages: %+v", n)
	})
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
