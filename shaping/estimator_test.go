package shaping

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
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
	require.Equal(t, Estimate{Model: "gpt-4o-mini", PromptTokens: 9, SafePromptTokens: 9, MaxOutputTokens: 200, N: 2}, est)
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

// TestEstimatorCodec: o200k for the gpt-4o, gpt-4.1, gpt-4.5, gpt-5,
// o-series and gpt-oss families (any case), cl100k for the rest; the two
// count this text differently.
func TestEstimatorCodec(t *testing.T) {
	t.Parallel()
	e, err := NewEstimator(EstimatorConfig{})
	require.NoError(t, err)
	const text = "こんにちは世界"
	for model, want := range map[string]int{
		"gpt-4o-mini": 2, "GPT-4o": 2, "gpt-4.1-nano": 2, "gpt-4.5-preview": 2, "gpt-5": 2, "o1-mini": 2, "o3": 2, "o4-mini": 2,
		"chatgpt-4o-latest": 2, "gpt-oss-120b": 2,
		"gpt-4": 4, "gpt-3.5-turbo": 4, "qwen-max": 4, "": 4,
	} {
		require.Equal(t, want, e.CountText(model, text), model)
	}
}

func TestEstimatorMessages(t *testing.T) {
	t.Parallel()
	e, err := NewEstimator(EstimatorConfig{})
	require.NoError(t, err)
	// 3 priming, then per message 3 + role + content, and 1 + name when named.
	require.Equal(t, 3, e.CountMessages("gpt-4o", nil))
	require.Equal(t, 3+3+1+2, e.CountMessages("gpt-4o", []Message{{Role: "user", Content: "Hello world"}}))
	require.Equal(t, 3+3+1+2+1+1, e.CountMessages("gpt-4o", []Message{{Role: "user", Name: "bob", Content: "Hello world"}}))

	for _, tc := range []struct {
		body string
		want Estimate
	}{
		// Text parts of a multi-part content count; other parts do not.
		{`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hello"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":" world"}]}]}`,
			Estimate{Model: "gpt-4o", PromptTokens: 9, SafePromptTokens: 9, N: 1}},
		// A content that is neither a string nor parts counts nothing.
		{`{"model":"gpt-4o","messages":[{"role":"user","name":"bob","content":5}]}`,
			Estimate{Model: "gpt-4o", PromptTokens: 3 + 3 + 1 + 1 + 1, SafePromptTokens: 9, N: 1}},
		// max_completion_tokens wins over max_tokens; n multiplies it.
		{`{"model":"gpt-4o","max_tokens":100,"max_completion_tokens":30,"n":3,"messages":[]}`,
			Estimate{Model: "gpt-4o", PromptTokens: 3, SafePromptTokens: 3, MaxOutputTokens: 90, N: 3}},
		{`{"model":"gpt-4o","max_tokens":100,"messages":[]}`,
			Estimate{Model: "gpt-4o", PromptTokens: 3, SafePromptTokens: 3, MaxOutputTokens: 100, N: 1}},
		{`{"model":"gpt-4o","messages":[]}`, Estimate{Model: "gpt-4o", PromptTokens: 3, SafePromptTokens: 3, N: 1}},
		// n without a max output: the lane reserves n default outputs.
		{`{"model":"gpt-4o","n":4,"messages":[]}`, Estimate{Model: "gpt-4o", PromptTokens: 3, SafePromptTokens: 3, N: 4}},
	} {
		est, err := e.EstimateBody([]byte(tc.body))
		require.NoError(t, err)
		require.Equal(t, tc.want, est, tc.body)
		require.Equal(t, Request{PromptTokens: tc.want.SafePromptTokens, MaxOutputTokens: tc.want.MaxOutputTokens, N: tc.want.N}, est.Request())
	}
}

// TestEstimatorSafety: the safety factor is the p95 of actual/estimated,
// once MinSamples are in, never below 1 nor above MaxSafety, over a window
// of the latest observations; it rounds the safe estimate up.
func TestEstimatorSafety(t *testing.T) {
	t.Parallel()
	_, err := NewEstimator(EstimatorConfig{Window: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewEstimator(EstimatorConfig{MinSamples: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewEstimator(EstimatorConfig{MaxSafety: 0.5})
	require.EqualError(t, err, "shaping: invalid config: EstimatorConfig.Window, MinSamples must be >= 1 and MaxSafety >= 1")
	require.Equal(t, EstimatorConfig{Window: 512, MinSamples: 20, MaxSafety: 2}, EstimatorConfig{}.WithDefaults())
	one, err := NewEstimator(EstimatorConfig{Window: 1, MinSamples: 1, MaxSafety: 1})
	require.NoError(t, err, "every bound is inclusive")
	one.Observe("m", 10, 20)
	one.Observe("m", 10, 15)
	require.Equal(t, ErrorStats{Count: 1, P50: 1.5, P95: 1.5, Safety: 1}, one.Stats("m"), "a window of one, safety capped at 1")

	e, err := NewEstimator(EstimatorConfig{Window: 4, MinSamples: 3, MaxSafety: 1.5})
	require.NoError(t, err)
	e.Observe("m", 0, 10) // ignored: nothing estimated
	e.Observe("m", 10, 0) // ignored: no usage
	require.Equal(t, ErrorStats{Safety: 1}, e.Stats("m"))
	e.Observe("m", 10, 12)
	e.Observe("m", 10, 11)
	require.Equal(t, ErrorStats{Count: 2, P50: 1.1, P95: 1.2, Safety: 1}, e.Stats("m"), "below MinSamples")
	e.Observe("m", 10, 13)
	require.Equal(t, ErrorStats{Count: 3, P50: 1.2, P95: 1.3, Safety: 1.3}, e.Stats("m"))
	est, err := e.EstimateBody([]byte(`{"model":"m","messages":[{"role":"user","content":"Hello world"}]}`))
	require.NoError(t, err)
	require.Equal(t, 9, est.PromptTokens)
	require.Equal(t, 12, est.SafePromptTokens, "ceil(9 x 1.3)")
	e.Observe("m", 10, 30)
	require.Equal(t, ErrorStats{Count: 4, P50: 1.2, P95: 3, Safety: 1.5}, e.Stats("m"), "capped at MaxSafety")
	for range 4 {
		e.Observe("m", 10, 5)
	}
	require.Equal(t, ErrorStats{Count: 4, P50: 0.5, P95: 0.5, Safety: 1}, e.Stats("m"), "the window forgets; never below 1")
	e.Observe("m", 10, 20)
	require.Equal(t, ErrorStats{Count: 4, P50: 0.5, P95: 2, Safety: 1.5}, e.Stats("m"), "the ring wraps around")
}

// TestEstimatorStatsFollowTheWindow: over a long run of observations with
// repeated ratios, the statistics are every time those of the window's
// latest ratios, sorted afresh.
func TestEstimatorStatsFollowTheWindow(t *testing.T) {
	t.Parallel()
	const window = 7
	e, err := NewEstimator(EstimatorConfig{Window: window, MinSamples: 3, MaxSafety: 1.8})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	var seen []float64
	for i := range 500 {
		actual := 5 + rng.IntN(12) // ratios repeat: the ring holds duplicates
		e.Observe("m", 10, actual)
		seen = append(seen, float64(actual)/10)
		last := slices.Sorted(slices.Values(seen[max(0, len(seen)-window):]))
		n := len(last)
		q := func(p float64) float64 { return last[min(n-1, int(math.Ceil(p*float64(n)))-1)] }
		want := ErrorStats{Count: n, P50: q(0.5), P95: q(0.95), Safety: 1}
		if n >= 3 {
			want.Safety = min(1.8, max(1, want.P95))
		}
		require.Equal(t, want, e.Stats("m"), "after %d observations", i+1)
		require.Equal(t, want.Safety, e.Safety("m"))
	}
}

// TestContentTextDecodesAsJSON: a message's content reads as encoding/json
// decodes it, whether a plain string (taken between its quotes), one with
// escapes or invalid UTF-8 (decoded), or parts.
func TestContentTextDecodesAsJSON(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`"plain text, 'quoted' words"`, `""`, `"line\nbreak \"q\" \u00e9\u0041"`, "\"caf\xc3\xa9\"",
		"\"bad \xff utf-8\"", `"back\\slash"`} {
		var want string
		require.NoError(t, json.Unmarshal([]byte(raw), &want))
		require.Equal(t, want, contentText(json.RawMessage(raw)), raw)
	}
	require.Equal(t, "ab", contentText(json.RawMessage(`[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]`)))
	require.Empty(t, contentText(nil))
	require.Empty(t, contentText(json.RawMessage(`null`)))
}
