package workload

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
)

func TestMixJobsDecode(t *testing.T) {
	t.Parallel()
	m := Mix{LongEvery: 4, DeferrableEvery: 10, Priorities: true}
	var s Sizes
	counts := map[Kind]int{}
	prios := map[llmq.Priority]int{}
	deferrable := 0
	for n := range 60 {
		j := m.Job(s, "job-"+string(rune('a'+n%26)), "t", "gpt-4o-mini", n)
		b, err := j.Encode()
		require.NoError(t, err)
		got, err := llmq.Decode(b, llmq.DecodeOptions{})
		require.NoError(t, err, "job %d", n)
		require.Equal(t, "gpt-4o-mini", got.Model())
		counts[m.Kind(n)]++
		prios[got.Priority]++
		if got.Deferrable {
			deferrable++
		}
		want := ShortMaxTokensDefault
		if m.Kind(n) == KindLong {
			want = LongMaxTokensDefault
		}
		require.Equal(t, want, got.MaxOutputTokens())
	}
	require.Equal(t, map[Kind]int{KindShort: 45, KindLong: 15}, counts)
	require.Equal(t, map[llmq.Priority]int{llmq.PriorityHigh: 20, llmq.PriorityNormal: 20, llmq.PriorityLow: 20}, prios)
	require.Equal(t, 6, deferrable)
}

func TestLongPromptTokens(t *testing.T) {
	t.Parallel()
	est, err := shaping.NewEstimator(shaping.EstimatorConfig{})
	require.NoError(t, err)
	s := Sizes{}.WithDefaults()
	e, err := est.EstimateBody(s.Body("gpt-4o-mini", KindLong, 3))
	require.NoError(t, err)
	// One token per word, plus the instruction and the message framing.
	require.InDelta(t, s.LongPromptWords+12, e.PromptTokens, 10)
	require.Equal(t, s.LongMaxTokens, e.MaxOutputTokens)
}

func TestMalformedIsPoison(t *testing.T) {
	t.Parallel()
	for n := range len(malformed) {
		_, err := llmq.Decode(Malformed("bad-1", n), llmq.DecodeOptions{})
		var ve *llmq.ValidationError
		require.ErrorAs(t, err, &ve, "malformed %d", n)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{5, 1, 4, 2, 3}
	require.Equal(t, time.Duration(3), Percentile(ds, 0.5))
	require.Equal(t, time.Duration(5), Percentile(ds, 0.99))
	require.Equal(t, time.Duration(1), Percentile(ds, 0))
	require.Equal(t, time.Duration(0), Percentile(nil, 0.5))
	require.Equal(t, []time.Duration{5, 1, 4, 2, 3}, ds, "the input is not reordered")
}
