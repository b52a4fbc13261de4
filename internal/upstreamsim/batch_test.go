package upstreamsim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
)

func batchConfig() Config {
	return Config{
		Default: ModelConfig{Limits: Limits{RPM: 1, TPM: 100}},
		Batch: BatchConfig{
			Validating: 5 * time.Second, LinesPerSecond: 50, Finalizing: 5 * time.Second,
			Cancelling: 10 * time.Second, CompletionWindow: time.Hour,
		},
		Output: OutputConfig{Distribution: DistFixed, Min: 1, Max: 100, Mean: 7},
	}
}

func uploadLines(t *testing.T, b *bundle, n int, model func(i int) string) openai.File {
	t.Helper()
	var req openai.UploadBatchFileRequest
	for i := range n {
		req.AddChatCompletion(fmt.Sprintf("req-%d", i), chatReq(model(i), fmt.Sprintf("question number %d", i), 50))
	}
	f, err := b.client.UploadBatchFile(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "batch", f.Purpose)
	require.Equal(t, "batchinput.jsonl", f.FileName)
	return f
}

func createBatch(t *testing.T, b *bundle, fileID string) openai.BatchResponse {
	t.Helper()
	resp, err := b.client.CreateBatch(context.Background(), openai.CreateBatchRequest{
		InputFileID: fileID, Endpoint: openai.BatchEndpointChatCompletions, Metadata: map[string]any{"job": "test"},
	})
	require.NoError(t, err)
	return resp
}

func retrieve(t *testing.T, b *bundle, id string) openai.BatchResponse {
	t.Helper()
	resp, err := b.client.RetrieveBatch(context.Background(), id)
	require.NoError(t, err)
	return resp
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int                           `json:"status_code"`
		RequestID  string                        `json:"request_id"`
		Body       openai.ChatCompletionResponse `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func fileLines(t *testing.T, b *bundle, id *string) []outLine {
	t.Helper()
	if id == nil {
		return nil
	}
	f, err := b.client.GetFile(context.Background(), *id)
	require.NoError(t, err)
	require.Equal(t, "batch_output", f.Purpose)
	raw, err := b.client.GetFileContent(context.Background(), *id)
	require.NoError(t, err)
	defer func() { _ = raw.Close() }()
	var out []outLine
	sc := bufio.NewScanner(raw)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l outLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		out = append(out, l)
	}
	require.NoError(t, sc.Err())
	return out
}

func TestBatchCompleted(t *testing.T) {
	t.Parallel()
	b := setup(t, batchConfig())
	f := uploadLines(t, b, 1000, func(int) string { return "gpt-4o-mini" })
	bt := createBatch(t, b, f.ID)
	require.Equal(t, "validating", bt.Status)
	require.Equal(t, "/v1/chat/completions", string(bt.Endpoint))
	require.Equal(t, "24h", bt.CompletionWindow)
	require.Equal(t, int(t0.Unix()), bt.CreatedAt)
	require.Equal(t, int(t0.Add(time.Hour).Unix()), *bt.ExpiresAt)
	require.Equal(t, openai.BatchRequestCounts{}, bt.RequestCounts)
	require.Nil(t, bt.OutputFileID)
	require.True(t, strings.HasPrefix(bt.ID, "batch_"))

	b.clock.Advance(5 * time.Second)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "in_progress", bt.Status)
	require.Equal(t, int(t0.Add(5*time.Second).Unix()), *bt.InProgressAt)
	require.Equal(t, openai.BatchRequestCounts{Total: 1000}, bt.RequestCounts)

	b.clock.Advance(10 * time.Second)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "in_progress", bt.Status)
	require.Equal(t, 500, bt.RequestCounts.Completed)

	b.clock.Advance(10 * time.Second)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "finalizing", bt.Status)
	require.Equal(t, int(t0.Add(25*time.Second).Unix()), *bt.FinalizingAt)
	require.Equal(t, openai.BatchRequestCounts{Total: 1000, Completed: 1000}, bt.RequestCounts)
	require.Nil(t, bt.OutputFileID)

	b.clock.Advance(5 * time.Second)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "completed", bt.Status)
	require.Equal(t, int(t0.Add(30*time.Second).Unix()), *bt.CompletedAt)
	require.NotNil(t, bt.OutputFileID)
	require.Nil(t, bt.ErrorFileID)
	require.Equal(t, map[string]any{"job": "test"}, bt.Metadata)

	lines := fileLines(t, b, bt.OutputFileID)
	require.Len(t, lines, 1000)
	seen := map[string]bool{}
	inOrder := true
	for i, l := range lines {
		require.False(t, seen[l.CustomID])
		seen[l.CustomID] = true
		inOrder = inOrder && l.CustomID == fmt.Sprintf("req-%d", i)
		require.Nil(t, l.Error)
		require.Equal(t, 200, l.Response.StatusCode)
		require.Regexp(t, reqIDRe, l.Response.RequestID)
		require.True(t, strings.HasPrefix(l.ID, "batch_req_"))
		require.Equal(t, 7, l.Response.Body.Usage.CompletionTokens)
		require.Equal(t, 7, countTokens(t, l.Response.Body.Choices[0].Message.Content))
	}
	require.False(t, inOrder, "output lines are shuffled")

	st := b.ts.Sim.Stats().Models["gpt-4o-mini"]
	require.Equal(t, int64(1000), st.BatchLines)
	require.Equal(t, int64(7000), st.BatchCompletionTokens)
	require.Zero(t, st.Accepted, "batches do not use the synchronous quota")
	require.InDelta(t, 0.5*(float64(st.BatchPromptTokens)*0.15+7000*0.60)/1e6, st.CostUSD, 1e-12)

	// The raw batch object carries usage and model.
	raw := getRaw(t, b, "/batches/"+bt.ID)
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &obj))
	require.Equal(t, "gpt-4o-mini", obj["model"])
	require.Equal(t, float64(7000), obj["usage"].(map[string]any)["output_tokens"])
	require.Nil(t, obj["errors"])
}

func getRaw(t *testing.T, b *bundle, path string) string {
	t.Helper()
	r := do(t, mustGet(t, b.ts.URL+path))
	require.Equal(t, 200, r.status, r.body)
	return r.body
}

func TestBatchExpired(t *testing.T) {
	t.Parallel()
	cfg := batchConfig()
	cfg.Batch.LinesPerSecond = 10
	cfg.Batch.CompletionWindow = time.Minute
	cfg.Batch.TimeScale = 10 // every duration runs 10x faster
	b := setup(t, cfg)
	f := uploadLines(t, b, 1000, func(int) string { return "gpt-4o-mini" })
	bt := createBatch(t, b, f.ID)
	require.Equal(t, int(t0.Add(6*time.Second).Unix()), *bt.ExpiresAt)
	// Validating 0.5s, then 100 lines per clock second until 6s: 550 lines.
	b.clock.Advance(5 * time.Second)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "in_progress", bt.Status)
	require.Equal(t, 450, bt.RequestCounts.Completed)
	b.clock.Advance(time.Second)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "expired", bt.Status)
	require.Equal(t, int(t0.Add(6*time.Second).Unix()), *bt.ExpiredAt)
	require.Equal(t, openai.BatchRequestCounts{Total: 1000, Completed: 550, Failed: 450}, bt.RequestCounts)
	out := fileLines(t, b, bt.OutputFileID)
	require.Len(t, out, 550)
	errs := fileLines(t, b, bt.ErrorFileID)
	require.Len(t, errs, 450)
	for _, l := range errs {
		require.Nil(t, l.Response)
		require.Equal(t, "batch_expired", l.Error.Code)
		require.Equal(t, "This request could not be executed before the completion window expired.", l.Error.Message)
	}
	ids := map[string]bool{}
	for _, l := range append(out, errs...) {
		ids[l.CustomID] = true
	}
	require.Len(t, ids, 1000)
}

func TestBatchCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, batchConfig())
	f := uploadLines(t, b, 1000, func(int) string { return "gpt-4o-mini" })
	bt := createBatch(t, b, f.ID)
	b.clock.Advance(7 * time.Second) // 2s of processing: 100 lines
	bt, err := b.client.CancelBatch(context.Background(), bt.ID)
	require.NoError(t, err)
	require.Equal(t, "cancelling", bt.Status)
	require.Equal(t, int(t0.Add(7*time.Second).Unix()), *bt.CancellingAt)
	b.clock.Advance(10 * time.Second)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "cancelled", bt.Status)
	require.Equal(t, int(t0.Add(17*time.Second).Unix()), *bt.CancelledAt)
	require.Equal(t, openai.BatchRequestCounts{Total: 1000, Completed: 100}, bt.RequestCounts)
	require.Len(t, fileLines(t, b, bt.OutputFileID), 100)
	require.Nil(t, bt.ErrorFileID)

	// A finished batch cannot be cancelled.
	_, err = b.client.CancelBatch(context.Background(), bt.ID)
	require.NoError(t, err, "cancelling a cancelled batch returns it")
	f2 := uploadLines(t, b, 1, func(int) string { return "gpt-4o-mini" })
	bt2 := createBatch(t, b, f2.ID)
	b.clock.Advance(time.Minute)
	require.Equal(t, "completed", retrieve(t, b, bt2.ID).Status)
	_, err = b.client.CancelBatch(context.Background(), bt2.ID)
	require.Equal(t, 409, apiErr(t, err).HTTPStatusCode)

	// Cancelled while validating: no line runs.
	f3 := uploadLines(t, b, 5, func(int) string { return "gpt-4o-mini" })
	bt3 := createBatch(t, b, f3.ID)
	_, err = b.client.CancelBatch(context.Background(), bt3.ID)
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	bt3 = retrieve(t, b, bt3.ID)
	require.Equal(t, "cancelled", bt3.Status)
	require.Nil(t, bt3.InProgressAt)
	require.Nil(t, bt3.OutputFileID)
}

func TestBatchValidationFailures(t *testing.T) {
	t.Parallel()
	cfg := batchConfig()
	cfg.Models = map[string]ModelConfig{"gpt-4o": {EnqueuedTokenLimit: 300}, "gpt-4o-mini": {}}
	b := setup(t, cfg)
	ctx := context.Background()
	upload := func(content string) string {
		f, err := b.client.CreateFileBytes(ctx, openai.FileBytesRequest{Name: "in.jsonl", Bytes: []byte(content), Purpose: openai.PurposeBatch})
		require.NoError(t, err)
		return f.ID
	}
	line := func(id, model string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"hello there"}],"max_tokens":5}}`, id, model)
	}
	type want struct {
		code string
		line int
	}
	cases := []struct {
		content string
		want    []want
	}{
		{line("a", "gpt-4o-mini") + "\n" + line("a", "gpt-4o-mini"), []want{{"duplicate_custom_id", 2}}},
		{line("a", "gpt-4o-mini") + "\n{not json\n" + line("c", "gpt-4o-mini"), []want{{"invalid_json_line", 2}}},
		{line("a", "gpt-4o-mini") + "\n" + line("b", "gpt-4o"), []want{{"model_mismatch", 2}}},
		{strings.Replace(line("a", "gpt-4o-mini"), "/v1/chat/completions", "/v1/embeddings", 1), []want{{"url_mismatch", 1}}},
		{"", []want{{"empty_file", 0}}},
	}
	var ids []string
	for _, c := range cases {
		ids = append(ids, createBatch(t, b, upload(c.content)).ID)
	}
	// Enqueued-token cap: 25 lines of 9 prompt tokens = 225 fit under 300;
	// a second such batch while the first runs does not.
	var big []string
	for i := range 25 {
		big = append(big, line(fmt.Sprint(i), "gpt-4o"))
	}
	first := createBatch(t, b, upload(strings.Join(big, "\n"))).ID
	second := createBatch(t, b, upload(strings.Join(big, "\n"))).ID

	b.clock.Advance(5 * time.Second)
	for i, c := range cases {
		bt := retrieve(t, b, ids[i])
		require.Equal(t, "failed", bt.Status, "case %d", i)
		require.Equal(t, int(t0.Add(5*time.Second).Unix()), *bt.FailedAt)
		require.NotNil(t, bt.Errors)
		require.Len(t, bt.Errors.Data, len(c.want), "case %d", i)
		for j, w := range c.want {
			require.Equal(t, w.code, bt.Errors.Data[j].Code, "case %d", i)
			if w.line == 0 {
				require.Nil(t, bt.Errors.Data[j].Line)
			} else {
				require.Equal(t, w.line, *bt.Errors.Data[j].Line)
			}
		}
	}
	require.Equal(t, "in_progress", retrieve(t, b, first).Status)
	bt := retrieve(t, b, second)
	require.Equal(t, "failed", bt.Status)
	require.Equal(t, "token_limit_exceeded", bt.Errors.Data[0].Code)
	require.Equal(t, "Enqueued token limit reached for gpt-4o in organization org-llmqsim. Limit: 300 enqueued tokens. Please try again once some in_progress batches have been completed.", bt.Errors.Data[0].Message)

	// Synchronous errors: unknown file, bad window.
	_, err := b.client.CreateBatch(ctx, openai.CreateBatchRequest{InputFileID: "file-nope", Endpoint: openai.BatchEndpointChatCompletions})
	e := apiErr(t, err)
	require.Equal(t, 400, e.HTTPStatusCode)
	require.Equal(t, "Cannot find file file-nope, or project proj_llmqsim does not have access to it.", e.Message)
	_, err = b.client.CreateBatch(ctx, openai.CreateBatchRequest{InputFileID: upload(line("a", "m")), Endpoint: openai.BatchEndpointChatCompletions, CompletionWindow: "48h"})
	require.Equal(t, "completion_window", *apiErr(t, err).Param)
}

func TestBatchLineErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, batchConfig())
	ctx := context.Background()
	content := `{"custom_id":"ok","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}
{"custom_id":"bad","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"temperature":5}}
`
	f, err := b.client.CreateFileBytes(ctx, openai.FileBytesRequest{Name: "in.jsonl", Bytes: []byte(content), Purpose: openai.PurposeBatch})
	require.NoError(t, err)
	bt := createBatch(t, b, f.ID)
	b.clock.Advance(time.Minute)
	bt = retrieve(t, b, bt.ID)
	require.Equal(t, "completed", bt.Status)
	require.Equal(t, openai.BatchRequestCounts{Total: 2, Completed: 1, Failed: 1}, bt.RequestCounts)
	errs := fileLines(t, b, bt.ErrorFileID)
	require.Len(t, errs, 1)
	require.Equal(t, "bad", errs[0].CustomID)
	require.Equal(t, 400, errs[0].Response.StatusCode)
	require.Nil(t, errs[0].Error)
	require.Len(t, fileLines(t, b, bt.OutputFileID), 1)
}

func TestBatchListAndFiles(t *testing.T) {
	t.Parallel()
	b := setup(t, batchConfig())
	ctx := context.Background()
	var ids []string
	for range 3 {
		f := uploadLines(t, b, 1, func(int) string { return "gpt-4o-mini" })
		ids = append(ids, createBatch(t, b, f.ID).ID)
	}
	limit := 2
	page, err := b.client.ListBatch(ctx, nil, &limit)
	require.NoError(t, err)
	require.True(t, page.HasMore)
	require.Equal(t, []string{ids[2], ids[1]}, []string{page.Data[0].ID, page.Data[1].ID})
	require.Equal(t, ids[2], page.FirstID)
	require.Equal(t, ids[1], page.LastID)
	page, err = b.client.ListBatch(ctx, &page.LastID, &limit)
	require.NoError(t, err)
	require.False(t, page.HasMore)
	require.Len(t, page.Data, 1)
	require.Equal(t, ids[0], page.Data[0].ID)

	_, err = b.client.RetrieveBatch(ctx, "batch_nope")
	require.Equal(t, 404, apiErr(t, err).HTTPStatusCode)

	files, err := b.client.ListFiles(ctx)
	require.NoError(t, err)
	require.Len(t, files.Files, 3)
	require.NoError(t, b.client.DeleteFile(ctx, files.Files[0].ID))
	_, err = b.client.GetFile(ctx, files.Files[0].ID)
	require.Equal(t, 404, apiErr(t, err).HTTPStatusCode)
	_, err = b.client.CreateFileBytes(ctx, openai.FileBytesRequest{Name: "in.txt", Bytes: []byte("x"), Purpose: openai.PurposeBatch})
	require.Equal(t, "file", *apiErr(t, err).Param)
}

func mustGet(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return req
}
