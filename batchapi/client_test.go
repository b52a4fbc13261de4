package batchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/store"
)

// hostileProvider answers as the simulator behind it does, but for the
// answers about batches while answer is set and for the content of files
// while content is: those it replaces, counting the bytes read of them.
type hostileProvider struct {
	base            http.RoundTripper
	answer, content atomic.Pointer[hostileAnswer]
	served          atomic.Int64
}

type hostileAnswer struct {
	status int
	body   func() io.Reader
}

func (h *hostileProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	var a *hostileAnswer
	switch {
	case strings.HasSuffix(r.URL.Path, "/content"):
		a = h.content.Load()
	case strings.Contains(r.URL.Path, "/batches/"):
		a = h.answer.Load()
	}
	if a == nil {
		return h.base.RoundTrip(r)
	}
	return &http.Response{StatusCode: a.status, Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: -1,
		Body: io.NopCloser(&countingReader{r: a.body(), n: &h.served}), Request: r}, nil
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// batchWithError is a batch in progress whose errors say msg.
func batchWithError(id, msg string) func() io.Reader {
	return func() io.Reader {
		return io.MultiReader(strings.NewReader(fmt.Sprintf(`{"id":%q,"object":"batch","status":"in_progress","errors":{"data":[{"code":"x","message":"`, id)),
			strings.NewReader(msg), strings.NewReader(`"}]}}`))
	}
}

// TestProviderAnswersBounded: an answer about a batch (cancel, retrieve,
// success or error) larger than MaxAnswerBytesDefault fails the call after
// reading no more than the bound, and changes nothing stored; the texts of
// an answer that fits are stored redacted and bounded.
func TestProviderAnswersBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hostile := &hostileProvider{base: &http.Transport{}}
	b := setup(t, simConfig(), nil)
	b.cfg.Client = newClient(t, b.sim, hostile)
	b.client = b.cfg.Client
	b.route(t, "h", "gpt-4o-mini", 3, nil)
	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	bt, err := b.st.Batches().ListBatches(ctx, 1, true)
	require.NoError(t, err)
	before := bt[0]

	huge := strings.Repeat("x", MaxAnswerBytesDefault+1<<20)
	for _, status := range []int{http.StatusOK, http.StatusInternalServerError} {
		hostile.served.Store(0)
		hostile.answer.Store(&hostileAnswer{status: status, body: batchWithError(before.ProviderBatchID, huge)})
		_, err = Cancel(ctx, b.st.Batches(), b.client, before.ID)
		var tooLarge *AnswerTooLargeError
		require.ErrorAs(t, err, &tooLarge, "HTTP %d", status)
		require.Equal(t, int64(MaxAnswerBytesDefault), tooLarge.Limit)
		require.LessOrEqual(t, hostile.served.Load(), int64(MaxAnswerBytesDefault+1), "HTTP %d: read past the bound", status)
		require.LessOrEqual(t, len(err.Error()), redact.ErrorMaxBytes+200)

		hostile.served.Store(0)
		_, err = svc.Poller().Poll(ctx)
		require.ErrorAs(t, err, &tooLarge, "HTTP %d", status)
		require.LessOrEqual(t, hostile.served.Load(), int64(MaxAnswerBytesDefault+1), "HTTP %d: read past the bound", status)
	}
	got, err := b.st.Batches().GetBatch(ctx, before.ID)
	require.NoError(t, err)
	require.Equal(t, before.Status, got.Status)
	require.Empty(t, got.Error)

	// An answer that fits: its error is stored redacted, without control
	// characters, cut to redact.ErrorMaxBytes.
	leak := `refused for sk-proj-abcdef0123456789\u0000\u001b[2J ` + strings.Repeat("y", 4<<10)
	hostile.answer.Store(&hostileAnswer{status: http.StatusOK, body: batchWithError(before.ProviderBatchID, leak)})
	got, err = Cancel(ctx, b.st.Batches(), b.client, before.ID)
	require.NoError(t, err)
	require.Equal(t, store.BatchInProgress, got.Status)
	require.True(t, strings.HasPrefix(got.Error, "x: refused for sk-xxxxx  [2J yyy"), got.Error[:40])
	require.NotContains(t, got.Error, "abcdef0123456789")
	require.LessOrEqual(t, len(got.Error), redact.ErrorMaxBytes)
	require.True(t, strings.HasSuffix(got.Error, redact.Truncated))

	// The lines of the output are stored redacted and bounded too.
	hostile.answer.Store(nil)
	var out strings.Builder
	for _, id := range []string{"h-00000", "h-00001", "h-00002"} {
		msg, err := json.Marshal("refused for sk-proj-abcdef0123456789\x00 " + strings.Repeat("z", 4<<10))
		require.NoError(t, err)
		fmt.Fprintf(&out, `{"custom_id":"default/%s","response":{"status_code":400,"body":{"error":{"code":"bad","message":%s}}}}`+"\n", id, msg)
	}
	hostile.content.Store(&hostileAnswer{status: http.StatusOK, body: func() io.Reader { return strings.NewReader(out.String()) }})
	b.clock.Advance(time.Minute)
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, ps.DeadLettered, "%+v", ps)
	j, err := b.st.Jobs().Get(ctx, llmq.DefaultTenant, "h-00001")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(j.ErrorMessage, "batch "+before.ID+" line failed: http_400/bad: refused for sk-xxxxx  zzz"), j.ErrorMessage[:80])
	require.LessOrEqual(t, len(j.ErrorMessage), redact.ErrorMaxBytes)

	// A body of exactly the bound is read whole.
	c := &answerReader{ReadCloser: io.NopCloser(bytes.NewReader(make([]byte, 10))), limit: 10}
	all, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Len(t, all, 10)
	c = &answerReader{ReadCloser: io.NopCloser(bytes.NewReader(make([]byte, 11))), limit: 10}
	_, err = io.ReadAll(c)
	require.True(t, errors.As(err, new(*AnswerTooLargeError)))
}
