package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
)

// TestTenantRoutesImportedAndLive: the configuration's tenant route and
// webhook secret are imported on the first start; a job of the tenant
// from the broker takes that route (a reply on the memory broker); a
// route changed with the admin API takes the jobs recorded after it,
// from the broker and from the HTTP API, without a restart; the secret is
// never logged.
func TestTenantRoutesImportedAndLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := settings(t)
	s.Models = map[string]llmq.Model{"gpt-4o-mini": {TPM: 600000}}
	s.OperatorKeys = []config.OperatorKey{{Name: "ops", Key: "key-ops"}}
	key := make([]byte, 24)
	_, err := rand.Read(key)
	require.NoError(t, err)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	s.Notifications.TenantReplies = map[string]llmq.Reply{"acme": {To: "acme-replies"}}
	s.Notifications.WebhookSecrets = map[string][]string{"acme": {secret}}
	mem := memory.Shared(strings.TrimPrefix(strings.Split(s.Broker.Raw, "/jobs")[0], "memory://"))
	events := func(queue string) <-chan *transport.Message {
		sub, err := mem.NewSubscriber(queue, memory.Config{Prefetch: 8})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ch, err := sub.Consume(ctx)
		require.NoError(t, err)
		return ch
	}
	first, second := events("acme-replies"), events("acme-2")
	var logs bytes.Buffer
	a, err := app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil)),
		Worker: &app.WorkerConfig{}, API: &app.APIConfig{Listen: "127.0.0.1:0"}})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	defer func() { require.NoError(t, a.Stop(ctx)) }()
	do := func(key, method, path, body string, header ...string) (int, http.Header) {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+a.APIAddr().String()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	pub := mem.NewPublisher()
	job := func(id string) {
		require.NoError(t, pub.Publish(ctx, "jobs", transport.Message{Value: fmt.Appendf(nil,
			`{"id":%q,"tenant":"acme","body":{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`, id)}))
	}
	// next is the job id of the next event on ch; "" after 30 s.
	next := func(ch <-chan *transport.Message) string {
		select {
		case m := <-ch:
			require.NoError(t, m.Ack(ctx))
			var e llmq.ResultEvent
			require.NoError(t, json.Unmarshal(m.Value, &e))
			return e.JobID
		case <-time.After(30 * time.Second):
			return ""
		}
	}

	job("r-1")
	require.Equal(t, "r-1", next(first), "the imported route")
	code, h := do("key-ops", http.MethodGet, "/v1/admin/tenants/acme/notifications", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = do("key-ops", http.MethodPut, "/v1/admin/tenants/acme/notifications", `{"reply_to":"acme-2"}`, "If-Match", h.Get("ETag"))
	require.Equal(t, http.StatusOK, code)
	// The worker reloads on the change's notification; a job recorded
	// before it arrives may still take the old route.
changed:
	for i := 2; ; i++ {
		require.Less(t, i, 50, "the changed route never took a job")
		id := fmt.Sprintf("r-%d", i)
		job(id)
		select {
		case m := <-second:
			require.NoError(t, m.Ack(ctx))
			break changed
		case m := <-first:
			require.NoError(t, m.Ack(ctx))
		case <-time.After(30 * time.Second):
			t.Fatalf("no event for %s", id)
		}
	}
	// A job of the HTTP API takes the tenant's route too.
	code, _ = do("key-acme", http.MethodPost, "/v1/jobs",
		`{"id":"api-1","body":{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`)
	require.Equal(t, http.StatusAccepted, code)
	for id := next(second); id != "api-1"; id = next(second) {
		require.NotEmpty(t, id, "no event for api-1")
	}
	require.NotContains(t, logs.String(), secret)
}
