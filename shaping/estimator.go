package shaping

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"

	"github.com/llmq/llmq/internal/tokencount"
)

// Estimator defaults.
const (
	// EstimatorWindowDefault is how many recent errors per model the
	// statistics keep.
	EstimatorWindowDefault = 512
	// EstimatorMinSamplesDefault is how many observations a model needs
	// before its safety factor moves off 1.
	EstimatorMinSamplesDefault = 20
	// EstimatorMaxSafetyDefault caps the safety factor.
	EstimatorMaxSafetyDefault = 2.0
)

// EstimatorConfig configures an [Estimator].
type EstimatorConfig struct {
	// Window is the number of recent observations per model. Default
	// EstimatorWindowDefault.
	Window int
	// MinSamples before the safety factor applies. Default
	// EstimatorMinSamplesDefault.
	MinSamples int
	// MaxSafety caps the safety factor. Default EstimatorMaxSafetyDefault.
	MaxSafety float64
}

// WithDefaults returns c with the defaults applied.
func (c EstimatorConfig) WithDefaults() EstimatorConfig {
	c.Window = cmp.Or(c.Window, EstimatorWindowDefault)
	c.MinSamples = cmp.Or(c.MinSamples, EstimatorMinSamplesDefault)
	c.MaxSafety = cmp.Or(c.MaxSafety, EstimatorMaxSafetyDefault)
	return c
}

// Estimator counts prompt tokens offline with the model's tokenizer (o200k
// for gpt-4o, gpt-4.1, gpt-5 and o-series models, cl100k otherwise), and
// learns per model how far its estimates fall below the real usage: the p95
// of actual/estimated becomes a safety factor (>= 1) applied to later
// estimates (docs/design/quotas.md). Safe for concurrent use.
type Estimator struct {
	cfg    EstimatorConfig
	cl100k *tokencount.Counter
	o200k  *tokencount.Counter

	mu     sync.Mutex
	models map[string]*errorRing
}

// errorRing is a model's window of ratios, in the order they came (a ring)
// and sorted (kept so by each observation: a quantile is then read, not
// sorted for, on every estimate and observation).
type errorRing struct {
	ratios []float64
	sorted []float64
	next   int
	full   bool
	safety float64
}

// NewEstimator returns an estimator with both vocabularies loaded.
func NewEstimator(cfg EstimatorConfig) (*Estimator, error) {
	cfg = cfg.WithDefaults()
	if cfg.Window < 1 || cfg.MinSamples < 1 || cfg.MaxSafety < 1 {
		return nil, fmt.Errorf("%w: EstimatorConfig.Window, MinSamples must be >= 1 and MaxSafety >= 1", ErrInvalidConfig)
	}
	cl, err := tokencount.Get(tokenizer.Cl100kBase)
	if err != nil {
		return nil, fmt.Errorf("shaping: load cl100k: %w", err)
	}
	o2, err := tokencount.Get(tokenizer.O200kBase)
	if err != nil {
		return nil, fmt.Errorf("shaping: load o200k: %w", err)
	}
	return &Estimator{cfg: cfg, cl100k: cl, o200k: o2, models: map[string]*errorRing{}}, nil
}

// Message is one chat message for counting.
type Message struct {
	Role, Name, Content string
}

func (e *Estimator) codec(model string) *tokencount.Counter {
	m := strings.ToLower(model)
	for _, p := range []string{"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss"} {
		if strings.HasPrefix(m, p) {
			return e.o200k
		}
	}
	return e.cl100k
}

// CountText returns the tokens of s under model's encoding.
func (e *Estimator) CountText(model, s string) int {
	n, err := e.codec(model).Count(s)
	if err != nil {
		return len(s)/4 + 1
	}
	return n
}

// CountMessages returns the prompt tokens of a chat request, per OpenAI's
// cookbook: 3 per message, 1 more with a name, plus the contents, plus 3
// priming the reply.
func (e *Estimator) CountMessages(model string, msgs []Message) int {
	n := 3
	for _, m := range msgs {
		n += 3 + e.CountText(model, m.Role) + e.CountText(model, m.Content)
		if m.Name != "" {
			n += 1 + e.CountText(model, m.Name)
		}
	}
	return n
}

// Estimate is the admission estimate of one chat request.
type Estimate struct {
	// Model is the body's model.
	Model string
	// PromptTokens is the tokenizer's count.
	PromptTokens int
	// SafePromptTokens is PromptTokens times the model's safety factor.
	SafePromptTokens int
	// MaxOutputTokens is n x (max_completion_tokens, else max_tokens);
	// 0 when the body sets none.
	MaxOutputTokens int
	// N is the body's n (choices), at least 1: without a max output, the
	// lane reserves N default outputs.
	N int
}

// Request returns the admission request for e (quotas not included).
func (e Estimate) Request() Request {
	return Request{PromptTokens: e.SafePromptTokens, MaxOutputTokens: e.MaxOutputTokens, N: e.N}
}

type chatBody struct {
	Model               string `json:"model"`
	MaxTokens           int    `json:"max_tokens"`
	MaxCompletionTokens int    `json:"max_completion_tokens"`
	N                   int    `json:"n"`
	Messages            []struct {
		Role    string          `json:"role"`
		Name    string          `json:"name"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// EstimateBody estimates an OpenAI chat-completions request body. Text parts
// of multi-part contents are counted; other parts (images, audio) are not.
func (e *Estimator) EstimateBody(body []byte) (Estimate, error) {
	var b chatBody
	if err := json.Unmarshal(body, &b); err != nil {
		return Estimate{}, fmt.Errorf("shaping: estimate body: %w", err)
	}
	msgs := make([]Message, 0, len(b.Messages))
	for _, m := range b.Messages {
		msgs = append(msgs, Message{Role: m.Role, Name: m.Name, Content: contentText(m.Content)})
	}
	est := Estimate{Model: b.Model, PromptTokens: e.CountMessages(b.Model, msgs)}
	out := cmp.Or(b.MaxCompletionTokens, b.MaxTokens)
	est.N = max(1, b.N)
	est.MaxOutputTokens = out * est.N
	est.SafePromptTokens = int(math.Ceil(float64(est.PromptTokens) * e.Safety(b.Model)))
	return est, nil
}

func contentText(raw json.RawMessage) string {
	if s, ok := plainString(raw); ok {
		return s
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	return sb.String()
}

// Observe records one request's estimated and actual prompt tokens.
func (e *Estimator) Observe(model string, estimated, actual int) {
	if estimated <= 0 || actual <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.models[model]
	if r == nil {
		r = &errorRing{ratios: make([]float64, e.cfg.Window), sorted: make([]float64, 0, e.cfg.Window), safety: 1}
		e.models[model] = r
	}
	if r.full {
		i, _ := slices.BinarySearch(r.sorted, r.ratios[r.next])
		r.sorted = slices.Delete(r.sorted, i, i+1)
	}
	ratio := float64(actual) / float64(estimated)
	r.ratios[r.next] = ratio
	i, _ := slices.BinarySearch(r.sorted, ratio)
	r.sorted = slices.Insert(r.sorted, i, ratio)
	r.next++
	if r.next == len(r.ratios) {
		r.next, r.full = 0, true
	}
	if st := r.stats(); st.Count >= e.cfg.MinSamples {
		r.safety = min(e.cfg.MaxSafety, max(1, st.P95))
	}
}

// ErrorStats summarises a model's estimation error as ratios actual /
// estimated (1 = exact, above 1 = underestimated).
type ErrorStats struct {
	Count    int
	P50, P95 float64
	// Safety is the factor applied to new estimates.
	Safety float64
}

// Stats returns the model's estimation-error statistics.
func (e *Estimator) Stats(model string) ErrorStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.models[model]
	if r == nil {
		return ErrorStats{Safety: 1}
	}
	st := r.stats()
	st.Safety = r.safety
	return st
}

// Safety returns the model's current safety factor (1 until learned).
func (e *Estimator) Safety(model string) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.models[model]; r != nil {
		return r.safety
	}
	return 1
}

func (r *errorRing) stats() ErrorStats {
	s, n := r.sorted, len(r.sorted)
	if n == 0 {
		return ErrorStats{}
	}
	q := func(p float64) float64 { return s[min(n-1, int(math.Ceil(p*float64(n)))-1)] }
	return ErrorStats{Count: n, P50: q(0.50), P95: q(0.95)}
}

// plainString returns the JSON string raw, a value of a document that
// decoded, when it has no escape and is valid UTF-8: then it is its bytes
// between the quotes, and decoding it again (scanned, unquoted) would only
// copy them.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
		return "", false
	}
	return string(raw[1 : len(raw)-1]), true
}
