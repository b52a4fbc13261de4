package llmq

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode"
)

// ErrUnknownModel: a setting names a model the catalog does not hold.
var ErrUnknownModel = errors.New("unknown model")

// MaxModelNameLength bounds a model's name.
const MaxModelNameLength = 256

// ValidModelName reports whether name can name a model: 1 to
// MaxModelNameLength characters, none of them a space or a control
// character (a provider's names hold slashes and colons).
func ValidModelName(name string) bool {
	return name != "" && len(name) <= MaxModelNameLength &&
		!strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
}

// ValidateModels checks a catalog's models; every error names its setting
// under prefix ("models.gpt-4o.rpm: ..."). A fallback must name another
// model of models unless allowAny: a typo would start, then fail every
// job that falls back with the provider's 404.
func ValidateModels(prefix string, models map[string]Model, allowAny bool) []error {
	var errs []error
	names := slices.Sorted(maps.Keys(models))
	for _, name := range names {
		m := models[name]
		p := prefix + "." + name
		if !ValidModelName(name) {
			errs = append(errs, fmt.Errorf("%s: a model name is 1-%d characters, without spaces", prefix, MaxModelNameLength))
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"rpm", m.RPM}, {"tpm", m.TPM}, {"concurrency", float64(m.Concurrency)}, {"context_window", float64(m.ContextWindow)},
			{"max_output_default", float64(m.MaxOutputDefault)}, {"input_price_per_1m", m.InputPricePer1M},
			{"output_price_per_1m", m.OutputPricePer1M}} {
			if !(f.v >= 0 && f.v < math.Inf(1)) {
				errs = append(errs, fmt.Errorf("%s.%s: must not be negative, and finite; got %v", p, f.name, f.v))
			}
		}
		if !(m.BatchDiscount >= 0 && m.BatchDiscount <= 1) {
			errs = append(errs, fmt.Errorf("%s.batch_discount: must be in (0, 1] (0: the default, %v); got %v", p, BatchDiscountDefault, m.BatchDiscount))
		}
		for i, f := range m.Fallbacks {
			_, listed := models[f]
			switch {
			case strings.TrimSpace(f) == "" || f == name:
				errs = append(errs, fmt.Errorf("%s.fallbacks[%d]: must name another model; got %q", p, i, f))
			case !listed && !allowAny:
				errs = append(errs, unknownModel(fmt.Sprintf("%s.fallbacks[%d]: %q is not in models (%s): list it there with its quota, or set allow_any_model: true",
					p, i, f, strings.Join(names, ", "))))
			}
		}
	}
	return errs
}

// unknownModel is an error that is ErrUnknownModel, with its own message.
type unknownModel string

func (e unknownModel) Error() string        { return string(e) }
func (e unknownModel) Is(target error) bool { return target == ErrUnknownModel }
