package worker

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

func TestAppendEventIsJSONMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 13, 0, 0, 123456789, time.FixedZone("x", 3600))
	full := llmq.ResultEvent{Type: llmq.ResultEventType, Version: 1, EventID: "e-1", JobID: "j<1>&\"\\\n\t\x01\b\f\u2028\u2029é\xff",
		Tenant: "acme", Status: llmq.StatusSucceeded, CorrelationID: "c-1", Model: "gpt-4o-mini",
		Response: json.RawMessage(`{"id":"x","choices":[]}`), Usage: llmq.ResultUsage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7},
		CostUSD: 0.0001, Attempts: 2, Metadata: map[string]string{"z": "1", "a": "<b>", "m": ""},
		CreatedAt: at, StartedAt: &at, FinishedAt: &at}
	failed := llmq.ResultEvent{Type: llmq.ResultEventType, Version: 1, EventID: "e-2", JobID: "j-2", Status: llmq.StatusFailed,
		Error: &llmq.ResultError{Code: "upstream_error", Message: "bad request", Status: 400}, CreatedAt: at}
	for name, e := range map[string]llmq.ResultEvent{
		"full": full, "failed": failed, "empty": {},
		"no status": {Error: &llmq.ResultError{Code: "expired"}},
		"tiny cost": {CostUSD: 1.5e-9}, "huge cost": {CostUSD: 3e21}, "negative": {CostUSD: -0.25, Attempts: -1},
	} {
		want, err := json.Marshal(e)
		require.NoError(t, err, name)
		require.Equal(t, string(want), string(appendEvent(nil, &e)), name)
	}
	nan := llmq.ResultEvent{CostUSD: math.NaN()}
	require.True(t, json.Valid(appendEvent(nil, &nan)))
}

func FuzzAppendEvent(f *testing.F) {
	f.Add("j-1", "acme", "model", "<&>\u2028", "k", "v", 0.5, 3)
	f.Add("\xff\x00", "", "", "\"\\", "", "", 1e-7, -1)
	f.Fuzz(func(t *testing.T, job, tenant, model, msg, key, value string, cost float64, n int) {
		if math.IsNaN(cost) || math.IsInf(cost, 0) {
			return
		}
		e := llmq.ResultEvent{Type: llmq.ResultEventType, Version: n, JobID: job, Tenant: tenant, Model: model,
			CorrelationID: msg, Error: &llmq.ResultError{Code: key, Message: msg, Status: n}, CostUSD: cost,
			Attempts: n, Metadata: map[string]string{key: value, msg: job}, CreatedAt: time.Unix(int64(n), int64(n)).UTC()}
		want, err := json.Marshal(e)
		if err != nil {
			return
		}
		require.Equal(t, string(want), string(appendEvent(nil, &e)))
	})
}
