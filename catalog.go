package llmq

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// BatchDiscountDefault is the price factor of a Batch API call when a model
// sets none: the providers' batch lanes charge half the live price.
const BatchDiscountDefault = 0.5

// Model is everything llmq knows about one upstream model: the quota that
// shapes its calls, its context window (checked before a fallback), its
// prices (the cost stored with each result and counted against budgets) and
// the models to fall back to. It is the one place these facts live: the
// configuration file parses into it and every component reads it.
//
// A zero field means "unknown" or "none", as each comment says.
type Model struct {
	// RPM and TPM are the provider's requests and tokens per minute for
	// this model; 0 = unknown (the adaptive strategy learns them).
	RPM float64 `yaml:"rpm" json:"rpm,omitempty"`
	TPM float64 `yaml:"tpm" json:"tpm,omitempty"`
	// Concurrency is the number of calls in flight: the fixed limit of the
	// rpm and shape strategies, the starting one of adaptive. 0 = the
	// shaping package's default.
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// ContextWindow is the model's prompt + output limit in tokens; 0 =
	// unknown, not checked.
	ContextWindow int `yaml:"context_window" json:"context_window,omitempty"`
	// MaxOutputDefault is the output allowance reserved for a job that sets
	// no max_tokens; 0 = the shaping package's default.
	MaxOutputDefault int `yaml:"max_output_default" json:"max_output_default,omitempty"`
	// InputPricePer1M and OutputPricePer1M are USD per million prompt and
	// completion tokens at the live price; 0 = free.
	InputPricePer1M  float64 `yaml:"input_price_per_1m" json:"input_price_per_1m,omitempty"`
	OutputPricePer1M float64 `yaml:"output_price_per_1m" json:"output_price_per_1m,omitempty"`
	// BatchDiscount is the price factor of a Batch API call, in (0, 1];
	// 0 = BatchDiscountDefault.
	BatchDiscount float64 `yaml:"batch_discount" json:"batch_discount,omitempty"`
	// Fallbacks are tried in order, after a job's own fallback_models, when
	// this model stays rate limited.
	Fallbacks []string `yaml:"fallbacks" json:"fallbacks,omitempty"`
}

// Cost is the live price in USD of a call that used prompt and completion
// tokens.
func (m Model) Cost(prompt, completion int) float64 {
	return (float64(prompt)*m.InputPricePer1M + float64(completion)*m.OutputPricePer1M) / 1e6
}

// BatchCost is the price in USD of the same call through the Batch API.
func (m Model) BatchCost(prompt, completion int) float64 {
	d := m.BatchDiscount
	if d == 0 {
		d = BatchDiscountDefault
	}
	return m.Cost(prompt, completion) * d
}

// Catalog is the set of models llmq is configured for. The zero Catalog
// knows no model, allows every name and gives it the zero Model.
type Catalog struct {
	// Models holds the configured models by name.
	Models map[string]Model
	// Default describes any model not in Models.
	Default Model
	// AllowAny lets jobs name models that Models does not list (they run
	// with Default). Without it, a catalog that lists models allows only
	// those: a tenant cannot spend the operator's key on any model at any
	// price, and the lanes and metric labels of the worker stay bounded.
	AllowAny bool
}

// CodeModelNotAllowed is the field error code of a model the catalog does
// not allow.
const CodeModelNotAllowed = "model_not_allowed"

// Allows reports whether a job may name model: it is in Models or is the
// fallback of a model there, or Models is empty (a configuration that names
// no model allows every name), or AllowAny is set.
func (c Catalog) Allows(model string) bool {
	if c.AllowAny || len(c.Models) == 0 {
		return true
	}
	if _, ok := c.Models[model]; ok {
		return true
	}
	for _, m := range c.Models {
		if slices.Contains(m.Fallbacks, model) {
			return true
		}
	}
	return false
}

// maxModelsNamed bounds the allowed models an error lists.
const maxModelsNamed = 10

// CheckModels returns a field error for each model of j (body.model and
// fallback_models[i]) that c does not allow, naming the models it does.
func (c Catalog) CheckModels(j *Job) []FieldError {
	var errs []FieldError
	check := func(field, model string) {
		if c.Allows(model) {
			return
		}
		errs = append(errs, FieldError{Field: field, Code: CodeModelNotAllowed,
			Message: fmt.Sprintf("model %.64q is not one this service runs; allowed: %s", model, c.allowedNames())})
	}
	check("body.model", j.Model())
	for i, m := range j.FallbackModels {
		check(fmt.Sprintf("fallback_models[%d]", i), m)
	}
	return errs
}

// allowedNames lists the first allowed models, sorted.
func (c Catalog) allowedNames() string {
	set := map[string]bool{}
	for name, m := range c.Models {
		set[name] = true
		for _, f := range m.Fallbacks {
			set[f] = true
		}
	}
	names := slices.Sorted(maps.Keys(set))
	if n := len(names); n > maxModelsNamed {
		names = append(names[:maxModelsNamed], fmt.Sprintf("and %d more", n-maxModelsNamed))
	}
	return strings.Join(names, ", ")
}

// Lookup returns the facts of model name: its entry, or Default.
func (c Catalog) Lookup(name string) Model {
	if m, ok := c.Models[name]; ok {
		return m
	}
	return c.Default
}

// Chain is the ordered list of models a job may be called with: its own
// model, its fallback_models, then the configured fallbacks of its model,
// each once.
func (c Catalog) Chain(j *Job) []string {
	out := make([]string, 0, 1+len(j.FallbackModels))
	add := func(m string) {
		for _, seen := range out {
			if seen == m {
				return
			}
		}
		out = append(out, m)
	}
	add(j.Model())
	for _, m := range j.FallbackModels {
		add(m)
	}
	for _, m := range c.Lookup(j.Model()).Fallbacks {
		add(m)
	}
	return out
}
