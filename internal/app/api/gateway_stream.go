package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/internal/backoff"
	"github.com/llmq/llmq/store"
)

// A gateway call with "stream": true is streamed as it runs (with
// Config.Streams): streamCall sends each chunk the worker stores as a
// server-sent event, then "data: [DONE]", or an error event. Without
// Streams, the finished completion is replayed as chunks (stream). See
// docs/design/gateway.md#streaming and #streaming-in-the-api.

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
func (a *gateway) stream(w http.ResponseWriter, result []byte, includeUsage bool) {
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

// streamCall streams job k's chunks to the caller as they come.
func (a *gateway) streamCall(w http.ResponseWriter, r *http.Request, k store.Key, call gatewayCall) {
	ctx := r.Context()
	grew, stopChunks := a.chunkWaiters.subscribe(k)
	defer stopChunks()
	ended, stopDone := a.waiters.subscribe(k)
	defer stopDone()
	a.waiting.Inc()
	defer a.waiting.Dec()
	sse := &sseWriter{w: w, includeUsage: call.includeUsage}
	after, readJob := 0, true
	for {
		after = a.sendChunks(ctx, sse, k, after)
		if readJob {
			readJob = false
			rec, err := a.cfg.Store.Get(ctx, k.Tenant, k.ID)
			if err == nil && rec.Status.Terminal() {
				// Every chunk was appended before the job ended.
				a.sendChunks(ctx, sse, k, after)
				a.endStream(w, sse, rec, call)
				a.dropStream(ctx, k)
				return
			}
			if err != nil && ctx.Err() == nil {
				a.log.Warn("api: gateway: read the job", slog.String("key", k.String()), slog.String("error", err.Error()))
			}
		}
		select {
		case <-grew:
		case <-ended:
			readJob = true
		case <-ctx.Done():
			a.streamLeft(ctx, k)
			return
		}
	}
}

// sendChunks sends job k's chunks after after and returns the last sent.
func (a *gateway) sendChunks(ctx context.Context, sse *sseWriter, k store.Key, after int) int {
	cs, err := a.cfg.Streams.Chunks(ctx, k, after)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("api: gateway: read the call's chunks", slog.String("key", k.String()), slog.String("error", err.Error()))
		}
		return after
	}
	for _, c := range cs {
		sse.chunk(c.Data)
		after = c.Seq
	}
	if len(cs) > 0 {
		sse.flush()
	}
	return after
}

// endStream ends the answer of job rec: [DONE] after its chunks, the
// whole answer when none was sent (a call made without streaming, a
// failure before the first chunk), an error event after a part.
func (a *gateway) endStream(w http.ResponseWriter, sse *sseWriter, rec *store.JobRecord, call gatewayCall) {
	switch {
	case !sse.started:
		a.answer(w, rec, call)
	case rec.Status == llmq.StatusSucceeded:
		sse.done()
	default:
		typ := "server_error"
		if s := rec.ErrorStatus; s >= 400 && s < 500 {
			typ = openAIErrorType(s)
		}
		oe := openAIError{Message: rec.ErrorMessage, Type: typ}
		if rec.ErrorCode != "" {
			oe.Code = &rec.ErrorCode
		}
		b, _ := json.Marshal(struct {
			Error openAIError `json:"error"`
		}{oe})
		sse.event(b)
		sse.flush()
	}
}

// streamLeft handles a streamed call's caller that left: its job is
// cancelled if it has not started, else its worker cuts the call at its
// next chunk, charged what it used (docs/design/gateway.md#streaming).
func (a *gateway) streamLeft(ctx context.Context, k store.Key) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := a.cfg.Store.Cancel(ctx, k.Tenant, k.ID)
	var ite *store.IllegalTransitionError
	if errors.As(err, &ite) {
		err = a.cfg.Streams.CancelStream(ctx, k)
	}
	if err != nil {
		a.log.Warn("api: gateway: cancel the call of a caller that left", slog.String("key", k.String()), slog.String("error", err.Error()))
	}
}

// dropStream deletes the chunks of a stream that was answered.
func (a *gateway) dropStream(ctx context.Context, k store.Key) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.cfg.Streams.DropStream(ctx, k); err != nil {
		a.log.Warn("api: gateway: drop the call's chunks", slog.String("key", k.String()), slog.String("error", err.Error()))
	}
}

// sseWriter writes server-sent events, the headers with the first.
type sseWriter struct {
	w            http.ResponseWriter
	includeUsage bool
	started      bool
}

// chunk sends one chunk as the provider sent it; the usage chunk only
// when the caller asked for it (stream_options.include_usage: the worker
// always does).
func (s *sseWriter) chunk(data []byte) {
	if !s.includeUsage {
		var c struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   json.RawMessage   `json:"usage"`
		}
		if json.Unmarshal(data, &c) == nil && len(c.Choices) == 0 && len(c.Usage) > 0 && string(c.Usage) != "null" {
			return
		}
	}
	s.event(data)
}

func (s *sseWriter) event(data []byte) {
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
	}
	_, _ = s.w.Write([]byte("data: "))
	_, _ = s.w.Write(data)
	_, _ = s.w.Write([]byte("\n\n"))
}

func (s *sseWriter) done() {
	_, _ = s.w.Write([]byte("data: [DONE]\n\n"))
	s.flush()
}

func (s *sseWriter) flush() { _ = http.NewResponseController(s.w).Flush() }

// listenAll runs the listening connections: jobs that end, and (with
// Streams) streams that grow.
func (a *gateway) listenAll(ctx context.Context) {
	if a.cfg.Streams == nil {
		a.listen(ctx)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.listenChunks(ctx) })
	a.listen(ctx)
	wg.Wait()
}

// listenChunks is listen for the streams that grow: one connection for
// the process, reconnected with backoff; a reconnection wakes every
// streamed call, which reads what it missed.
func (a *gateway) listenChunks(ctx context.Context) {
	background.Relisten(ctx, a.cfg.Clock, backoff.Policy{Base: listenRetryMin, Max: listenRetryMax},
		func(ctx context.Context, listening func()) error {
			return a.cfg.Streams.ListenJobChunks(ctx, func() {
				listening()
				a.chunkWaiters.wakeAll()
			}, a.chunkWaiters.notify)
		},
		func(err error, wait time.Duration) {
			a.log.Warn("api: gateway: the chunks' listening connection failed; reconnecting",
				slog.String("error", err.Error()), slog.Duration("in", wait))
		})
}
