package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// testTenants are the tenants the API of the tests is configured with.
var testTenants = llmq.Tenants{
	"acme": {Scope: llmq.Scope{Weight: 3, TPM: 90000, Priority: llmq.PriorityNormal},
		Projects: map[string]llmq.Scope{"support": {RPM: 60}}},
}

// TestUsage: a tenant sees its own scopes (configured, or with jobs
// finished today), with limits, weight and usage; an operator every
// tenant's.
func TestUsage(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, `{"id":"g1","body":`+validBody+`}`).status)
	l := b.claim(t, "g1")
	_, err := b.store.MarkCalling(context.Background(), l, store.PolicyState{})
	require.NoError(t, err)
	_, err = b.store.StoreResult(context.Background(), l.Key, store.Result{UsedModel: "gpt-4o-mini", PromptTokens: 9, CompletionTokens: 3})
	require.NoError(t, err)

	acme := `{"tenant":"acme","weight":3,"limits":{"rpm":0,"tpm":90000,"concurrency":0,"priority":"normal"},
		"last_minute":{"requests":0,"tokens":0},"today":{"requests":0,"tokens":0}}`
	support := `{"tenant":"acme","project":"support","weight":1,"limits":{"rpm":60,"tpm":0,"concurrency":0},
		"last_minute":{"requests":0,"tokens":0},"today":{"requests":0,"tokens":0}}`
	globex := `{"tenant":"globex","weight":1,"limits":{"rpm":0,"tpm":0,"concurrency":0},
		"last_minute":{"requests":1,"tokens":12},"today":{"requests":1,"tokens":12}}`
	r := b.get(t, keyAcme, "/v1/usage")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"data":[`+acme+`,`+support+`],"next_cursor":null}`, string(r.body))
	r = b.get(t, keyGlobex, "/v1/usage")
	require.JSONEq(t, `{"data":[`+globex+`],"next_cursor":null}`, string(r.body))
	r = b.get(t, keyOps, "/v1/usage")
	require.JSONEq(t, `{"data":[`+acme+`,`+support+`,`+globex+`],"next_cursor":null}`, string(r.body))
	r = b.get(t, keyOps, "/v1/usage?tenant=globex")
	require.JSONEq(t, `{"data":[`+globex+`],"next_cursor":null}`, string(r.body))
}
