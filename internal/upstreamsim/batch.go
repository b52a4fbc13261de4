package upstreamsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Batch statuses.
const (
	BatchValidating = "validating"
	BatchFailed     = "failed"
	BatchInProgress = "in_progress"
	BatchFinalizing = "finalizing"
	BatchCompleted  = "completed"
	BatchExpired    = "expired"
	BatchCancelling = "cancelling"
	BatchCancelled  = "cancelled"
)

const (
	purposeBatch       = "batch"
	purposeBatchOutput = "batch_output"
	chatEndpoint       = "/v1/chat/completions"
	maxBatchErrors     = 1000
)

var filePurposes = []string{"assistants", "assistants_output", "batch", "batch_output", "fine-tune", "fine-tune-results", "vision", "user_data"}

// fileObject is the OpenAI File object.
type fileObject struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Bytes         int    `json:"bytes"`
	CreatedAt     int64  `json:"created_at"`
	ExpiresAt     *int64 `json:"expires_at"`
	Filename      string `json:"filename"`
	Purpose       string `json:"purpose"`
	Status        string `json:"status"`
	StatusDetails any    `json:"status_details"`
}

type storedFile struct {
	obj     fileObject
	content []byte
}

// batchError is one entry of a Batch's errors.data.
type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

type batchErrors struct {
	Object string       `json:"object"`
	Data   []batchError `json:"data"`
}

type batchCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

type batchUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// batchObject is the OpenAI Batch object.
type batchObject struct {
	ID               string         `json:"id"`
	Object           string         `json:"object"`
	Endpoint         string         `json:"endpoint"`
	Model            *string        `json:"model"`
	Errors           *batchErrors   `json:"errors"`
	InputFileID      string         `json:"input_file_id"`
	CompletionWindow string         `json:"completion_window"`
	Status           string         `json:"status"`
	OutputFileID     *string        `json:"output_file_id"`
	ErrorFileID      *string        `json:"error_file_id"`
	CreatedAt        int64          `json:"created_at"`
	InProgressAt     *int64         `json:"in_progress_at"`
	ExpiresAt        *int64         `json:"expires_at"`
	FinalizingAt     *int64         `json:"finalizing_at"`
	CompletedAt      *int64         `json:"completed_at"`
	FailedAt         *int64         `json:"failed_at"`
	ExpiredAt        *int64         `json:"expired_at"`
	CancellingAt     *int64         `json:"cancelling_at"`
	CancelledAt      *int64         `json:"cancelled_at"`
	RequestCounts    batchCounts    `json:"request_counts"`
	Usage            batchUsage     `json:"usage"`
	Metadata         map[string]any `json:"metadata"`
}

// batchLine is one parsed input line.
type batchLine struct {
	customID string
	plan     plan
	// status and err: the HTTP error this line's request gets, if any.
	status int
	err    *apiError
}

// resultLine is one line of an output or error file.
type resultLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *resultResponse `json:"response"`
	Error    *resultError    `json:"error"`
}

type resultResponse struct {
	StatusCode int    `json:"status_code"`
	RequestID  string `json:"request_id"`
	Body       any    `json:"body"`
}

type resultError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type batch struct {
	obj          batchObject
	seq          uint64
	model        string
	price        Price
	lines        []batchLine
	enqueued     int64
	validation   []batchError
	created      time.Time
	validateAt   time.Time
	inProgressAt time.Time
	expireAt     time.Time
	cancelAt     time.Time
	lineDur      time.Duration
	processed    int
	outputs      []resultLine
	failures     []resultLine
}

// doneAt is when the last line would be processed.
func (b *batch) doneAt() time.Time {
	return b.inProgressAt.Add(time.Duration(len(b.lines)) * b.lineDur)
}

// processingEnd is when lines stop being processed.
func (b *batch) processingEnd() time.Time {
	end := b.doneAt()
	if b.expireAt.Before(end) {
		end = b.expireAt
	}
	if !b.cancelAt.IsZero() && b.cancelAt.Before(end) {
		end = b.cancelAt
	}
	return end
}

func (b *batch) activeAt(t time.Time) bool {
	return !b.inProgressAt.IsZero() && !t.Before(b.inProgressAt) && t.Before(b.processingEnd())
}

// batchStore holds files and batches. Batch progress is computed lazily
// from the clock by advance.
type batchStore struct {
	s       *Server
	mu      sync.Mutex
	files   map[string]*storedFile
	fileIDs []string
	batches map[string]*batch
	order   []*batch
	seq     uint64
}

func newBatchStore(s *Server) *batchStore {
	return &batchStore{s: s, files: map[string]*storedFile{}, batches: map[string]*batch{}}
}

func (st *batchStore) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	clear(st.files)
	clear(st.batches)
	st.fileIDs, st.order = nil, nil
}

func (st *batchStore) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / st.s.cfg.Batch.TimeScale)
}

func unixPtr(t time.Time) *int64 {
	v := t.Unix()
	return &v
}

func strPtr(s string) *string { return &s }

func (st *batchStore) addFileLocked(name, purpose string, content []byte, now time.Time) *storedFile {
	f := &storedFile{content: content, obj: fileObject{
		ID: newID("file-", 22), Object: "file", Bytes: len(content), CreatedAt: now.Unix(),
		Filename: name, Purpose: purpose, Status: "processed",
	}}
	st.files[f.obj.ID] = f
	st.fileIDs = append(st.fileIDs, f.obj.ID)
	return f
}

func (st *batchStore) begin(w http.ResponseWriter) time.Time {
	st.s.dialect.commonHeaders(w, newRequestID())
	now := st.s.clock.Now()
	st.advanceAll(now)
	return now
}

func notFound(w http.ResponseWriter, kind, id string) {
	writeError(w, http.StatusNotFound, apiError{Message: fmt.Sprintf("No such %s object: %s", kind, id), Type: "invalid_request_error", Param: "id"})
}

func badRequest(w http.ResponseWriter, param, msg string) {
	writeError(w, http.StatusBadRequest, apiError{Message: msg, Type: "invalid_request_error", Param: param})
}

func (st *batchStore) handleUpload(w http.ResponseWriter, r *http.Request) {
	now := st.begin(w)
	maxBytes := st.s.cfg.Batch.MaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, maxBytes+1<<20)
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		badRequest(w, "file", "The request must be multipart/form-data with a 'file' and a 'purpose' field: "+err.Error())
		return
	}
	defer func() { _ = r.MultipartForm.RemoveAll() }()
	purpose := r.FormValue("purpose")
	if purpose == "" {
		badRequest(w, "purpose", "Missing required parameter: 'purpose'.")
		return
	}
	if !slices.Contains(filePurposes, purpose) || purpose == purposeBatchOutput {
		badRequest(w, "purpose", fmt.Sprintf("Invalid value for 'purpose': '%s'.", purpose))
		return
	}
	fh, hdr, err := r.FormFile("file")
	if err != nil {
		badRequest(w, "file", "Missing required parameter: 'file'.")
		return
	}
	defer func() { _ = fh.Close() }()
	content, err := io.ReadAll(io.LimitReader(fh, maxBytes+1))
	if err != nil {
		badRequest(w, "file", "Could not read the uploaded file: "+err.Error())
		return
	}
	if int64(len(content)) > maxBytes {
		badRequest(w, "file", fmt.Sprintf("File is too large: the limit is %d bytes.", maxBytes))
		return
	}
	name := strings.TrimPrefix(hdr.Filename, "@")
	if purpose == purposeBatch && !strings.HasSuffix(name, ".jsonl") {
		badRequest(w, "file", "Invalid file format for Batch API. Must be .jsonl")
		return
	}
	st.mu.Lock()
	f := st.addFileLocked(name, purpose, content, now)
	obj := f.obj
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// listLimit reads a list endpoint's limit parameter (1 to most, def when
// absent); on a bad value it answers 400 and reports false.
func listLimit(w http.ResponseWriter, q url.Values, def, most int) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		badRequest(w, "limit", fmt.Sprintf("Invalid 'limit': expected an integer between 1 and %d.", most))
		return 0, false
	}
	return n, true
}

func (st *batchStore) handleListFiles(w http.ResponseWriter, r *http.Request) {
	st.begin(w)
	q := r.URL.Query()
	limit, ok := listLimit(w, q, 10000, 10000)
	if !ok {
		return
	}
	st.mu.Lock()
	ids := slices.Clone(st.fileIDs)
	if q.Get("order") != "asc" {
		slices.Reverse(ids)
	}
	var data []fileObject
	started := q.Get("after") == ""
	hasMore := false
	for _, id := range ids {
		if !started {
			started = id == q.Get("after")
			continue
		}
		f := st.files[id]
		if f == nil || (q.Get("purpose") != "" && f.obj.Purpose != q.Get("purpose")) {
			continue
		}
		if len(data) == limit {
			hasMore = true
			break
		}
		data = append(data, f.obj)
	}
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, listResponse(data, func(f fileObject) string { return f.ID }, hasMore))
}

func listResponse[T any](data []T, id func(T) string, hasMore bool) map[string]any {
	out := map[string]any{"object": "list", "data": data, "has_more": hasMore, "first_id": nil, "last_id": nil}
	if data == nil {
		out["data"] = []T{}
	}
	if len(data) > 0 {
		out["first_id"] = id(data[0])
		out["last_id"] = id(data[len(data)-1])
	}
	return out
}

func (st *batchStore) handleGetFile(w http.ResponseWriter, r *http.Request) {
	st.begin(w)
	id := r.PathValue("id")
	st.mu.Lock()
	f := st.files[id]
	st.mu.Unlock()
	if f == nil {
		notFound(w, "File", id)
		return
	}
	writeJSON(w, http.StatusOK, f.obj)
}

func (st *batchStore) handleFileContent(w http.ResponseWriter, r *http.Request) {
	st.begin(w)
	id := r.PathValue("id")
	st.mu.Lock()
	f := st.files[id]
	st.mu.Unlock()
	if f == nil {
		notFound(w, "File", id)
		return
	}
	w.Header()["Content-Type"] = []string{"application/octet-stream"}
	w.Header()["Content-Length"] = []string{strconv.Itoa(len(f.content))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(f.content)
}

func (st *batchStore) handleDeleteFile(w http.ResponseWriter, r *http.Request) {
	st.begin(w)
	id := r.PathValue("id")
	st.mu.Lock()
	_, ok := st.files[id]
	delete(st.files, id)
	if ok {
		st.fileIDs = slices.DeleteFunc(st.fileIDs, func(x string) bool { return x == id })
	}
	st.mu.Unlock()
	if !ok {
		notFound(w, "File", id)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
}

type createBatchRequest struct {
	InputFileID      string         `json:"input_file_id"`
	Endpoint         string         `json:"endpoint"`
	CompletionWindow string         `json:"completion_window"`
	Metadata         map[string]any `json:"metadata"`
}

func (st *batchStore) handleCreate(w http.ResponseWriter, r *http.Request) {
	now := st.begin(w)
	var req createBatchRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || json.Unmarshal(body, &req) != nil {
		badRequest(w, "", "We could not parse the JSON body of your request.")
		return
	}
	for _, p := range []struct{ name, v string }{{"input_file_id", req.InputFileID}, {"endpoint", req.Endpoint}, {"completion_window", req.CompletionWindow}} {
		if p.v == "" {
			badRequest(w, p.name, fmt.Sprintf("Missing required parameter: '%s'.", p.name))
			return
		}
	}
	if req.Endpoint != chatEndpoint {
		badRequest(w, "endpoint", fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s'.", req.Endpoint, chatEndpoint))
		return
	}
	if req.CompletionWindow != "24h" {
		badRequest(w, "completion_window", fmt.Sprintf("Invalid value: '%s'. Supported values are: '24h'.", req.CompletionWindow))
		return
	}
	if len(req.Metadata) > 16 {
		badRequest(w, "metadata", "Invalid 'metadata': too many properties. Expected an object with at most 16 properties.")
		return
	}
	for k, v := range req.Metadata {
		sv, ok := v.(string)
		if len(k) > 64 || !ok || len(sv) > 512 {
			badRequest(w, "metadata", "Invalid 'metadata': keys must be strings of at most 64 characters and values strings of at most 512 characters.")
			return
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[req.InputFileID]
	if f == nil || f.obj.Purpose != purposeBatch {
		writeError(w, http.StatusBadRequest, apiError{
			Message: fmt.Sprintf("Cannot find file %s, or project proj_llmqsim does not have access to it.", req.InputFileID),
			Type:    "invalid_request_error", Param: "file_id",
		})
		return
	}
	cfg := st.s.cfg.Batch
	st.seq++
	b := &batch{
		seq:        st.seq,
		created:    now,
		validateAt: now.Add(st.scaled(cfg.Validating)),
		expireAt:   now.Add(st.scaled(cfg.CompletionWindow)),
		lineDur:    st.scaled(time.Duration(float64(time.Second) / cfg.LinesPerSecond)),
	}
	b.obj = batchObject{
		ID: newID("batch_", 24), Object: "batch", Endpoint: req.Endpoint, InputFileID: req.InputFileID,
		CompletionWindow: req.CompletionWindow, Status: BatchValidating, CreatedAt: now.Unix(),
		ExpiresAt: unixPtr(b.expireAt), Metadata: req.Metadata,
	}
	st.parseLines(b, f.content)
	st.batches[b.obj.ID] = b
	st.order = append(st.order, b)
	writeJSON(w, http.StatusOK, b.obj)
}

type inputLine struct {
	CustomID *string         `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// parseLines validates the input file; the result is revealed when the
// batch leaves validating.
func (st *batchStore) parseLines(b *batch, content []byte) {
	fail := b.fail
	raw := bytes.Split(bytes.TrimRight(content, "\r\n"), []byte("\n"))
	if len(bytes.TrimSpace(content)) == 0 {
		fail("empty_file", "The batch input file is empty.", "", 0)
		return
	}
	if len(raw) > st.s.cfg.Batch.MaxLines {
		fail("too_many_tasks", fmt.Sprintf("The batch input file has %d requests; the limit is %d per batch.", len(raw), st.s.cfg.Batch.MaxLines), "", 0)
		return
	}
	seen := make(map[string]bool, len(raw))
	for i, l := range raw {
		n := i + 1
		var in inputLine
		if err := json.Unmarshal(l, &in); err != nil {
			fail("invalid_json_line", "This line is not parseable as valid JSON.", "", n)
			continue
		}
		if code, msg, param := checkLine(in, seen, b.obj.Endpoint); code != "" {
			fail(code, msg, param, n)
			continue
		}
		seen[*in.CustomID] = true
		line := batchLine{customID: *in.CustomID}
		var probe struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(in.Body, &probe)
		if probe.Model != "" {
			if b.model == "" {
				b.model = probe.Model
			} else if probe.Model != b.model {
				fail("model_mismatch", fmt.Sprintf("The model '%s' does not match the model '%s' of the other requests in this batch. All requests in a batch must use the same model.", probe.Model, b.model), "body.model", n)
				continue
			}
		}
		st.planLine(b, &line, in.Body, probe.Stream)
		b.lines = append(b.lines, line)
	}
	if b.model != "" {
		b.obj.Model = strPtr(b.model)
	}
}

// fail records a validation error of the input file (line 0: the whole
// file), up to maxBatchErrors.
func (b *batch) fail(code, msg, param string, line int) {
	if len(b.validation) >= maxBatchErrors {
		return
	}
	e := batchError{Code: code, Message: msg}
	if param != "" {
		e.Param = strPtr(param)
	}
	if line > 0 {
		e.Line = &line
	}
	b.validation = append(b.validation, e)
}

// checkLine returns the validation error of an input line's envelope
// (code "" when it has none): custom_id, method, url and body.
func checkLine(in inputLine, seen map[string]bool, endpoint string) (code, msg, param string) {
	switch {
	case in.CustomID == nil || *in.CustomID == "":
		return "missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id"
	case seen[*in.CustomID]:
		return "duplicate_custom_id", "The custom_id for this request is a duplicate of another request. The custom_id parameter must be unique for each request in a batch.", "custom_id"
	case in.Method != http.MethodPost:
		return "invalid_method", fmt.Sprintf("Invalid value for 'method': '%s'. Supported values are: 'POST'.", in.Method), "method"
	case in.URL != endpoint:
		return "url_mismatch", fmt.Sprintf("The provided url '%s' does not match the batch endpoint '%s'.", in.URL, endpoint), "url"
	case len(in.Body) == 0:
		return "missing_required_parameter", "Missing required parameter: 'body'.", "body"
	}
	return "", "", ""
}

// planLine plans the request of a valid line, or sets the error its
// output line will carry; a planned line counts in the batch's tokens.
func (st *batchStore) planLine(b *batch, line *batchLine, body json.RawMessage, stream bool) {
	req, aerr := parseChat(body, "")
	switch {
	case aerr != nil:
		line.status, line.err = http.StatusBadRequest, aerr
	case stream:
		line.status, line.err = http.StatusBadRequest, invalidParam("stream", "invalid_value", "Streaming is not supported in the Batch API.")
	default:
		m, known := st.s.limits.model(req.Model)
		if !known {
			line.status, line.err = http.StatusNotFound, &apiError{Type: "invalid_request_error", Code: "model_not_found",
				Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", req.Model)}
			return
		}
		p, aerr := st.s.chat.plan(req, m)
		line.plan = p
		if aerr != nil {
			line.status, line.err = http.StatusBadRequest, aerr
			return
		}
		b.enqueued += int64(p.promptTokens)
		b.price = m.Price
	}
}

func (st *batchStore) handleGet(w http.ResponseWriter, r *http.Request) {
	st.begin(w)
	id := r.PathValue("id")
	st.mu.Lock()
	b := st.batches[id]
	var obj batchObject
	if b != nil {
		obj = b.obj
	}
	st.mu.Unlock()
	if b == nil {
		notFound(w, "Batch", id)
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

func (st *batchStore) handleCancel(w http.ResponseWriter, r *http.Request) {
	now := st.begin(w)
	id := r.PathValue("id")
	st.mu.Lock()
	defer st.mu.Unlock()
	b := st.batches[id]
	if b == nil {
		notFound(w, "Batch", id)
		return
	}
	switch b.obj.Status {
	case BatchValidating, BatchInProgress:
		b.cancelAt = now
		st.advanceLocked(b, now)
	case BatchCancelling, BatchCancelled:
	default:
		writeError(w, http.StatusConflict, apiError{Type: "invalid_request_error",
			Message: fmt.Sprintf("Cannot cancel a batch with status '%s'.", b.obj.Status)})
		return
	}
	writeJSON(w, http.StatusOK, b.obj)
}

func (st *batchStore) handleList(w http.ResponseWriter, r *http.Request) {
	st.begin(w)
	q := r.URL.Query()
	limit, ok := listLimit(w, q, 20, 100)
	if !ok {
		return
	}
	after := q.Get("after")
	st.mu.Lock()
	var data []batchObject
	started := after == ""
	hasMore := false
	for i := len(st.order) - 1; i >= 0; i-- {
		b := st.order[i]
		if _, ok := st.batches[b.obj.ID]; !ok {
			continue
		}
		if !started {
			started = b.obj.ID == after
			continue
		}
		if len(data) == limit {
			hasMore = true
			break
		}
		data = append(data, b.obj)
	}
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, listResponse(data, func(b batchObject) string { return b.ID }, hasMore))
}

func (st *batchStore) advanceAll(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range st.order {
		st.advanceLocked(b, now)
	}
}

// advanceLocked moves b through its state machine up to now.
func (st *batchStore) advanceLocked(b *batch, now time.Time) {
	for {
		prev, processed := b.obj.Status, b.processed
		st.stepLocked(b, now)
		if b.obj.Status == prev && b.processed == processed {
			return
		}
	}
}

func (st *batchStore) stepLocked(b *batch, now time.Time) {
	cfg := st.s.cfg.Batch
	switch b.obj.Status {
	case BatchValidating:
		if !b.cancelAt.IsZero() && b.cancelAt.Before(b.validateAt) {
			b.obj.Status = BatchCancelling
			b.obj.CancellingAt = unixPtr(b.cancelAt)
			return
		}
		if now.Before(b.validateAt) {
			return
		}
		st.validateLocked(b)
	case BatchInProgress:
		end := b.processingEnd()
		upTo := now
		if end.Before(upTo) {
			upTo = end
		}
		k := len(b.lines)
		if b.lineDur > 0 {
			k = min(k, int(upTo.Sub(b.inProgressAt)/b.lineDur))
		}
		for ; b.processed < k; b.processed++ {
			st.processLocked(b, b.processed)
		}
		if now.Before(end) {
			return
		}
		switch {
		case b.processed == len(b.lines) && !b.doneAt().After(end):
			b.obj.Status = BatchFinalizing
			b.obj.FinalizingAt = unixPtr(b.doneAt())
		case !b.cancelAt.IsZero() && !end.Before(b.cancelAt):
			b.obj.Status = BatchCancelling
			b.obj.CancellingAt = unixPtr(b.cancelAt)
		default:
			for i := b.processed; i < len(b.lines); i++ {
				b.failures = append(b.failures, resultLine{ID: newID("batch_req_", 24), CustomID: b.lines[i].customID,
					Error: &resultError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}})
				b.obj.RequestCounts.Failed++
			}
			b.obj.Status = BatchExpired
			b.obj.ExpiredAt = unixPtr(b.expireAt)
			st.writeResultsLocked(b, b.expireAt)
		}
	case BatchFinalizing:
		at := b.doneAt().Add(st.scaled(cfg.Finalizing))
		if now.Before(at) {
			return
		}
		b.obj.Status = BatchCompleted
		b.obj.CompletedAt = unixPtr(at)
		st.writeResultsLocked(b, at)
	case BatchCancelling:
		at := b.cancelAt.Add(st.scaled(cfg.Cancelling))
		if now.Before(at) {
			return
		}
		b.obj.Status = BatchCancelled
		b.obj.CancelledAt = unixPtr(at)
		st.writeResultsLocked(b, at)
	}
}

// validateLocked reveals the validation result at validateAt.
func (st *batchStore) validateLocked(b *batch) {
	errs := b.validation
	if len(errs) == 0 && b.model != "" {
		m, _ := st.s.limits.model(b.model)
		if lim := m.EnqueuedTokenLimit; lim > 0 {
			var active int64
			for _, o := range st.order {
				if o != b && o.model == b.model && o.activeAt(b.validateAt) {
					active += o.enqueued
				}
			}
			if active+b.enqueued > lim {
				errs = append(errs, batchError{Code: "token_limit_exceeded", Message: fmt.Sprintf(
					"Enqueued token limit reached for %s in organization %s. Limit: %s enqueued tokens. Please try again once some in_progress batches have been completed.",
					b.model, st.s.cfg.Organization, thousands(lim))})
			}
		}
	}
	if len(errs) > 0 {
		b.obj.Status = BatchFailed
		b.obj.FailedAt = unixPtr(b.validateAt)
		b.obj.Errors = &batchErrors{Object: "list", Data: errs}
		return
	}
	b.obj.Status = BatchInProgress
	b.inProgressAt = b.validateAt
	b.obj.InProgressAt = unixPtr(b.validateAt)
	b.obj.RequestCounts.Total = len(b.lines)
}

// processLocked answers line i.
func (st *batchStore) processLocked(b *batch, i int) {
	l := b.lines[i]
	out := resultLine{ID: newID("batch_req_", 24), CustomID: l.customID}
	reqID := newRequestID()
	if l.err != nil {
		out.Response = &resultResponse{StatusCode: l.status, RequestID: reqID, Body: map[string]apiError{"error": *l.err}}
		b.failures = append(b.failures, out)
		b.obj.RequestCounts.Failed++
		st.s.stats.batchLine(b.model, true, 0, 0, b.price)
		return
	}
	at := b.inProgressAt.Add(time.Duration(i+1) * b.lineDur)
	c := st.s.chat.complete(l.plan)
	out.Response = &resultResponse{StatusCode: http.StatusOK, RequestID: reqID, Body: newChatResponse(l.plan, c, at)}
	b.outputs = append(b.outputs, out)
	b.obj.RequestCounts.Completed++
	b.obj.Usage.InputTokens += l.plan.promptTokens
	b.obj.Usage.OutputTokens += c.completionTokens
	b.obj.Usage.TotalTokens += l.plan.promptTokens + c.completionTokens
	st.s.stats.batchLine(b.model, false, l.plan.promptTokens, c.completionTokens, l.plan.model.Price)
}

// writeResultsLocked creates the output and error files, lines shuffled.
func (st *batchStore) writeResultsLocked(b *batch, at time.Time) {
	rng := rand.New(rand.NewPCG(st.s.cfg.Seed, b.seq))
	write := func(lines []resultLine, name string) *string {
		if len(lines) == 0 {
			return nil
		}
		rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, l := range lines {
			_ = enc.Encode(l)
		}
		f := st.addFileLocked(name, purposeBatchOutput, buf.Bytes(), at)
		return strPtr(f.obj.ID)
	}
	b.obj.OutputFileID = write(b.outputs, b.obj.ID+"_output.jsonl")
	b.obj.ErrorFileID = write(b.failures, b.obj.ID+"_error.jsonl")
	b.outputs, b.failures = nil, nil
}

// thousands writes n as OpenAI's messages do: 90,000.
func thousands(n int64) string { return english.Sprint(n) }

// english formats numbers as OpenAI's messages do.
var english = message.NewPrinter(language.English)
