package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/dlq"
)

// TestDeadLetterPages: the letters of the key's tenant page newest first,
// as list entries (the start of the message) and whole one by one; a
// letter of another tenant is 404, like a bad id; bad parameters are 400
// naming the field, in the API's error shape; a letter replays once.
func TestDeadLetterPages(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for i := range 5 {
		b.deadLetter(t, "acme", fmt.Sprintf("j%d", i), dlq.ReasonRetriesExhausted)
		b.clock.Advance(time.Second)
	}
	require.NoError(t, b.letters.DeadLetter(context.Background(), dlq.Letter{JobID: "x", Tenant: "globex",
		Reason: dlq.ReasonPoison, Message: []byte("bad")}))
	do := func(method, path, key string, wantStatus int, out any) {
		t.Helper()
		r := b.do(t, method, path, key, "", nil)
		require.Equal(t, wantStatus, r.status, "%s %s: %s", method, path, r.body)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
		require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		require.NoError(t, json.Unmarshal(r.body, out))
	}
	type page struct {
		Data []struct {
			ID       int64           `json:"id"`
			JobID    string          `json:"job_id"`
			Tenant   string          `json:"tenant"`
			Reason   string          `json:"reason"`
			Attempts int             `json:"attempts"`
			Message  json.RawMessage `json:"message"`
			Preview  string          `json:"message_preview"`
			Bytes    int             `json:"message_bytes"`
		} `json:"data"`
		NextCursor *string `json:"next_cursor"`
	}
	var p page
	do("GET", "/v1/dead-letters", keyGlobex, http.StatusOK, &p)
	require.Len(t, p.Data, 1)
	other := p.Data[0].ID
	var got []int64
	for cursor, pages := "", 1; ; pages++ {
		p = page{}
		do("GET", "/v1/dead-letters?limit=2&cursor="+cursor, keyAcme, http.StatusOK, &p)
		for _, d := range p.Data {
			require.Equal(t, "acme", d.Tenant)
			require.Equal(t, "retries_exhausted", d.Reason)
			require.Equal(t, 3, d.Attempts)
			msg := jobJSON(d.JobID)
			require.Nil(t, d.Message, "a list shows the start of the message")
			require.Equal(t, len(msg), d.Bytes)
			require.JSONEq(t, msg, d.Preview)
			var whole struct {
				Message json.RawMessage `json:"message"`
			}
			do("GET", fmt.Sprintf("/v1/dead-letters/%d", d.ID), keyAcme, http.StatusOK, &whole)
			require.JSONEq(t, msg, string(whole.Message))
			got = append(got, d.ID)
		}
		if p.NextCursor == nil {
			require.Equal(t, 3, pages)
			break
		}
		cursor = *p.NextCursor
	}
	require.Len(t, got, 5)
	require.IsDecreasing(t, got, "newest first")
	ids := got

	p = page{}
	do("GET", "/v1/dead-letters?reason=poison", keyAcme, http.StatusOK, &p)
	require.NotNil(t, p.Data)
	require.Empty(t, p.Data)
	require.Nil(t, p.NextCursor)

	type errBody struct {
		Error struct{ Code, Message, Field string } `json:"error"`
	}
	for path, field := range map[string]string{
		"/v1/dead-letters?limit=0": "limit", "/v1/dead-letters?since=yesterday": "since", "/v1/dead-letters?cursor=zz": "cursor",
		"/v1/dead-letters?reason=oops": "reason", "/v1/dead-letters?reason=a%00": "reason",
		"/v1/dead-letters?job_id=%FF": "job_id", "/v1/dead-letters?job_id=a%00b": "job_id",
		"/v1/dead-letters?cursor=%FF%00": "cursor",
	} {
		var e errBody
		do("GET", path, keyAcme, http.StatusBadRequest, &e)
		require.Equal(t, "invalid_value", e.Error.Code, path)
		require.Equal(t, field, e.Error.Field, path)
	}
	for _, req := range [][2]string{{"GET", "/v1/dead-letters/%FF"}, {"GET", fmt.Sprintf("/v1/dead-letters/%d", other)},
		{"POST", fmt.Sprintf("/v1/dead-letters/%d/replay", other)}, {"POST", "/v1/dead-letters/abc/replay"}} {
		var e errBody
		do(req[0], req[1], keyAcme, http.StatusNotFound, &e)
		require.Equal(t, errBody{Error: struct{ Code, Message, Field string }{"not_found", "dead letter not found", "id"}}, e, req)
	}
	var e errBody
	do("GET", "/v1/dead-letters", "", http.StatusUnauthorized, &e)
	require.Equal(t, "unauthorized", e.Error.Code)

	var rp struct {
		Data struct {
			ID          int64 `json:"id"`
			ReplayCount int   `json:"replay_count"`
		} `json:"data"`
		Replayed bool `json:"replayed"`
	}
	do("POST", fmt.Sprintf("/v1/dead-letters/%d/replay", ids[0]), keyAcme, http.StatusOK, &rp)
	require.True(t, rp.Replayed)
	require.Equal(t, ids[0], rp.Data.ID)
	require.Equal(t, 1, rp.Data.ReplayCount)
	do("POST", fmt.Sprintf("/v1/dead-letters/%d/replay", ids[0]), keyAcme, http.StatusOK, &rp)
	require.False(t, rp.Replayed)

	// globex's poison letter shows its bytes in base64.
	var raw map[string]any
	do("GET", fmt.Sprintf("/v1/dead-letters/%d", other), keyGlobex, http.StatusOK, &raw)
	require.Equal(t, "YmFk", raw["message_base64"])
	require.NotContains(t, raw, "message")
}

// TestDeadLetterListIsBounded: a page of letters of 1 MiB messages and
// long upstream errors stays small: previews, not messages, and
// sanitised, bounded last errors.
func TestDeadLetterListIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	big := []byte(`{"body":{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]}}`)
	lastErr := "502: <html>" + strings.Repeat("gateway error ", 1000) + "Authorization: Bearer sk-secret0123456789</html>"
	for i := range 5 {
		require.NoError(t, b.letters.DeadLetter(context.Background(), dlq.Letter{JobID: fmt.Sprintf("big-%d", i), Tenant: "acme",
			Reason: dlq.ReasonRetriesExhausted, LastError: lastErr, Message: big}))
	}
	r := b.get(t, keyAcme, "/v1/dead-letters")
	require.Equal(t, http.StatusOK, r.status)
	require.Less(t, len(r.body), 5*2<<10, "five letters of 1 MiB in %d bytes", len(r.body))
	require.NotContains(t, string(r.body), "sk-secret")
	var p struct {
		Data []dlq.View `json:"data"`
	}
	require.NoError(t, json.Unmarshal(r.body, &p))
	require.Len(t, p.Data, 5)
	for _, v := range p.Data {
		require.Equal(t, len(big), v.MessageBytes)
		require.LessOrEqual(t, len(v.MessagePreview), dlq.MessagePreviewBytes)
		require.LessOrEqual(t, len(v.LastError), 1024)
	}
}
