package llmq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

func TestModelCost(t *testing.T) {
	m := llmq.Model{InputPricePer1M: 0.15, OutputPricePer1M: 0.60}
	require.InDelta(t, 1000*0.15/1e6+500*0.60/1e6, m.Cost(1000, 500), 1e-15)
	require.InDelta(t, m.Cost(1000, 500)*llmq.BatchDiscountDefault, m.BatchCost(1000, 500), 1e-15, "no discount set: the default")
	m.BatchDiscount = 0.25
	require.InDelta(t, m.Cost(1000, 500)*0.25, m.BatchCost(1000, 500), 1e-15)
	require.Zero(t, llmq.Model{}.Cost(1000, 500), "a model without prices is free")
}

func TestCatalogLookup(t *testing.T) {
	c := llmq.Catalog{
		Models:  map[string]llmq.Model{"a": {RPM: 10}},
		Default: llmq.Model{RPM: 99},
	}
	require.Equal(t, 10.0, c.Lookup("a").RPM)
	require.Equal(t, 99.0, c.Lookup("other").RPM, "a model not listed gets Default")
	require.Equal(t, llmq.Model{}, llmq.Catalog{}.Lookup("any"))
}

func TestCatalogChain(t *testing.T) {
	c := llmq.Catalog{Models: map[string]llmq.Model{"a": {Fallbacks: []string{"c", "b", "d"}}}}
	j := decode(t, `{"fallback_models":["b","a"],"body":{"model":"a","messages":[{"role":"user","content":"x"}]}}`)
	require.Equal(t, []string{"a", "b", "c", "d"}, c.Chain(j), "own model, own fallbacks, configured fallbacks, each once")
	j = decode(t, `{"body":{"model":"z","messages":[{"role":"user","content":"x"}]}}`)
	require.Equal(t, []string{"z"}, c.Chain(j))
}

func decode(t *testing.T, msg string) *llmq.Job {
	t.Helper()
	j, err := llmq.Decode([]byte(msg), llmq.DecodeOptions{})
	require.NoError(t, err)
	return j
}
