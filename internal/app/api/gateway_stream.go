package api

import (
	"encoding/json"
	"net/http"
)

// A gateway call with "stream": true gets the finished completion as
// server-sent events, the way OpenAI streams one: per choice a
// chat.completion.chunk whose delta holds the whole message, then one
// with its finish_reason, then (stream_options.include_usage) a chunk
// with the usage and no choices, then "data: [DONE]". The upstream call
// itself is made without streaming: the first byte comes when the answer
// is complete.

// completion is what the chunks are made of; unknown fields are dropped.
type completion struct {
	ID                string          `json:"id"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint *string         `json:"system_fingerprint,omitempty"`
	ServiceTier       *string         `json:"service_tier,omitempty"`
	Usage             json.RawMessage `json:"usage,omitempty"`
	Choices           []struct {
		Index        int                        `json:"index"`
		Message      map[string]json.RawMessage `json:"message"`
		Logprobs     json.RawMessage            `json:"logprobs,omitempty"`
		FinishReason *string                    `json:"finish_reason"`
	} `json:"choices"`
}

// chunk is one chat.completion.chunk.
type chunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint *string         `json:"system_fingerprint,omitempty"`
	ServiceTier       *string         `json:"service_tier,omitempty"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        map[string]any  `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
	FinishReason *string         `json:"finish_reason"`
}

// chunks cuts a completion into the chunks of its stream.
func chunks(result []byte, includeUsage bool) ([]chunk, error) {
	var c completion
	if err := json.Unmarshal(result, &c); err != nil {
		return nil, err
	}
	head := chunk{ID: c.ID, Object: "chat.completion.chunk", Created: c.Created, Model: c.Model,
		SystemFingerprint: c.SystemFingerprint, ServiceTier: c.ServiceTier}
	var out []chunk
	for _, ch := range c.Choices {
		delta := map[string]any{}
		for k, v := range ch.Message {
			delta[k] = v
		}
		// A streamed tool call carries its place in the list.
		var calls []map[string]any
		if err := json.Unmarshal(ch.Message["tool_calls"], &calls); err == nil && len(calls) > 0 {
			for i := range calls {
				calls[i]["index"] = i
			}
			delta["tool_calls"] = calls
		}
		d := head
		d.Choices = []chunkChoice{{Index: ch.Index, Delta: delta, Logprobs: ch.Logprobs}}
		out = append(out, d)
	}
	for _, ch := range c.Choices {
		f := head
		f.Choices = []chunkChoice{{Index: ch.Index, Delta: map[string]any{}, FinishReason: ch.FinishReason}}
		out = append(out, f)
	}
	if includeUsage && len(c.Usage) > 0 {
		u := head
		u.Choices, u.Usage = []chunkChoice{}, c.Usage
		out = append(out, u)
	}
	return out, nil
}

// stream writes result as server-sent events.
func (a *API) stream(w http.ResponseWriter, result []byte, includeUsage bool) {
	cs, err := chunks(result, includeUsage)
	if err != nil {
		// The stored result is the provider's JSON: this is llmq's fault.
		a.log.Error("api: gateway: the stored completion cannot be streamed", "error", err.Error())
		writeOpenAIError(w, http.StatusInternalServerError, Error{Code: CodeInternal, Message: "internal error"})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, c := range cs {
		b, _ := json.Marshal(c) // plain structs and JSON the decoder accepted
		_, _ = w.Write([]byte("data: "))
		_, _ = w.Write(b)
		_, _ = w.Write([]byte("\n\n"))
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	_ = http.NewResponseController(w).Flush()
}
