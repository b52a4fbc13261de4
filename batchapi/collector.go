package batchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/store"
)

// Metadata keys llmq sets on the batches it creates.
const (
	MetadataBatchID = "llmq_batch_id"
	MetadataModel   = "llmq_model"
	MetadataJobs    = "llmq_jobs"
)

const collectorLock = "llmq.batchapi.collector"

// Collector groups pending batch-lane jobs into provider batches. Of
// several collectors (processes) only one works at a time (an advisory
// lock); a pass another holds is skipped.
type Collector struct {
	cfg Config
	log *slog.Logger
	m   *metrics
}

// NewCollector returns the collector of cfg.
func NewCollector(cfg Config) (*Collector, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	return newCollector(cfg, newMetrics(cfg.Registerer)), nil
}

func newCollector(cfg Config, m *metrics) *Collector {
	return &Collector{cfg: cfg, log: cfg.Logger, m: m}
}

// Flush resumes the batches left submitting, then submits the pending jobs
// of every model that has MaxLines of them or whose oldest was recorded
// FlushInterval ago or more. Pending are the jobs the batch lane took before, and,
// while the routing policy says batch (off-peak, or the live lane backed
// up), the deferrable jobs queued whose lane is undecided. It returns the
// jobs submitted.
func (c *Collector) Flush(ctx context.Context) (int, error) { return c.run(ctx, false) }

// FlushAll is Flush submitting every pending job whatever its wait.
func (c *Collector) FlushAll(ctx context.Context) (int, error) { return c.run(ctx, true) }

func (c *Collector) run(ctx context.Context, all bool) (int, error) {
	var n int
	_, err := c.cfg.Store.WithAdvisoryLock(ctx, collectorLock, func(ctx context.Context) error {
		open, err := c.cfg.Store.OpenBatches(ctx)
		if err != nil {
			return err
		}
		var errs []error
		for _, b := range open {
			if b.Status != store.BatchSubmitting {
				continue
			}
			k, err := c.resume(ctx, b)
			n += k
			errs = append(errs, err)
		}
		now := c.cfg.Clock.Now()
		var drain time.Duration
		if c.cfg.Drain != nil {
			drain = c.cfg.Drain()
		}
		d := c.cfg.policy().Decide(now, nil, drain)
		cands := store.BatchCandidates{Undecided: d.Batch, NotBefore: now.Add(c.cfg.minDeadlineLead())}
		pending, err := c.cfg.Store.PendingBatchModels(ctx, cands)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		for _, p := range pending {
			if !all && p.Jobs < c.cfg.MaxLines && now.Sub(p.Oldest) < c.cfg.FlushInterval {
				continue
			}
			k, err := c.submitModel(ctx, p.Model, cands, d.Reason)
			n += k
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	return n, err
}

// submitModel submits batches of model until none of its jobs cands
// selects is pending; reason is recorded on the undecided jobs taken.
func (c *Collector) submitModel(ctx context.Context, model string, cands store.BatchCandidates, reason string) (int, error) {
	var n int
	for {
		id := "lb_" + uuid.Must(uuid.NewV7()).String()
		size := 0
		rec, jobs, err := c.cfg.Store.ReserveBatch(ctx, store.BatchReservation{
			ID: id, Model: model, MaxJobs: c.cfg.MaxLines, Candidates: cands, Reason: reason,
			Fits: func(j store.BatchJob, _ int) bool {
				size += lineSize(j)
				return size <= c.cfg.MaxBytes
			},
			Metadata: map[string]string{MetadataModel: model},
		})
		if err != nil || rec == nil {
			return n, err
		}
		k, err := c.submit(ctx, rec, jobs)
		n += k
		if err != nil {
			return n, err
		}
	}
}

// resume finishes a batch left submitting by a crash or a failed call: it
// adopts the provider batch created for it if there is one (found by its
// metadata), else submits it again.
func (c *Collector) resume(ctx context.Context, b *store.BatchRecord) (int, error) {
	found, err := c.findProviderBatch(ctx, b.ID)
	if err != nil {
		return 0, err
	}
	if found != nil {
		c.log.Info("adopting provider batch of a resumed submission", slog.String("batch_id", b.ID),
			slog.String("provider_batch_id", found.ID))
		return c.recordSubmitted(ctx, b.ID, found)
	}
	jobs, err := c.cfg.Store.BatchJobs(ctx, b.ID)
	if err != nil {
		return 0, err
	}
	if len(jobs) == 0 {
		_, err := c.cfg.Store.AbandonBatch(ctx, b.ID, "no job left to submit", false, "")
		return 0, err
	}
	return c.submit(ctx, b, jobs)
}

// findProviderBatch looks for the provider batch whose metadata names id.
func (c *Collector) findProviderBatch(ctx context.Context, id string) (*openai.Batch, error) {
	var after *string
	limit := 100
	for page := 0; page < c.cfg.ReconcilePages; page++ {
		resp, err := c.cfg.Client.ListBatch(ctx, after, &limit)
		if err != nil {
			return nil, fmt.Errorf("batchapi: list provider batches: %w", err)
		}
		for i := range resp.Data {
			if v, _ := resp.Data[i].Metadata[MetadataBatchID].(string); v == id {
				return &resp.Data[i], nil
			}
		}
		if !resp.HasMore || len(resp.Data) == 0 {
			return nil, nil
		}
		last := resp.Data[len(resp.Data)-1].ID
		after = &last
	}
	return nil, nil
}

// submit uploads the input file of b (unless already uploaded) and creates
// the provider batch. A request the provider refuses for good (4xx) sends
// the jobs back to the live lane.
func (c *Collector) submit(ctx context.Context, b *store.BatchRecord, jobs []store.BatchJob) (int, error) {
	fileID := b.InputFileID
	if fileID == "" {
		f, err := c.cfg.Client.CreateFileBytes(ctx, openai.FileBytesRequest{
			Name: b.ID + ".jsonl", Bytes: buildInput(jobs), Purpose: openai.PurposeBatch,
		})
		if err != nil {
			return 0, c.refused(ctx, b, "upload", err)
		}
		fileID = f.ID
		if err := c.cfg.Store.SetBatchInputFile(ctx, b.ID, fileID); err != nil {
			return 0, err
		}
	}
	resp, err := c.cfg.Client.CreateBatch(ctx, openai.CreateBatchRequest{
		InputFileID: fileID, Endpoint: openai.BatchEndpointChatCompletions, CompletionWindow: "24h",
		Metadata: map[string]any{MetadataBatchID: b.ID, MetadataModel: b.Model, MetadataJobs: strconv.Itoa(len(jobs))},
	})
	if err != nil {
		return 0, c.refused(ctx, b, "create", err)
	}
	return c.recordSubmitted(ctx, b.ID, &resp.Batch)
}

func (c *Collector) recordSubmitted(ctx context.Context, id string, pb *openai.Batch) (int, error) {
	n, err := c.cfg.Store.MarkBatchSubmitted(ctx, store.BatchSubmission{
		ID: id, ProviderBatchID: pb.ID, Status: pb.Status, InputFileID: pb.InputFileID,
	})
	if err != nil {
		return 0, err
	}
	c.m.batches.Inc()
	c.m.submitted.Add(float64(n))
	c.log.Info("batch submitted", slog.String("batch_id", id), slog.String("provider_batch_id", pb.ID),
		slog.Int("jobs", n))
	return n, nil
}

// refused handles a failed upload or create: a permanent refusal abandons
// the batch (its jobs go live); anything else is left for the next pass.
func (c *Collector) refused(ctx context.Context, b *store.BatchRecord, op string, err error) error {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode >= 400 && apiErr.HTTPStatusCode < 500 &&
		apiErr.HTTPStatusCode != http.StatusRequestTimeout && apiErr.HTTPStatusCode != http.StatusConflict &&
		apiErr.HTTPStatusCode != http.StatusTooManyRequests {
		reason := fmt.Sprintf("live: batch %s refused by the provider: %s", op, apiErr.Message)
		if _, aerr := c.cfg.Store.AbandonBatch(ctx, b.ID, reason, true, reason); aerr != nil {
			return errors.Join(err, aerr)
		}
		c.log.Warn("batch refused; its jobs go live", slog.String("batch_id", b.ID), slog.Any("error", err))
		return nil
	}
	return fmt.Errorf("batchapi: %s batch %s: %w", op, b.ID, err)
}

// inputLine is one line of a batch input file.
type inputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

const lineOverhead = len(`{"custom_id":"","method":"POST","url":"/v1/chat/completions","body":}` + "\n")

func lineSize(j store.BatchJob) int { return lineOverhead + len(j.Key.String()) + len(j.Body) }

// buildInput renders the JSONL input file of jobs (custom_id = the job's
// key, tenant/id: ids are unique per tenant only).
func buildInput(jobs []store.BatchJob) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, j := range jobs {
		// A body read back from jsonb always encodes.
		_ = enc.Encode(inputLine{CustomID: j.Key.String(), Method: http.MethodPost,
			URL: string(openai.BatchEndpointChatCompletions), Body: j.Body})
	}
	return buf.Bytes()
}
