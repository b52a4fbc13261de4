package upstreamsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// chatRequest is the subset of CreateChatCompletionRequest the simulator
// reads. Pointers tell absent fields from zero ones.
type chatRequest struct {
	Model               string         `json:"model"`
	Messages            *[]chatMessage `json:"messages"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	N                   *int           `json:"n"`
	Temperature         *float64       `json:"temperature"`
	Stream              *bool          `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name"`
	parsed  string
}

func (m chatMessage) text() string { return m.parsed }

var validRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true, "function": true, "developer": true}

func invalidParam(param, code, msg string) *apiError {
	return &apiError{Message: msg, Type: "invalid_request_error", Param: param, Code: code}
}

// parseChat decodes and validates a chat completion request body; an Azure
// deployment name stands in for a missing model.
func parseChat(body []byte, deployment string) (*chatRequest, *apiError) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, &apiError{
			Message: "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
			Type:    "invalid_request_error",
		}
	}
	req.Model = cmpOr(req.Model, deployment)
	if req.Model == "" {
		return nil, &apiError{Message: "you must provide a model parameter", Type: "invalid_request_error"}
	}
	if req.Messages == nil {
		return nil, invalidParam("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	msgs := *req.Messages
	if len(msgs) == 0 {
		return nil, invalidParam("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	for i := range msgs {
		m := &msgs[i]
		if !validRoles[m.Role] {
			return nil, invalidParam(fmt.Sprintf("messages[%d].role", i), "invalid_value",
				fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role))
		}
		text, ok := contentText(m.Content)
		if !ok {
			return nil, invalidParam(fmt.Sprintf("messages[%d].content", i), "invalid_type",
				fmt.Sprintf("Invalid type for 'messages[%d].content': expected one of a string or array of objects, but got another type instead.", i))
		}
		m.parsed = text
	}
	for _, p := range []struct {
		name string
		v    *int
		min  int
		max  int
	}{{"max_tokens", req.MaxTokens, 1, math.MaxInt32}, {"max_completion_tokens", req.MaxCompletionTokens, 1, math.MaxInt32}, {"n", req.N, 1, 128}} {
		switch {
		case p.v == nil:
		case *p.v < p.min:
			return nil, invalidParam(p.name, "integer_below_min_value", fmt.Sprintf(
				"Invalid '%s': integer below minimum value. Expected a value >= %d, but got %d instead.", p.name, p.min, *p.v))
		case *p.v > p.max:
			return nil, invalidParam(p.name, "integer_above_max_value", fmt.Sprintf(
				"Invalid '%s': integer above maximum value. Expected a value <= %d, but got %d instead.", p.name, p.max, *p.v))
		}
	}
	if t := req.Temperature; t != nil && (*t < 0 || *t > 2) {
		code, bound, word := "decimal_below_min_value", ">= 0", "below minimum"
		if *t > 2 {
			code, bound, word = "decimal_above_max_value", "<= 2", "above maximum"
		}
		return nil, invalidParam("temperature", code, fmt.Sprintf(
			"Invalid 'temperature': decimal %s value. Expected a value %s, but got %s instead.", word, bound, strconv.FormatFloat(*t, 'g', -1, 64)))
	}
	if req.StreamOptions != nil && (req.Stream == nil || !*req.Stream) {
		return nil, invalidParam("stream_options", "invalid_value", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	return &req, nil
}

// contentText returns a message's text: a string, null, or the text parts
// of an array of content parts.
func contentText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	switch raw[0] {
	case '"':
		var s string
		return s, json.Unmarshal(raw, &s) == nil
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &parts) != nil {
			return "", false
		}
		var b bytes.Buffer
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String(), true
	}
	return "", false
}

func (r *chatRequest) n() int {
	if r.N != nil {
		return *r.N
	}
	return 1
}

// maxOutput returns the output cap and whether the caller set one.
func (r *chatRequest) maxOutput(m ModelConfig) (int, bool) {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens, true
	case r.MaxTokens != nil:
		return *r.MaxTokens, true
	}
	return m.DefaultMaxTokens, false
}

// plan is a validated request with its token accounting.
type plan struct {
	req          *chatRequest
	model        ModelConfig
	promptTokens int
	maxOut       int
	charge       int64
}

// completer draws the simulator's answers: it counts a request's tokens
// and draws its completion and latency from the configuration.
type completer struct {
	cfg      Config
	counters map[string]counter
}

// plan counts the prompt, checks the context window and computes the
// TPM charge.
func (cm completer) plan(req *chatRequest, m ModelConfig) (plan, *apiError) {
	c := cm.counters[m.Encoding]
	p := plan{req: req, model: m, promptTokens: c.promptTokens(*req.Messages)}
	maxOut, explicit := req.maxOutput(m)
	p.maxOut = maxOut
	switch {
	case explicit && p.promptTokens+maxOut > m.ContextWindow:
		return p, &apiError{Type: "invalid_request_error", Param: "messages", Code: "context_length_exceeded", Message: fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			m.ContextWindow, p.promptTokens+maxOut, p.promptTokens, maxOut)}
	case p.promptTokens > m.ContextWindow:
		return p, &apiError{Type: "invalid_request_error", Param: "messages", Code: "context_length_exceeded", Message: fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
			m.ContextWindow, p.promptTokens)}
	}
	if !explicit {
		p.maxOut = min(maxOut, m.ContextWindow-p.promptTokens)
	}
	out := int64(req.n()) * int64(p.maxOut)
	if cm.cfg.Charge == ChargeMax {
		p.charge = max(int64(p.promptTokens), out)
	} else {
		p.charge = int64(p.promptTokens) + out
	}
	return p, nil
}

// completion is the deterministic answer to a plan.
type completion struct {
	choices          []choice
	completionTokens int
}

type choice struct {
	text   string
	tokens int
	finish string
}

// complete draws the completion of p deterministically from the seed and
// the request content.
func (cm completer) complete(p plan) completion {
	h := fnv.New64a()
	_, _ = io.WriteString(h, p.req.Model)
	for _, m := range *p.req.Messages {
		_, _ = io.WriteString(h, "\x00"+m.Role+"\x00"+m.parsed)
	}
	rng := rand.New(rand.NewPCG(cm.cfg.Seed, h.Sum64()))
	n := p.req.n()
	c := completion{choices: make([]choice, n)}
	for i := range n {
		length := cm.drawLength(rng)
		finish := "stop"
		if length > p.maxOut {
			length, finish = p.maxOut, "length"
		}
		c.choices[i] = choice{text: completionText(length, rng.IntN), tokens: length, finish: finish}
		c.completionTokens += length
	}
	return c
}

func (cm completer) drawLength(rng *rand.Rand) int {
	o := cm.cfg.Output
	var v float64
	switch o.Distribution {
	case DistFixed:
		v = o.Mean
	case DistNormal:
		v = o.Mean + o.StdDev*rng.NormFloat64()
	case DistLogNormal:
		sigma2 := math.Log(1 + (o.StdDev*o.StdDev)/(o.Mean*o.Mean))
		mu := math.Log(o.Mean) - sigma2/2
		v = math.Exp(mu + math.Sqrt(sigma2)*rng.NormFloat64())
	default:
		return o.Min + rng.IntN(o.Max-o.Min+1)
	}
	return min(max(int(math.Round(v)), o.Min), o.Max)
}

// latency returns the time to first token and the time per token for a
// model with inflight requests in flight.
func (cm completer) latency(inflight int64) (time.Duration, time.Duration) {
	l := cm.cfg.Latency
	per := l.PerToken
	if l.Capacity > 0 && inflight > int64(l.Capacity) {
		slow := 1 + l.CongestionFactor*float64(inflight-int64(l.Capacity))/float64(l.Capacity)
		per = time.Duration(float64(per) * slow)
	}
	return l.TTFT, per
}

type usageDetailsPrompt struct {
	CachedTokens int `json:"cached_tokens"`
	AudioTokens  int `json:"audio_tokens"`
}

type usageDetailsCompletion struct {
	ReasoningTokens          int `json:"reasoning_tokens"`
	AudioTokens              int `json:"audio_tokens"`
	AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
	RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
}

type usage struct {
	PromptTokens            int                    `json:"prompt_tokens"`
	CompletionTokens        int                    `json:"completion_tokens"`
	TotalTokens             int                    `json:"total_tokens"`
	PromptTokensDetails     usageDetailsPrompt     `json:"prompt_tokens_details"`
	CompletionTokensDetails usageDetailsCompletion `json:"completion_tokens_details"`
}

type respMessage struct {
	Role        string `json:"role"`
	Content     string `json:"content"`
	Refusal     any    `json:"refusal"`
	Annotations []any  `json:"annotations"`
}

type respChoice struct {
	Index        int         `json:"index"`
	Message      respMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []respChoice `json:"choices"`
	Usage             usage        `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

const systemFingerprint = "fp_llmqsim01"

func newUsage(prompt, completion int) usage {
	return usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// newChatResponse is the chat.completion object of p answered with c at now.
func newChatResponse(p plan, c completion, now time.Time) chatResponse {
	r := chatResponse{
		ID:                newID("chatcmpl-", 29),
		Object:            "chat.completion",
		Created:           now.Unix(),
		Model:             p.req.Model,
		Choices:           make([]respChoice, len(c.choices)),
		Usage:             newUsage(p.promptTokens, c.completionTokens),
		ServiceTier:       "default",
		SystemFingerprint: systemFingerprint,
	}
	for i, ch := range c.choices {
		r.Choices[i] = respChoice{Index: i, Message: respMessage{Role: "assistant", Content: ch.text, Annotations: []any{}}, FinishReason: ch.finish}
	}
	return r
}
