package batchapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/store"
)

const (
	pollerLock  = "llmq.batchapi.poller"
	outboxBatch = 500
	// maxLineBytes bounds one output line (a chat completion).
	maxLineBytes = 64 << 20
	// maxIDBytes bounds a status or a file id the provider names.
	maxIDBytes = 256
)

// Error codes of jobs the batch lane dead-letters.
const (
	// ErrorCodeBatchLineFailed: a batch line failed with a permanent error.
	ErrorCodeBatchLineFailed = "batch_line_failed"
)

// Poller follows the open batches and brings their results home. Of several
// pollers only one works at a time (an advisory lock).
type Poller struct {
	cfg Config
	log *slog.Logger
	m   *metrics
}

// NewPoller returns the poller of cfg.
func NewPoller(cfg Config) (*Poller, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	return newPoller(cfg, newMetrics(cfg.Registerer)), nil
}

func newPoller(cfg Config, m *metrics) *Poller {
	return &Poller{cfg: cfg, log: cfg.Logger, m: m}
}

// PollStats says what one Poll did.
type PollStats struct {
	// Polled is the number of submitted open batches looked up.
	Polled int
	// Ingested counts the batches brought home.
	Ingested int
	// Stored, Live and DeadLettered count the jobs of the ingested batches.
	Stored, Live, DeadLettered int
	// PulledBack counts the jobs sent live because their deadline came near.
	PulledBack int
	// Letters counts the dead letters published from the outbox.
	Letters int
}

// Poll runs one pass: publishes the dead letters the outbox holds, pulls
// back jobs whose deadline is near, looks up every submitted open batch and
// ingests the final ones.
func (p *Poller) Poll(ctx context.Context) (PollStats, error) {
	var st PollStats
	_, err := p.cfg.Store.WithAdvisoryLock(ctx, pollerLock, func(ctx context.Context) error {
		var errs []error
		n, err := p.drainOutbox(ctx)
		st.Letters += n
		errs = append(errs, err)

		now := p.cfg.Clock.Now()
		ids, err := p.cfg.Store.PullBack(ctx, now.Add(p.cfg.minDeadlineLead()), now.Add(p.cfg.PullBackBefore),
			"live: deadline too near for the batch lane, pulled back")
		st.PulledBack = len(ids)
		errs = append(errs, err)

		open, err := p.cfg.Store.OpenBatches(ctx)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		p.m.open.Set(float64(len(open)))
		for _, b := range open {
			if b.Status == store.BatchSubmitting {
				continue
			}
			st.Polled++
			is, ingested, err := p.follow(ctx, b)
			if ingested {
				st.Ingested++
				st.Stored += is.Stored
				st.Live += is.Live
				st.DeadLettered += is.DeadLettered
			}
			errs = append(errs, err)
		}
		n, err = p.drainOutbox(ctx)
		st.Letters += n
		return errors.Join(append(errs, err)...)
	})
	return st, err
}

// follow refreshes b from the provider and ingests it when final.
func (p *Poller) follow(ctx context.Context, b *store.BatchRecord) (store.IngestStats, bool, error) {
	resp, err := p.cfg.Client.RetrieveBatch(ctx, b.ProviderBatchID)
	pb := &resp.Batch
	var apiErr *openai.APIError
	lost := errors.As(err, &apiErr) && apiErr.HTTPStatusCode == http.StatusNotFound
	if lost {
		// The provider lost the batch: it failed, its jobs go live.
		pb, err = &openai.Batch{ID: b.ProviderBatchID, Status: store.BatchFailed}, nil
	}
	if err != nil {
		return store.IngestStats{}, false, fmt.Errorf("batchapi: retrieve batch %s (%s): %w", b.ID, b.ProviderBatchID, providerError{err})
	}
	prog := progress(pb)
	if lost {
		prog.Error = "the provider has no batch " + b.ProviderBatchID
	}
	if err := p.cfg.Store.UpdateBatchProgress(ctx, b.ID, prog); err != nil {
		return store.IngestStats{}, false, err
	}
	if !store.BatchTerminal(pb.Status) {
		return store.IngestStats{}, false, nil
	}
	b.Status, b.Error = pb.Status, prog.Error
	st, err := p.ingest(ctx, b, pb)
	if errors.Is(err, store.ErrBatchIngested) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	p.log.Info("batch brought home", slog.String("batch_id", b.ID), slog.String("status", pb.Status),
		slog.Int("stored", st.Stored), slog.Int("live", st.Live), slog.Int("dead_lettered", st.DeadLettered),
		slog.Float64("cost_usd", st.CostUSD), slog.Float64("saving_usd", st.LiveCostUSD-st.CostUSD))
	return st, true, nil
}

// progress is what the provider says of batch b, as stored: its texts
// redacted and bounded (redact.Text), since they may echo anything.
func progress(b *openai.Batch) store.BatchProgress {
	prog := store.BatchProgress{
		Status: redact.Text(b.Status, maxIDBytes), RequestTotal: b.RequestCounts.Total,
		RequestCompleted: b.RequestCounts.Completed, RequestFailed: b.RequestCounts.Failed,
	}
	if b.OutputFileID != nil {
		prog.OutputFileID = redact.Text(*b.OutputFileID, maxIDBytes)
	}
	if b.ErrorFileID != nil {
		prog.ErrorFileID = redact.Text(*b.ErrorFileID, maxIDBytes)
	}
	for _, at := range []*int{b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt} {
		if at != nil {
			t := time.Unix(int64(*at), 0).UTC()
			prog.CompletedAt = &t
			break
		}
	}
	if b.Errors != nil && len(b.Errors.Data) > 0 {
		var msgs []string
		for _, e := range b.Errors.Data {
			m := e.Code + ": " + e.Message
			if e.Line != nil {
				m = fmt.Sprintf("line %d: %s", *e.Line, m)
			}
			msgs = append(msgs, m)
			if len(msgs) == 5 {
				msgs = append(msgs, fmt.Sprintf("(%d errors in all)", len(b.Errors.Data)))
				break
			}
		}
		prog.Error = redact.Text(strings.Join(msgs, "; "), redact.ErrorMaxBytes)
	}
	return prog
}

// outputLine is one line of a batch output or error file.
type outputLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// lineOutcome is what became of one job's line.
type lineOutcome struct {
	result *store.BatchResult
	// failure: code, message, and whether retrying live cannot help.
	code, msg string
	permanent bool
}

// ingest downloads the output and error files of the final batch b and
// brings every job of it home.
func (p *Poller) ingest(ctx context.Context, b *store.BatchRecord, pb *openai.Batch) (store.IngestStats, error) {
	outcomes := map[string]*lineOutcome{}
	for _, f := range []*string{pb.OutputFileID, pb.ErrorFileID} {
		if f == nil || *f == "" {
			continue
		}
		if err := p.readFile(ctx, *f, b.Model, outcomes); err != nil {
			return store.IngestStats{}, fmt.Errorf("batchapi: batch %s file %s: %w", b.ID, *f, err)
		}
	}
	keys, err := p.cfg.Store.BatchJobKeys(ctx, b.ID, llmq.StatusBatched)
	if err != nil {
		return store.IngestStats{}, err
	}
	in := store.BatchIngest{BatchID: b.ID}
	for _, k := range keys {
		o := outcomes[k.String()]
		if o == nil {
			// A batch submitted before ids were scoped by tenant names
			// its lines by id alone.
			o = outcomes[k.ID]
		}
		switch {
		case o != nil && o.result != nil:
			r := *o.result
			r.Job = k
			in.Results = append(in.Results, r)
		case o != nil && o.permanent && p.cfg.FailedLines == FailedLinesDeadLetter:
			in.DeadLetter = append(in.DeadLetter, store.BatchReturn{Job: k, Code: ErrorCodeBatchLineFailed,
				Reason: redact.Text(fmt.Sprintf("batch %s line failed: %s: %s", b.ID, o.code, o.msg), redact.ErrorMaxBytes)})
		case o != nil:
			in.Live = append(in.Live, store.BatchReturn{Job: k,
				Reason: redact.Text(fmt.Sprintf("live: batch %s line failed: %s: %s", b.ID, o.code, o.msg), redact.ErrorMaxBytes)})
		default:
			in.Live = append(in.Live, store.BatchReturn{Job: k, Reason: missingReason(b)})
		}
	}
	st, err := p.cfg.Store.IngestBatch(ctx, in)
	if err != nil {
		return st, err
	}
	p.m.results.WithLabelValues(string(llmq.StatusSucceeded)).Add(float64(st.Stored))
	p.m.results.WithLabelValues(store.LaneLive).Add(float64(st.Live))
	p.m.results.WithLabelValues(string(llmq.StatusDeadLettered)).Add(float64(st.DeadLettered))
	return st, nil
}

// missingReason says why a job has no line in the batch's files.
func missingReason(b *store.BatchRecord) string {
	switch b.Status {
	case store.BatchFailed:
		return fmt.Sprintf("live: batch %s failed: %s", b.ID, b.Error)
	case store.BatchExpired:
		return fmt.Sprintf("live: batch %s expired before the job ran", b.ID)
	case store.BatchCancelled:
		return fmt.Sprintf("live: batch %s cancelled before the job ran", b.ID)
	}
	return fmt.Sprintf("live: job missing from the output of batch %s (%s)", b.ID, b.Status)
}

// readFile parses one output or error file into outcomes.
func (p *Poller) readFile(ctx context.Context, fileID, model string, outcomes map[string]*lineOutcome) error {
	raw, err := p.cfg.Client.GetFileContent(ctx, fileID)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer raw.Close()
	r := bufio.NewReaderSize(raw, 1<<20)
	for n := 1; ; n++ {
		line, err := readLine(r)
		if len(line) > 0 {
			var l outputLine
			if jerr := json.Unmarshal(line, &l); jerr != nil || l.CustomID == "" {
				p.log.Warn("unreadable batch output line", slog.String("file_id", fileID), slog.Int("line", n))
			} else if prev := outcomes[l.CustomID]; prev == nil || prev.result == nil {
				outcomes[l.CustomID] = p.outcome(&l, model)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		chunk, err := r.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > maxLineBytes {
			return nil, fmt.Errorf("line longer than %d bytes", maxLineBytes)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return trimEOL(out), err
		}
	}
}

func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// outcome classifies one output line.
func (p *Poller) outcome(l *outputLine, model string) *lineOutcome {
	switch {
	case l.Response != nil && l.Response.StatusCode == http.StatusOK:
		var body struct {
			Model string `json:"model"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(l.Response.Body, &body); err != nil || len(l.Response.Body) == 0 || l.Response.Body[0] != '{' {
			return &lineOutcome{code: "invalid_response", msg: "the batch response body is not a JSON object"}
		}
		if bytes.Contains(l.Response.Body, []byte(`\u0000`)) {
			// Postgres jsonb cannot store NUL; one such line must not
			// block the whole batch.
			return &lineOutcome{code: "invalid_response", msg: "the batch response holds a NUL character"}
		}
		used := body.Model
		if used == "" {
			used = model
		}
		cost, live := p.cfg.cost(used, body.Usage.PromptTokens, body.Usage.CompletionTokens)
		return &lineOutcome{result: &store.BatchResult{
			Response: l.Response.Body, UsedModel: used,
			PromptTokens: body.Usage.PromptTokens, CompletionTokens: body.Usage.CompletionTokens,
			CostUSD: cost, LiveCostUSD: live,
		}}
	case l.Response != nil:
		var body struct {
			Error struct {
				Message string `json:"message"`
				Code    any    `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(l.Response.Body, &body)
		code := fmt.Sprintf("http_%d", l.Response.StatusCode)
		if c, ok := body.Error.Code.(string); ok && c != "" {
			code += "/" + c
		}
		s := l.Response.StatusCode
		return &lineOutcome{code: code, msg: body.Error.Message,
			permanent: s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusConflict && s != http.StatusTooManyRequests}
	case l.Error != nil:
		return &lineOutcome{code: l.Error.Code, msg: l.Error.Message}
	}
	return &lineOutcome{code: "empty_line", msg: "the batch line has neither response nor error"}
}

// drainOutbox publishes the dead letters of the jobs the batch lane
// dead-lettered, then forgets them.
func (p *Poller) drainOutbox(ctx context.Context) (int, error) {
	var total int
	for {
		entries, err := p.cfg.Store.Outbox(ctx, outboxBatch)
		if err != nil || len(entries) == 0 {
			return total, err
		}
		done := make([]store.Key, 0, len(entries))
		for _, e := range entries {
			j := e.Job.Job()
			if e.Action == store.OutboxDeadLetter && p.cfg.DeadLetters != nil {
				value, err := j.Encode()
				if err != nil {
					return total, err
				}
				err = p.cfg.DeadLetters.DeadLetter(ctx, dlq.Letter{
					JobID: j.ID, Tenant: j.Tenant, Reason: dlq.ReasonPermanentError, LastError: e.Reason,
					Attempts: e.Job.Attempts, Model: e.Job.RequestedModel, Message: value, Key: []byte(j.ID),
					Source: "batch/" + e.Job.Key().String(),
				})
				if err != nil && !errors.Is(err, store.ErrTerminal) {
					return total, fmt.Errorf("batchapi: dead letter %q: %w", e.Job.Key().String(), err)
				}
				total++
			}
			done = append(done, e.Job.Key())
		}
		if err := p.cfg.Store.DeleteOutbox(ctx, done); err != nil {
			return total, err
		}
	}
}
