package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
)

// TestDecodeJobValidatedOnce: the job decodeJob hands to the producer is as
// llmq.Decode returned it (Job.Validated), whoever posts it, so neither
// the producer nor the store validates it again; its tenant is the key's,
// or the operator's job's own.
func TestDecodeJobValidatedOnce(t *testing.T) {
	t.Parallel()
	a, err := New(Config{Producer: &producer.Producer{}, Store: noStore{}, Keys: map[string]string{"key-acme-0123": "acme"}})
	require.NoError(t, err)
	body := `"body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`
	for _, tc := range []struct {
		name string
		s    scope
		job  string
		want string
	}{
		{"tenant key, no tenant", scope{tenant: "acme"}, `{` + body, "acme"},
		{"tenant key, its own tenant", scope{tenant: "acme"}, `{"tenant":"acme",` + body, "acme"},
		{"tenant key, null tenant", scope{tenant: "acme"}, `{"tenant":null,` + body, "acme"},
		{"operator, the job's tenant", scope{operator: true}, `{"tenant":"globex",` + body, "globex"},
		{"operator, no tenant", scope{operator: true}, `{` + body, llmq.DefaultTenant},
		{"operator for a tenant", scope{operator: true, tenant: "acme"}, `{` + body, "acme"},
	} {
		j, e := a.decodeJob(json.RawMessage(tc.job), tc.s, "")
		require.Nil(t, e, tc.name)
		require.Equal(t, tc.want, j.Tenant, tc.name)
		require.True(t, j.Validated(), tc.name)
	}
	_, e := a.decodeJob(json.RawMessage(`{"tenant":"globex",`+body), scope{tenant: "acme"}, "jobs[3]")
	require.Equal(t, &Error{Code: CodeTenantMismatch, Field: "jobs[3].tenant",
		Message: `the API key acts for tenant "acme"; omit tenant or send "acme"`}, e)
}
