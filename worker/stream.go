package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/store"
)

// Streamed gateway calls (docs/design/gateway.md#streaming): a job whose
// metadata holds MetadataStream is called with "stream": true and
// stream_options.include_usage; each chunk goes to the job store as it
// comes (ChunkStore), where the API that answers the caller reads it. The
// job's result is the assembled completion, as a call without streaming
// would have stored it.

// MetadataStream is the metadata key (value "true") of a job whose caller
// reads its chunks as they come: the gateway sets it on a streamed call.
const MetadataStream = "llmq.stream"

// CodeClientDisconnected is the code of a streamed call cut because its
// caller left; its job fails with it, the tokens used charged.
const CodeClientDisconnected = "client_disconnected"

// ChunkStore is what a worker needs to stream a call's chunks
// (Config.Chunks); a *store.Streams is one.
type ChunkStore interface {
	// AppendChunks records job k's chunks numbered from first and
	// reports whether its caller left.
	AppendChunks(ctx context.Context, k store.Key, first int, data [][]byte) (cancelled bool, err error)
}

// errCallerLeft ends a streamed call whose caller left.
var errCallerLeft = errors.New("worker: the streamed call's caller left")

// chunkSink hands one call's chunks to the store from a goroutine of its
// own, each append taking every chunk that came meanwhile, so that a slow
// write delays no read of the upstream.
type chunkSink struct {
	store  ChunkStore
	key    store.Key
	cancel context.CancelCauseFunc
	log    *slog.Logger

	mu      sync.Mutex
	pending [][]byte
	next    int // number of pending[0]
	added   int
	content int // chunks with content: the tokens a cut call used
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	left    bool
}

// streamTo returns the context and sink of p's call: ctx itself and nil
// unless p streams.
func (c *caller) streamTo(ctx context.Context, p *job) (context.Context, *chunkSink) {
	cs := c.cfg.Chunks
	if cs == nil || p.job.Metadata[MetadataStream] != "true" {
		return ctx, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	s := &chunkSink{store: cs, key: p.lease.Key, cancel: cancel, log: p.log, next: 1,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run()
	return withSink(ctx, s), s
}

// add queues one chunk (the provider's JSON) for the store.
func (s *chunkSink) add(data []byte, content bool) {
	s.mu.Lock()
	s.pending = append(s.pending, bytes.Clone(data))
	s.added++
	if content {
		s.content++
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// streamCancelPoll is how often a stream that sends nothing (the provider
// before its first token, or stalled) asks whether its caller left.
const streamCancelPoll = 500 * time.Millisecond

// run appends what is pending until the sink is closed and empty, asking
// with an empty append when nothing came for streamCancelPoll. A failed
// append is tried again with the next (chunks are numbered, appends
// idempotent); a caller that left cancels the call.
func (s *chunkSink) run() {
	defer close(s.done)
	idle := time.NewTimer(streamCancelPoll)
	defer idle.Stop()
	for {
		s.mu.Lock()
		batch, first, closed := s.pending, s.next, s.closed
		s.mu.Unlock()
		if len(batch) == 0 && closed {
			return
		}
		if len(batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-idle.C:
			}
		}
		idle.Reset(streamCancelPoll)
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		left, err := s.store.AppendChunks(ctx, s.key, first, batch)
		cancel()
		if err != nil {
			s.log.Warn("append the call's chunks", slog.Any("error", err))
			if closed {
				return
			}
			select {
			case <-s.wake:
			case <-idle.C:
				idle.Reset(streamCancelPoll)
			}
			continue
		}
		s.mu.Lock()
		s.pending, s.next = s.pending[len(batch):], first+len(batch)
		s.left = s.left || left
		s.mu.Unlock()
		if left {
			// Nobody reads what comes after.
			s.cancel(errCallerLeft)
			return
		}
	}
}

// finish waits for every chunk to be appended and corrects r: a call that
// failed after its first chunk is not retried (the caller saw part of it:
// partial), and a call cut because its caller left, chunks or none, fails
// with CodeClientDisconnected. A partial call without the provider's usage is
// charged promptTokens and one token per content chunk.
func (s *chunkSink) finish(r *Reply, promptTokens int) (partial bool) {
	if s == nil {
		return false
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.cancel(nil)
	if r.Outcome.Class == ClassSuccess || (s.added == 0 && !s.left) {
		return false
	}
	if r.PromptTokens+r.CompletionTokens == 0 {
		r.PromptTokens, r.CompletionTokens = promptTokens, s.content
	}
	r.Outcome.Class = ClassPermanent
	if s.left {
		r.Outcome = Outcome{Class: ClassPermanent, Status: r.Outcome.Status, Code: CodeClientDisconnected, Err: errCallerLeft,
			Message: fmt.Sprintf("the caller left after %d chunks; the call was cut", s.added)}
	}
	return true
}

type sinkKey struct{}

func withSink(ctx context.Context, s *chunkSink) context.Context {
	return context.WithValue(ctx, sinkKey{}, s)
}

func sinkOf(ctx context.Context) *chunkSink {
	s, _ := ctx.Value(sinkKey{}).(*chunkSink)
	return s
}

// callStream makes the call with streaming, each chunk to s as it comes,
// and returns the assembled completion.
func (u *openAIUpstream) callStream(ctx context.Context, model string, body []byte, s *chunkSink) Reply {
	body, err := streamBody(body)
	if err != nil {
		return Reply{Outcome: Outcome{Class: ClassPermanent, Code: "invalid_body", Message: err.Error(), Err: err}}
	}
	x := &exchange{request: body, stream: true}
	st, err := u.client.CreateChatCompletionStream(withExchange(ctx, x), openai.ChatCompletionRequest{Model: model})
	if err != nil {
		return Reply{Outcome: Classify(err, x.header, u.provider)}
	}
	defer st.Close()
	var a assembly
	for {
		raw, err := st.RecvRaw()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			r := Reply{Outcome: Classify(err, x.header, u.provider)}
			r.PromptTokens, r.CompletionTokens = a.usage.PromptTokens, a.usage.CompletionTokens
			return r
		}
		content, err := a.add(raw)
		if err != nil {
			return Reply{Outcome: Outcome{Class: ClassPermanent, Status: 200, Code: "invalid_response",
				Message: "a chunk of the stream is not a chat.completion.chunk: " + err.Error(), Err: err}}
		}
		s.add(raw, content)
	}
	r := Reply{Outcome: Classify(nil, x.header, u.provider)}
	r.Body, err = a.completion()
	if err != nil {
		return Reply{Outcome: Outcome{Class: ClassPermanent, Status: 200, Code: "invalid_response", Message: err.Error(), Err: err}}
	}
	r.PromptTokens, r.CompletionTokens = a.usage.PromptTokens, a.usage.CompletionTokens
	return r
}

// streamBody is body asking for a stream with its usage.
func streamBody(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["stream"] = json.RawMessage("true")
	m["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	return json.Marshal(m)
}
