package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
)

// TestGatewayProjectPaused: a gateway call names its project with
// X-Llmq-Project; a paused project's calls get 429 paused naming the
// header, an unknown or malformed project 400 naming it, and nothing is
// enqueued; a call of another project of the tenant is served (it waits
// for a worker here).
func TestGatewayProjectPaused(t *testing.T) {
	t.Parallel()
	b, w := adminBundle(t)
	require.Equal(t, http.StatusCreated, b.admin(t, http.MethodPost, "/v1/admin/tenants", keyOps, `{"name":"acme"}`).status)
	require.Equal(t, http.StatusCreated, b.admin(t, http.MethodPut, "/v1/admin/tenants/acme/projects/live", keyOps, `{}`).status)
	require.Equal(t, http.StatusCreated, b.admin(t, http.MethodPut, "/v1/admin/tenants/acme/projects/bulk", keyOps, `{"paused":true}`).status)
	require.Eventually(t, func() bool { return w.Tenants()["acme"].Projects["bulk"].Paused }, 5*time.Second, time.Millisecond)

	request := func(ctx context.Context, project string) *http.Request {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/v1/chat/completions", bytes.NewBufferString(validBody))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(api.HeaderProject, project)
		return req
	}
	call := func(project string) (int, string, string) { // a call refused at once
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := b.srv.Client().Do(request(ctx, project))
		if err != nil {
			return 0, "", "" // waiting for a worker: not refused
		}
		defer resp.Body.Close() //nolint:errcheck
		data, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(data, &e), string(data))
		require.NotNil(t, e.Error.Param, string(data))
		return resp.StatusCode, *e.Error.Param, e.Error.Message
	}
	status, param, msg := call("bulk")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, api.HeaderProject, param)
	require.Contains(t, msg, `project "bulk" of tenant "acme" is paused`)
	status, param, msg = call("nope")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, api.HeaderProject, param)
	require.Contains(t, msg, "its projects: bulk, live")
	status, param, _ = call("no/slash")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, api.HeaderProject, param)
	require.Equal(t, int64(0), b.broker.Depth("jobs"), "nothing was enqueued")

	// The call waits for a worker until the job is recorded: a deadline
	// of its own could end it before the gateway records it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, live := request(ctx, "live"), make(chan int, 1)
	go func() {
		resp, err := b.srv.Client().Do(req)
		if err != nil {
			live <- 0 // waiting for a worker: not refused
			return
		}
		_ = resp.Body.Close()
		live <- resp.StatusCode
	}()
	require.Eventually(t, func() bool {
		var n int
		err := b.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND project = 'live'`).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond, "recorded with its project")
	cancel()
	require.Zero(t, <-live, "another project's call is served")
}
