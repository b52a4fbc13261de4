package upstreamsim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const maxBodyBytes = 32 << 20

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := s.clock.Now()
	reqID := newRequestID()
	s.dialect.commonHeaders(w, reqID)
	key := apiKey(r)
	req, m, p, ok := s.readChat(w, r, start)
	if !ok {
		return
	}
	model := req.Model
	fault := s.drawFault(model)
	if s.serveEarlyFault(w, model, fault, reqID, start) {
		return
	}

	d := s.admit(r.Context(), r, key, model, m.Limits, p.charge)
	if !d.Allowed {
		s.rejectChat(w, r, model, d, p, reqID, start)
		return
	}
	defer s.limiter.Release(key, model)
	inflight := s.inflight.of(model)
	n := inflight.Add(1)
	s.metrics.inflight.WithLabelValues(model).Inc()
	defer func() {
		inflight.Add(-1)
		s.metrics.inflight.WithLabelValues(model).Dec()
	}()
	s.dialect.rateLimitHeaders(w, d)

	if fault != "" {
		s.stats.acceptedFault(model, start, fault)
		s.serveFault(w, r, fault, reqID, start)
		return
	}
	s.answerChat(w, r, key, req, m, p, n, start)
}

// readChat reads and plans the request, answering 400 or 404 (and false)
// when it is invalid or names an unknown model.
func (s *Server) readChat(w http.ResponseWriter, r *http.Request, start time.Time) (*chatRequest, ModelConfig, plan, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		return nil, ModelConfig{}, plan{}, false
	}
	req, aerr := parseChat(body, r.PathValue("deployment"))
	if aerr != nil {
		model := ""
		if req != nil {
			model = req.Model
		}
		s.stats.invalid(model)
		setProcessingMS(w, s.clock.Now().Sub(start))
		writeError(w, http.StatusBadRequest, *aerr)
		return nil, ModelConfig{}, plan{}, false
	}
	model := req.Model
	m, known := s.limits.model(model)
	if !known {
		s.stats.invalid(model)
		setProcessingMS(w, s.clock.Now().Sub(start))
		writeError(w, http.StatusNotFound, apiError{
			Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model),
			Type:    "invalid_request_error",
			Code:    "model_not_found",
		})
		return nil, ModelConfig{}, plan{}, false
	}
	p, aerr := s.chat.plan(req, m)
	if aerr != nil {
		s.stats.invalid(model)
		setProcessingMS(w, s.clock.Now().Sub(start))
		writeError(w, http.StatusBadRequest, *aerr)
		return nil, ModelConfig{}, plan{}, false
	}
	return req, m, p, true
}

// serveEarlyFault answers the faults drawn before admission (a burst's
// slow_down, insufficient_quota) and reports whether it answered.
func (s *Server) serveEarlyFault(w http.ResponseWriter, model string, fault FaultKind, reqID string, start time.Time) bool {
	switch fault {
	case FaultSlowDown:
		s.stats.fault(model, fault)
		s.dialect.retryAfterHeaders(w, time.Second)
		setProcessingMS(w, s.clock.Now().Sub(start))
		e := slowDownError(model, s.cfg.Organization, "1s")
		if s.cfg.Mode == ModeDashScope {
			e = dashScopeBurstError(reqID)
		}
		writeError(w, http.StatusTooManyRequests, e)
		return true
	case FaultInsufficientQuota:
		s.stats.fault(model, fault)
		if s.cfg.Faults.ShouldRetryFalse {
			w.Header()["X-Should-Retry"] = []string{"false"}
		}
		setProcessingMS(w, s.clock.Now().Sub(start))
		writeError(w, http.StatusTooManyRequests, insufficientQuotaError(s.cfg.Mode, reqID))
		return true
	}
	return false
}

// rejectChat answers the limiter's refusal d with a 429.
func (s *Server) rejectChat(w http.ResponseWriter, r *http.Request, model string, d Decision, p plan, reqID string, start time.Time) {
	s.stats.rejected(model, d.Reason)
	if !s.cfg.OmitRateLimitHeadersOn429 {
		s.dialect.rateLimitHeaders(w, d)
	}
	if d.Reason != ReasonTooLarge {
		s.dialect.retryAfterHeaders(w, d.RetryAfter)
	}
	setProcessingMS(w, s.clock.Now().Sub(start))
	writeError(w, http.StatusTooManyRequests, s.dialect.rateLimitError(model, d, p.charge, reqID, r.URL.Query().Get("api-version")))
}

// answerChat completes an admitted request (n in flight with it), gives
// back the tokens charged and not used (TrueUp), and answers after the
// simulated latency, streamed or whole.
func (s *Server) answerChat(w http.ResponseWriter, r *http.Request, key string, req *chatRequest, m ModelConfig, p plan, n int64, start time.Time) {
	model := req.Model
	c := s.chat.complete(p)
	s.stats.accepted(model, start, p.promptTokens, c.completionTokens, m.Price, 1)
	if s.cfg.TrueUp {
		actual := int64(p.promptTokens) + int64(c.completionTokens)
		if s.cfg.Charge == ChargeMax {
			actual = max(int64(p.promptTokens), int64(c.completionTokens))
		}
		s.limiter.Refund(key, model, p.charge-actual)
	}
	ttft, per := s.chat.latency(n)
	longest := 0
	for _, ch := range c.choices {
		longest = max(longest, ch.tokens)
	}
	if req.Stream != nil && *req.Stream {
		s.stream(w, r, p, c, ttft, per, start)
		return
	}
	if err := sleep(r.Context(), s.clock, ttft+time.Duration(longest)*per); err != nil {
		return
	}
	now := s.clock.Now()
	setProcessingMS(w, now.Sub(start))
	writeJSON(w, http.StatusOK, newChatResponse(p, c, now))
}

// admit asks the limiter; in DashScope mode with X-DashScope-Wait-Timeout a
// burst rejection is queued server-side, polling until admitted or the
// wait runs out.
func (s *Server) admit(ctx context.Context, r *http.Request, key, model string, lim Limits, charge int64) Decision {
	a := Admission{Key: key, Model: model, Tokens: charge}
	var deadline time.Time
	if s.cfg.Mode == ModeDashScope {
		if v, err := strconv.Atoi(r.Header.Get("X-DashScope-Wait-Timeout")); err == nil && v > 0 {
			a.HoldOnBurst = true
			deadline = s.clock.Now().Add(time.Duration(v) * time.Second)
		}
	}
	for {
		now := s.clock.Now()
		d := s.limiter.Admit(now, lim, a)
		if d.Allowed || d.Reason != ReasonBurst || !a.HoldOnBurst {
			return d
		}
		wait := d.RetryAfter
		if !now.Add(wait).Before(deadline) || sleep(ctx, s.clock, wait) != nil {
			// Give up: the final rejection counts like any other.
			a.HoldOnBurst = false
			return s.limiter.Admit(s.clock.Now(), lim, a)
		}
		lim = s.Limits(model)
	}
}

// drawFault picks the fault of this request, or "".
func (s *Server) drawFault(model string) FaultKind {
	f := s.cfg.Faults
	if len(f.Rates) == 0 || (len(f.Models) > 0 && !slices.Contains(f.Models, model)) {
		return ""
	}
	x := s.dice.float()
	for _, k := range FaultKinds {
		rate := f.Rates[k]
		if x < rate {
			return k
		}
		x -= rate
	}
	return ""
}

const badGatewayHTML = `<html>
<head><title>502 Bad Gateway</title></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>cloudflare</center>
</body>
</html>
`

const gatewayTimeoutHTML = `<html>
<head><title>504 Gateway Time-out</title></head>
<body>
<center><h1>504 Gateway Time-out</h1></center>
<hr><center>cloudflare</center>
</body>
</html>
`

func writeHTML(w http.ResponseWriter, status int, page string) {
	w.Header()["Content-Type"] = []string{"text/html"}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, page)
}

// serveFault answers an admitted request with an injected fault.
func (s *Server) serveFault(w http.ResponseWriter, r *http.Request, kind FaultKind, reqID string, start time.Time) {
	setProcessingMS(w, s.clock.Now().Sub(start))
	switch kind {
	case FaultServerError:
		writeError(w, http.StatusInternalServerError, apiError{Type: "server_error", Message: fmt.Sprintf(
			"The server had an error processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if you keep seeing this error. (Please include the request ID %s in your email.)", reqID)})
	case FaultBadGateway:
		writeHTML(w, http.StatusBadGateway, badGatewayHTML)
	case FaultOverloaded:
		writeError(w, http.StatusServiceUnavailable, apiError{Type: "service_unavailable_error", Code: "server_is_overloaded", Message: fmt.Sprintf(
			"That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists. (Please include the request ID %s in your message.)", reqID)})
	case FaultTimeout:
		writeError(w, http.StatusRequestTimeout, apiError{Type: "server_error", Code: "timeout", Message: "Request timed out."})
	case FaultConflict:
		writeError(w, http.StatusConflict, apiError{Type: "invalid_request_error", Message: "The request conflicted with another request being processed. Please retry."})
	case FaultGatewayTimeout:
		writeHTML(w, http.StatusGatewayTimeout, gatewayTimeoutHTML)
	case FaultConnectionReset:
		resetConnection(w)
	case FaultHang:
		s.lifeMu.Lock()
		stopped := s.hangCtx.Done()
		s.lifeMu.Unlock()
		t := s.clock.NewTimer(s.cfg.Faults.HangDuration)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-stopped:
			resetConnection(w)
		case <-t.Chan():
			writeHTML(w, http.StatusGatewayTimeout, gatewayTimeoutHTML)
		}
	}
}

// resetConnection closes the client connection with a TCP RST (SO_LINGER 0)
// without writing a response.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chatChunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

// stream writes the completion as server-sent events, one chunk per token,
// TTFT before the first (the role's, with the first word) and per between
// tokens; the hook (WithStreamHook) runs before each.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, p plan, c completion, ttft, per time.Duration, start time.Time) {
	h := w.Header()
	h["Content-Type"] = []string{"text/event-stream; charset=utf-8"}
	h["Cache-Control"] = []string{"no-cache"}
	setProcessingMS(w, s.clock.Now().Sub(start))
	w.WriteHeader(http.StatusOK)
	out := sseWriter{bw: bufio.NewWriter(w), rc: http.NewResponseController(w)}
	includeUsage := p.req.StreamOptions != nil && p.req.StreamOptions.IncludeUsage
	base := chatChunk{ID: newID("chatcmpl-", 29), Object: "chat.completion.chunk", Created: s.clock.Now().Unix(), Model: p.req.Model, SystemFingerprint: systemFingerprint}
	if includeUsage {
		base.Usage = json.RawMessage("null")
	}
	if sleep(r.Context(), s.clock, ttft) != nil {
		return
	}
	words, longest := choiceWords(c)
	for j := range max(longest, 1) {
		if j > 0 && sleep(r.Context(), s.clock, per) != nil {
			return
		}
		if s.hook != nil {
			if err := s.hook(r.Context(), j+1); err != nil {
				out.error(err)
				return
			}
		}
		if !out.send(wordChunk(base, words, j)) {
			return
		}
	}
	last := base
	for i := range c.choices {
		last.Choices = append(last.Choices, chunkChoice{Index: i, FinishReason: &c.choices[i].finish})
	}
	if !out.send(last) {
		return
	}
	if includeUsage {
		u, err := json.Marshal(newUsage(p.promptTokens, c.completionTokens))
		if err != nil {
			return
		}
		final := base
		final.Choices = []chunkChoice{}
		final.Usage = u
		if !out.send(final) {
			return
		}
	}
	out.done()
}

// wordChunk is the chunk of each choice's j-th word; the first carries the
// role (and an empty content for a choice with no words).
func wordChunk(base chatChunk, words [][]string, j int) chatChunk {
	ch := base
	for i := range words {
		var d chunkDelta
		if j == 0 {
			d.Role = "assistant"
		}
		switch {
		case j < len(words[i]):
			piece := words[i][j]
			if j > 0 {
				piece = " " + piece
			}
			d.Content = &piece
		case j == 0:
			empty := ""
			d.Content = &empty
		default:
			continue
		}
		ch.Choices = append(ch.Choices, chunkChoice{Index: i, Delta: d})
	}
	return ch
}

// choiceWords splits each choice's text into the words its chunks carry,
// and returns the most words of a choice.
func choiceWords(c completion) (words [][]string, longest int) {
	words = make([][]string, len(c.choices))
	for i, ch := range c.choices {
		words[i] = strings.Split(ch.text, " ")
		if ch.text == "" {
			words[i] = nil
		}
		longest = max(longest, len(words[i]))
	}
	return words, longest
}

// sseWriter writes server-sent events, flushing each to the client.
type sseWriter struct {
	bw *bufio.Writer
	rc *http.ResponseController
}

// send writes ch as one event and reports whether it reached the client.
func (o sseWriter) send(ch chatChunk) bool {
	b, err := json.Marshal(ch)
	if err != nil {
		return false
	}
	_, _ = o.bw.WriteString("data: ")
	_, _ = o.bw.Write(b)
	_, _ = o.bw.WriteString("\n\n")
	if o.bw.Flush() != nil {
		return false
	}
	return o.rc.Flush() == nil
}

// error writes an error event in OpenAI's shape (the stream ends there).
func (o sseWriter) error(err error) {
	b, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Type: "server_error", Message: err.Error()}})
	_, _ = o.bw.WriteString("data: " + string(b) + "\n\n")
	_ = o.bw.Flush()
	_ = o.rc.Flush()
}

// done writes the stream's end.
func (o sseWriter) done() {
	_, _ = o.bw.WriteString("data: [DONE]\n\n")
	_ = o.bw.Flush()
	_ = o.rc.Flush()
}
