package llmq_test

import (
	"fmt"
	"strings"
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

func TestCatalogAllows(t *testing.T) {
	t.Parallel()
	listed := llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {Fallbacks: []string{"gpt-4o"}}, "gpt-4.1-mini": {}}}
	require.True(t, listed.Allows("gpt-4o-mini"))
	require.True(t, listed.Allows("gpt-4o"), "a listed model's fallback")
	require.False(t, listed.Allows("gpt-5-pro"), "a listed catalog allows only its models")
	require.False(t, listed.Allows(""))
	require.True(t, llmq.Catalog{}.Allows("anything"), "a configuration that names no model allows every name")
	listed.AllowAny = true
	require.True(t, listed.Allows("gpt-5-pro"), "allow_any_model")
}

func TestCatalogCheckModels(t *testing.T) {
	t.Parallel()
	c := llmq.Catalog{Models: map[string]llmq.Model{"b": {}, "a": {}}}
	j, err := llmq.Decode([]byte(`{"fallback_models":["a","<!channel>"],"body":{"model":"`+strings.Repeat("x", 8000)+`","messages":[{"role":"user","content":"hi"}]}}`), llmq.DecodeOptions{})
	require.NoError(t, err)
	errs := c.CheckModels(j)
	require.Len(t, errs, 2)
	require.Equal(t, "body.model", errs[0].Field)
	require.Equal(t, llmq.CodeModelNotAllowed, errs[0].Code)
	require.Less(t, len(errs[0].Message), 200, "a long name is not echoed whole")
	require.True(t, strings.HasSuffix(errs[0].Message, "is not one this service runs; allowed: a, b"), errs[0].Message)
	require.Equal(t, llmq.FieldError{Field: "fallback_models[1]", Code: llmq.CodeModelNotAllowed,
		Message: `model "<!channel>" is not one this service runs; allowed: a, b`}, errs[1])
	j, err = llmq.Decode([]byte(`{"fallback_models":["b"],"body":{"model":"a","messages":[{"role":"user","content":"hi"}]}}`), llmq.DecodeOptions{})
	require.NoError(t, err)
	require.Empty(t, c.CheckModels(j))
}

// TestCatalogCheckModelsNamesTen: the error lists at most ten allowed
// models, sorted, and says how many it left out.
func TestCatalogCheckModelsNamesTen(t *testing.T) {
	t.Parallel()
	j := decode(t, `{"body":{"model":"x","messages":[{"role":"user","content":"hi"}]}}`)
	catalog := func(n int) llmq.Catalog {
		c := llmq.Catalog{Models: map[string]llmq.Model{}}
		for i := range n {
			c.Models[fmt.Sprintf("m%02d", i)] = llmq.Model{}
		}
		return c
	}
	const ten = "m00, m01, m02, m03, m04, m05, m06, m07, m08, m09"
	require.Equal(t, []llmq.FieldError{{Field: "body.model", Code: llmq.CodeModelNotAllowed,
		Message: `model "x" is not one this service runs; allowed: ` + ten}}, catalog(10).CheckModels(j))
	require.Equal(t, []llmq.FieldError{{Field: "body.model", Code: llmq.CodeModelNotAllowed,
		Message: `model "x" is not one this service runs; allowed: ` + ten + ", and 3 more"}}, catalog(13).CheckModels(j))
}
