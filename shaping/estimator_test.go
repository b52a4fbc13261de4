package shaping

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEstimator(t *testing.T) {
	t.Parallel()
	e, err := NewEstimator(EstimatorConfig{MinSamples: 4})
	require.NoError(t, err)
	est, err := e.EstimateBody([]byte(`{"model":"gpt-4o-mini","max_tokens":100,"n":2,"messages":[{"role":"user","content":"Hello world"}]}`))
	require.NoError(t, err)
	// 3 priming + 3 per message + "user" (1) + "Hello world" (2)
	require.Equal(t, Estimate{Model: "gpt-4o-mini", PromptTokens: 9, SafePromptTokens: 9, MaxOutputTokens: 200}, est)
	for _, actual := range []int{100, 110, 120, 130} {
		e.Observe("m", 100, actual)
	}
	st := e.Stats("m")
	require.Equal(t, ErrorStats{Count: 4, P50: 1.1, P95: 1.3, Safety: 1.3}, st)
	require.Equal(t, 1.0, e.Safety("other"))
	_, err = e.EstimateBody([]byte(`{`))
	var se *json.SyntaxError
	require.ErrorAs(t, err, &se)
}
