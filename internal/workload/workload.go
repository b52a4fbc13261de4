package workload

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/llmq/llmq"
)

// Kind is the size class of a job.
type Kind string

// Kinds.
const (
	// KindShort is a one-line question with a small max_tokens.
	KindShort Kind = "short"
	// KindLong is a long document to summarise with a large max_tokens.
	KindLong Kind = "long"
)

// Defaults of Sizes.
const (
	ShortMaxTokensDefault  = 120
	LongPromptWordsDefault = 2000
	LongMaxTokensDefault   = 600
)

// words are common English words that o200k_base and cl100k_base encode as
// one token each with their leading space, so a long prompt of n words is
// about n tokens.
var words = strings.Fields("the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there one all we their")

// Sizes sets the token sizes of the two kinds. The zero value uses the
// defaults.
type Sizes struct {
	// ShortMaxTokens is the max_tokens of a short job. 0 =
	// ShortMaxTokensDefault.
	ShortMaxTokens int
	// LongPromptWords is the length of a long job's document, in words
	// (about as many tokens). 0 = LongPromptWordsDefault.
	LongPromptWords int
	// LongMaxTokens is the max_tokens of a long job. 0 =
	// LongMaxTokensDefault.
	LongMaxTokens int
}

// WithDefaults returns s with every zero field set to its default.
func (s Sizes) WithDefaults() Sizes {
	s.ShortMaxTokens = cmp.Or(s.ShortMaxTokens, ShortMaxTokensDefault)
	s.LongPromptWords = cmp.Or(s.LongPromptWords, LongPromptWordsDefault)
	s.LongMaxTokens = cmp.Or(s.LongMaxTokens, LongMaxTokensDefault)
	return s
}

// Body returns the chat-completions body of job seq of the given kind for
// model.
func (s Sizes) Body(model string, kind Kind, seq int) json.RawMessage {
	s = s.WithDefaults()
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	body := struct {
		Model     string    `json:"model"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
	}{Model: model}
	switch kind {
	case KindLong:
		var b strings.Builder
		fmt.Fprintf(&b, "Summarise document %d in five bullet points:", seq)
		for i := range s.LongPromptWords {
			b.WriteByte(' ')
			b.WriteString(words[(i*7+seq)%len(words)])
		}
		body.Messages = []message{{Role: "user", Content: b.String()}}
		body.MaxTokens = s.LongMaxTokens
	default:
		body.Messages = []message{{Role: "user", Content: fmt.Sprintf("Question %d: what is %d plus %d? Answer in one sentence.", seq, seq, seq%17)}}
		body.MaxTokens = s.ShortMaxTokens
	}
	out, _ := json.Marshal(body) // a struct of strings and ints always marshals
	return out
}

// Charge is the TPM charge of a job of kind whose prompt is about
// promptTokens: prompt plus max_tokens, what a provider reserves at
// admission. Short prompts are counted as 20 tokens.
func (s Sizes) Charge(kind Kind) int {
	s = s.WithDefaults()
	if kind == KindLong {
		return s.LongPromptWords + 12 + s.LongMaxTokens
	}
	return 20 + s.ShortMaxTokens
}

// Mix says which job of a sequence is long, deferrable and of which
// priority. The zero value makes every job short, normal and live.
type Mix struct {
	// LongEvery makes every LongEvery-th job long (job n is long when
	// n % LongEvery == LongEvery-1). 0: none.
	LongEvery int
	// DeferrableEvery makes every DeferrableEvery-th job deferrable (job n
	// when n % DeferrableEvery == 0). 0: none.
	DeferrableEvery int
	// Priorities cycles the three priorities (high, normal, low) when
	// true; else every job is normal.
	Priorities bool
}

// Kind returns the kind of job n.
func (m Mix) Kind(n int) Kind {
	if m.LongEvery > 0 && n%m.LongEvery == m.LongEvery-1 {
		return KindLong
	}
	return KindShort
}

// Deferrable reports whether job n is deferrable.
func (m Mix) Deferrable(n int) bool { return m.DeferrableEvery > 0 && n%m.DeferrableEvery == 0 }

// Priority returns the priority of job n.
func (m Mix) Priority(n int) llmq.Priority {
	if !m.Priorities {
		return llmq.PriorityNormal
	}
	return []llmq.Priority{llmq.PriorityHigh, llmq.PriorityNormal, llmq.PriorityLow}[n%3]
}

// Job returns job n of the mix with id, tenant and model.
func (m Mix) Job(s Sizes, id, tenant, model string, n int) *llmq.Job {
	return &llmq.Job{
		ID: id, Tenant: tenant, Priority: m.Priority(n), Deferrable: m.Deferrable(n),
		Body: s.Body(model, m.Kind(n), n),
	}
}

// malformed are messages that fail llmq.Decode; %s is the job id, so the
// dead letter names the job.
var malformed = []string{
	`{"id":%q,"priority":"urgent","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`,
	`{"id":%q,"body":{"messages":[{"role":"user","content":"no model"}]}}`,
	`{"id":%q,"body":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":-5}}`,
	`{"id":%q,"body":{"model":"m","messages":[],"stream":true}}`,
	`{"id":%q,"deadline":"tomorrow","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`,
}

// Malformed returns malformed message n (one of several kinds of invalid
// job), naming id.
func Malformed(id string, n int) []byte {
	return fmt.Appendf(nil, malformed[n%len(malformed)], id)
}
