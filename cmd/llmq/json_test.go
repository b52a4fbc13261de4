package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport/memory"
)

// cliBundle is a database with jobs of two tenants and dead letters, and
// the environment that points the commands at it.
type cliBundle struct {
	ctx   context.Context
	store *store.Store
}

func setupCLI(t *testing.T) *cliBundle {
	t.Helper()
	if testing.Short() {
		t.Skip("Postgres")
	}
	dbURL := storetest.NewDB(t)
	t.Setenv(config.EnvDatabaseURL, dbURL)
	t.Setenv(config.EnvConfig, "")
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return &cliBundle{ctx: ctx, store: st}
}

// job records a queued job of tenant.
func (b *cliBundle) job(t *testing.T, tenant, id string) *llmq.Job {
	t.Helper()
	j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":%q,"tenant":%q,"metadata":{"k":"v"},"body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`, id, tenant)), llmq.DecodeOptions{})
	require.NoError(t, err)
	_, err = b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	return j
}

// hold records a job of tenant and claims it (running): the lease of its
// holder. No other job may be queued.
func (b *cliBundle) hold(t *testing.T, tenant, id string) store.Lease {
	t.Helper()
	b.job(t, tenant, id)
	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "gpt-4o-mini", Owner: "w", Lease: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, store.Key{Tenant: tenant, ID: id}, store.Key{Tenant: recs[0].Tenant, ID: recs[0].ID})
	return store.Lease{Key: store.Key{Tenant: tenant, ID: id}, Token: recs[0].LeaseToken}
}

// schema returns a component schema of the API's OpenAPI document.
func schema(t *testing.T, name string) *openapi3.Schema {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	ref, ok := doc.Components.Schemas[name]
	require.True(t, ok, "no schema %s", name)
	return ref.Value
}

// requireSchema decodes out and validates it against the named schema.
func requireSchema(t *testing.T, name, out string) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v), "%s", out)
	require.NoError(t, schema(t, name).VisitJSON(v), "%s does not match schema %s", out, name)
	return v
}

// TestJSONOutputMatchesOpenAPI: the commands' --json print exactly the
// API's views, so their output validates against the OpenAPI schemas.
func TestJSONOutputMatchesOpenAPI(t *testing.T) {
	b := setupCLI(t)
	ok := b.hold(t, "acme", "ok-1")
	_, err := b.store.Queue().StoreResult(b.ctx, ok.Key, store.Result{Response: json.RawMessage(`{"choices":[{"message":{"content":"hello"}}]}`),
		UsedModel: "gpt-4o-mini", PromptTokens: 3, CompletionTokens: 1})
	require.NoError(t, err)
	failed := b.hold(t, "acme", "failed-1")
	require.NoError(t, b.store.Queue().MarkFailed(b.ctx, failed, 400, "invalid_request_error",
		"HTTP 400: <html>"+strings.Repeat("bad request ", 200)+"\nAuthorization: Bearer sk-leaked0123456789</html>"))
	long := b.hold(t, "acme", "long-1")
	longErr := "The model gpt-4o-mini does not exist or you do not have access to it. Check the model name and your " +
		"organization's access, then send the job again with a model you may use."
	require.NoError(t, b.store.Queue().MarkFailed(b.ctx, long, 404, "model_not_found", longErr))
	b.job(t, "globex", "queued-1")
	out, err := runLLMQ(t, "status", "acme/long-1")
	require.NoError(t, err)
	require.Contains(t, out, "model_not_found: "+longErr, "status shows the whole error")

	out, err = runLLMQ(t, "status", "acme/failed-1", "--json")
	require.NoError(t, err)
	v := requireSchema(t, "Job", out)
	require.Equal(t, "failed-1", v["id"])
	require.NotContains(t, out, "sk-leaked", "the stored error is shown sanitised")
	out, err = runLLMQ(t, "status", "acme/ok-1", "--json")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"prompt_tokens": 3.0, "completion_tokens": 1.0}, requireSchema(t, "Job", out)["usage"])

	out, err = runLLMQ(t, "usage", "--json")
	require.NoError(t, err)
	v = requireSchema(t, "UsageList", out)
	require.Equal(t, []any{map[string]any{"tenant": "acme", "weight": 1.0,
		"limits":      map[string]any{"rpm": 0.0, "tpm": 0.0, "concurrency": 0.0},
		"last_minute": map[string]any{"requests": 0.0, "tokens": 4.0},
		"today":       map[string]any{"requests": 0.0, "tokens": 4.0}}}, v["data"], "the finished jobs of today (no call was recorded)")
	out, err = runLLMQ(t, "usage", "--tenant", "globex")
	require.NoError(t, err)
	require.Equal(t, "TENANT  PROJECT  WEIGHT  RPM  TPM  CONCURRENCY  PRIORITY  CALLS/MIN  TOKENS/MIN  CALLS TODAY  TOKENS TODAY\n"+
		"globex           1       0    0    0                      0          0           0            0\n", out)

	out, err = runLLMQ(t, "jobs", "ls", "--json")
	require.NoError(t, err)
	v = requireSchema(t, "JobList", out)
	require.Len(t, v["data"], 4)
	require.Nil(t, v["next_cursor"])
	out, err = runLLMQ(t, "jobs", "ls", "--json", "--limit", "1")
	require.NoError(t, err)
	require.NotNil(t, requireSchema(t, "JobList", out)["next_cursor"])

	// Dead letters: a job's, and a poison message that is not JSON.
	w, err := dlq.NewWriter(dlq.Config{Store: b.store.DeadLetters(), Publisher: memory.New().NewPublisher(), Destination: "jobs"})
	require.NoError(t, err)
	require.NoError(t, w.DeadLetter(b.ctx, dlq.Letter{JobID: "queued-1", Tenant: "globex", Reason: dlq.ReasonExpired,
		Message: []byte(`{"id":"queued-1","body":{}}`)}))
	require.NoError(t, w.DeadLetter(b.ctx, dlq.Letter{Tenant: "acme", Reason: dlq.ReasonPoison, LastError: "not JSON",
		Message: []byte("\xff\x00 not json")}))
	out, err = runLLMQ(t, "dlq", "ls", "--json")
	require.NoError(t, err)
	require.Len(t, requireSchema(t, "DeadLetterList", out)["data"], 2)
	for _, id := range []string{"1", "2"} {
		out, err = runLLMQ(t, "dlq", "show", id, "--json")
		require.NoError(t, err)
		requireSchema(t, "DeadLetter", out)
	}
}

// TestJobsLsMoreHintKeepsTheFilters: following the "more:" line lists the
// next page of the same listing, never another tenant's jobs.
func TestJobsLsMoreHintKeepsTheFilters(t *testing.T) {
	b := setupCLI(t)
	for i := range 3 {
		b.job(t, "acme", fmt.Sprintf("a%d", i))
		b.job(t, "globex", fmt.Sprintf("g%d", i))
	}
	args := []string{"jobs", "ls", "--tenant", "acme", "--limit", "2"}
	var seen []string
	for page := 0; ; page++ {
		require.Less(t, page, 3, "paging does not end")
		out, err := runLLMQ(t, args...)
		require.NoError(t, err)
		more := ""
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if rest, ok := strings.CutPrefix(line, "more: llmq "); ok {
				more = rest
				continue
			}
			fields := strings.Fields(line)
			require.Equal(t, "acme", fields[1], "page %d lists %s", page, line)
			seen = append(seen, fields[0])
		}
		if more == "" {
			break
		}
		require.Contains(t, more, "--tenant acme --limit 2 --after ")
		args = strings.Fields(more)
	}
	require.ElementsMatch(t, []string{"a0", "a1", "a2"}, seen)
}

// TestJobsPrune: jobs that ended longer ago than --older-than go, whatever
// their terminal status; younger ones and jobs not finished stay.
func TestJobsPrune(t *testing.T) {
	b := setupCLI(t)
	_, err := runLLMQ(t, "jobs", "prune")
	require.ErrorContains(t, err, "--older-than: want a positive duration")
	for _, id := range []string{"done-old", "cancelled-old", "done-new"} {
		b.job(t, "acme", id)
	}
	b.job(t, "acme", "queued")
	ended := func(id string, st llmq.Status, ago time.Duration) {
		t.Helper()
		_, err := b.store.Pool().Exec(b.ctx, `UPDATE jobs SET status = $2, finished_at = now() - $3::interval WHERE id = $1`,
			id, st, fmt.Sprintf("%d seconds", int(ago.Seconds())))
		require.NoError(t, err)
	}
	ended("done-old", llmq.StatusSucceeded, 49*time.Hour)
	ended("cancelled-old", llmq.StatusCancelled, 49*time.Hour)
	ended("done-new", llmq.StatusSucceeded, 47*time.Hour)
	out, err := runLLMQ(t, "jobs", "prune", "--older-than", "48h")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "pruned 2 jobs that ended before "), out)
	recs, _, err := b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Limit: 10})
	require.NoError(t, err)
	var left []string
	for _, r := range recs {
		left = append(left, r.ID)
	}
	require.ElementsMatch(t, []string{"done-new", "queued"}, left)
}
