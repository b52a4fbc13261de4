package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// Batches is the batch lane (tables batches and batch_outbox, the jobs' batch
// columns): the collector reserves jobs into batches, the poller brings
// their results home. It is reached by Store.Batches.
type Batches struct{ *base }

// Errors of the batch lane's store operations.
var (
	// ErrBatchNotFound: no batch with that id or provider batch id.
	ErrBatchNotFound = errors.New("store: batch not found")
	// ErrBatchNotSubmitting: the batch is no longer in status submitting
	// (another collector submitted or abandoned it).
	ErrBatchNotSubmitting = errors.New("store: batch is not submitting")
	// ErrBatchIngested: the batch's output was already brought home.
	ErrBatchIngested = errors.New("store: batch already ingested")
)

// Batch statuses of BatchRecord.Status: BatchSubmitting is llmq's own (the
// batch is recorded and its jobs reserved, but the provider has not accepted
// it yet); the others are the provider's Batch API statuses.
const (
	BatchSubmitting = "submitting"
	BatchValidating = "validating"
	BatchInProgress = "in_progress"
	BatchFinalizing = "finalizing"
	BatchCompleted  = "completed"
	BatchFailed     = "failed"
	BatchExpired    = "expired"
	BatchCancelling = "cancelling"
	BatchCancelled  = "cancelled"
)

// BatchTerminal reports whether a provider batch status is final (its
// output can be ingested).
func BatchTerminal(status string) bool {
	switch status {
	case BatchCompleted, BatchFailed, BatchExpired, BatchCancelled:
		return true
	}
	return false
}

// OutboxDeadLetter is the action of the batch lane's outbox rows (table
// batch_outbox): the job is dead_lettered and its dead letter must be
// published. (A job the batch lane hands back to the live lane needs no
// message: it is queued in Postgres, where the schedulers claim it.)
const OutboxDeadLetter = "dead_letter"

// BatchRecord is one row of the batches table.
type BatchRecord struct {
	// ID is llmq's id of the batch (jobs.batch_id).
	ID string `db:"id"`
	// ProviderBatchID is the provider's batch id; "" while submitting.
	ProviderBatchID  string            `db:"provider_batch_id"`
	Model            string            `db:"model"`
	Status           string            `db:"status"`
	InputFileID      string            `db:"input_file_id"`
	OutputFileID     string            `db:"output_file_id"`
	ErrorFileID      string            `db:"error_file_id"`
	JobCount         int               `db:"job_count"`
	RequestTotal     int               `db:"request_total"`
	RequestCompleted int               `db:"request_completed"`
	RequestFailed    int               `db:"request_failed"`
	CreatedAt        time.Time         `db:"created_at"`
	UpdatedAt        time.Time         `db:"updated_at"`
	SubmittedAt      *time.Time        `db:"submitted_at"`
	CompletedAt      *time.Time        `db:"completed_at"`
	IngestedAt       *time.Time        `db:"ingested_at"`
	Error            string            `db:"error"`
	Metadata         map[string]string `db:"metadata"`
	// CostUSD is what the batch's stored results cost at batch prices;
	// LiveCostUSD what the same tokens would have cost live.
	CostUSD     float64 `db:"cost_usd"`
	LiveCostUSD float64 `db:"live_cost_usd"`
}

const batchColumns = `id, provider_batch_id, model, status, input_file_id, output_file_id, error_file_id,
	job_count, request_total, request_completed, request_failed, created_at, updated_at, submitted_at,
	completed_at, ingested_at, error, metadata, cost_usd, live_cost_usd`

func (s *Batches) queryBatches(ctx context.Context, op, sql string, args ...any) ([]*BatchRecord, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", op, err)
	}
	recs, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[BatchRecord])
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", op, err)
	}
	return recs, nil
}

// PendingModel summarises the jobs of one model waiting for a batch.
type PendingModel struct {
	Model string
	Jobs  int
	// Oldest is when the longest-waiting of them was recorded.
	Oldest time.Time
}

// BatchCandidates says which queued jobs wait for a batch: always those
// the batch lane has taken (lane batch) and not yet put in a batch; with
// Undecided, also the deferrable jobs whose lane nobody decided yet, except
// those with a deadline at or before NotBefore.
type BatchCandidates struct {
	Undecided bool
	NotBefore time.Time
}

// where renders c as a condition on jobs, with NotBefore as $n (used only
// with Undecided).
func (c BatchCandidates) where(n int) string {
	cond := `(lane = 'batch' AND batch_id = '')`
	if c.Undecided {
		cond = `(` + cond + fmt.Sprintf(` OR ("deferrable" AND lane = 'live' AND lane_reason = '' AND (deadline IS NULL OR deadline > $%d)))`, n)
	}
	return `status = 'queued' AND ` + cond
}

// PendingBatchModels lists, per model, the jobs c selects.
func (s *Batches) PendingBatchModels(ctx context.Context, c BatchCandidates) ([]PendingModel, error) {
	var args []any
	if c.Undecided {
		args = append(args, c.NotBefore)
	}
	paused, pausedArgs := notPaused(s.order.tenants(), len(args)+1)
	rows, err := s.pool.Query(ctx, `SELECT requested_model, count(*), min(created_at) FROM jobs
		WHERE `+c.where(1)+paused+` GROUP BY requested_model ORDER BY 3`, append(args, pausedArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("store: pending batch models: %w", err)
	}
	var out []PendingModel
	var p PendingModel
	_, err = pgx.ForEachRow(rows, []any{&p.Model, &p.Jobs, &p.Oldest}, func() error {
		p.Oldest = p.Oldest.UTC()
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: pending batch models: %w", err)
	}
	return out, nil
}

// batchOrder is the order in which the batch lane takes its jobs: the job
// recorded first goes first into a batch (created_at never changes, so a
// job handed back by a batch that never reached the provider keeps its
// place). The lane's indexes (jobs_batch_pending_idx, jobs_deferrable_idx)
// hold it; updated_at, which every update of a job changes, is in no
// index, so a call's update of a job is heap-only (migration 0018).
const batchOrder = `created_at, tenant, id`

// BatchJob is a job as it goes into a batch input file.
type BatchJob struct {
	Key  Key
	Body []byte
}

// BatchReservation asks ReserveBatch for the next batch of one model.
type BatchReservation struct {
	// ID is the new batch's id; Model the model of its jobs.
	ID, Model string
	// MaxJobs bounds the jobs taken.
	MaxJobs int
	// Fits is called with each candidate in order (batchOrder) and the
	// jobs accepted so far; the first refusal ends the batch. nil accepts
	// all.
	Fits func(j BatchJob, accepted int) bool
	// Candidates selects the jobs; its NotBefore also leaves out the
	// jobs of the batch lane whose deadline is at or before it (they must
	// not wait for a batch).
	Candidates BatchCandidates
	// Reason is recorded as the lane reason of an undecided job taken.
	Reason string
	// Metadata is stored with the batch.
	Metadata map[string]string
}

// ReserveBatch records a new batch in status submitting and reserves for
// it (jobs.batch_id, lane batch, status still queued) the first jobs in
// batchOrder of the model that r.Candidates selects, in one transaction; concurrent
// collectors, and the live lane's claims, get disjoint jobs. It returns nil
// when no job is pending.
func (s *Batches) ReserveBatch(ctx context.Context, r BatchReservation) (*BatchRecord, []BatchJob, error) {
	if r.ID == "" || r.Model == "" || r.MaxJobs <= 0 {
		return nil, nil, fmt.Errorf("store: reserve batch: ID, Model and a positive MaxJobs are required")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("store: reserve batch: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	paused, pausedArgs := notPaused(s.order.tenants(), 4)
	rows, err := tx.Query(ctx, `SELECT tenant, id, body::text FROM jobs
		WHERE `+r.Candidates.where(2)+` AND requested_model = $1 AND (deadline IS NULL OR deadline > $2)`+paused+`
		ORDER BY `+batchOrder+` LIMIT $3 FOR UPDATE SKIP LOCKED`, append([]any{r.Model, r.Candidates.NotBefore, r.MaxJobs}, pausedArgs...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("store: reserve batch: %w", err)
	}
	jobs, err := collectBatchJobs(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("store: reserve batch: %w", err)
	}
	if r.Fits != nil {
		for i, j := range jobs {
			if !r.Fits(j, i) {
				jobs = jobs[:i]
				break
			}
		}
	}
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	tenants, ids := make([]string, len(jobs)), make([]string, len(jobs))
	for i, j := range jobs {
		tenants[i], ids[i] = j.Key.Tenant, j.Key.ID
	}
	now := s.clock()
	meta := r.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	if _, err := tx.Exec(ctx, `UPDATE jobs j SET batch_id = $1, updated_at = $2, lane = 'batch',
			lane_reason = CASE WHEN j.lane_reason = '' THEN $5 ELSE j.lane_reason END
		FROM unnest($3::text[], $4::text[]) AS u(tenant, id) WHERE j.tenant = u.tenant AND j.id = u.id`,
		r.ID, now, tenants, ids, r.Reason); err != nil {
		return nil, nil, fmt.Errorf("store: reserve batch: %w", err)
	}
	brows, err := tx.Query(ctx, `INSERT INTO batches (id, model, status, job_count, created_at, updated_at, metadata)
		VALUES ($1, $2, 'submitting', $3, $4, $4, $5) RETURNING `+batchColumns, r.ID, r.Model, len(jobs), now, meta)
	if err != nil {
		return nil, nil, fmt.Errorf("store: reserve batch: %w", err)
	}
	rec, err := pgx.CollectOneRow(brows, pgx.RowToAddrOfStructByName[BatchRecord])
	if err != nil {
		return nil, nil, fmt.Errorf("store: reserve batch: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("store: reserve batch: %w", err)
	}
	return rec, jobs, nil
}

// collectBatchJobs reads (tenant, id, body) rows.
func collectBatchJobs(rows pgx.Rows) ([]BatchJob, error) {
	var jobs []BatchJob
	var k Key
	var body string
	_, err := pgx.ForEachRow(rows, []any{&k.Tenant, &k.ID, &body}, func() error {
		jobs = append(jobs, BatchJob{Key: k, Body: []byte(body)})
		return nil
	})
	return jobs, err
}

// BatchJobs returns the jobs reserved for (or inside) batch id in
// batchOrder, as ReserveBatch took them into its input file.
func (s *Batches) BatchJobs(ctx context.Context, id string) ([]BatchJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, id, body::text FROM jobs WHERE batch_id = $1
		ORDER BY `+batchOrder, id)
	if err != nil {
		return nil, fmt.Errorf("store: batch jobs %q: %w", id, err)
	}
	jobs, err := collectBatchJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("store: batch jobs %q: %w", id, err)
	}
	return jobs, nil
}

// SetBatchInputFile records the uploaded input file of a submitting batch.
func (s *Batches) SetBatchInputFile(ctx context.Context, id, fileID string) error {
	_, err := s.pool.Exec(ctx, `UPDATE batches SET input_file_id = $2, updated_at = $3 WHERE id = $1`, id, fileID, s.clock())
	if err != nil {
		return fmt.Errorf("store: set batch input file %q: %w", id, err)
	}
	return nil
}

// BatchSubmission is what the provider answered to a batch creation.
type BatchSubmission struct {
	ID, ProviderBatchID, Status, InputFileID string
}

// MarkBatchSubmitted records that the provider accepted batch ID and moves
// its reserved jobs (still queued) to batched, in one transaction. It
// returns the number of jobs moved.
func (s *Batches) MarkBatchSubmitted(ctx context.Context, sub BatchSubmission) (int, error) {
	now := s.clock()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: mark batch submitted %q: %w", sub.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	tag, err := tx.Exec(ctx, `UPDATE batches SET provider_batch_id = $2, status = $3, input_file_id = $4,
		submitted_at = $5, updated_at = $5 WHERE id = $1 AND status = 'submitting'`,
		sub.ID, sub.ProviderBatchID, sub.Status, sub.InputFileID, now)
	if err != nil {
		return 0, fmt.Errorf("store: mark batch submitted %q: %w", sub.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return 0, fmt.Errorf("store: mark batch submitted %q: %w", sub.ID, ErrBatchNotSubmitting)
	}
	tag, err = tx.Exec(ctx, `UPDATE jobs SET status = `+tMarkBatchSubmitted.to+`, updated_at = $2
		WHERE batch_id = $1 AND lane = 'batch' AND status `+tMarkBatchSubmitted.in, sub.ID, now)
	if err != nil {
		return 0, fmt.Errorf("store: mark batch submitted %q: %w", sub.ID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE batches SET job_count = $2 WHERE id = $1`, sub.ID, tag.RowsAffected()); err != nil {
		return 0, fmt.Errorf("store: mark batch submitted %q: %w", sub.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("store: mark batch submitted %q: %w", sub.ID, err)
	}
	return int(tag.RowsAffected()), nil
}

// AbandonBatch gives up a submitting batch that never reached the provider
// (e.g. its upload was refused): its reserved jobs go back to the pending
// pool of the batch lane, or to the live lane with reason when live is set,
// and the batch row is closed as failed with errMsg.
func (s *Batches) AbandonBatch(ctx context.Context, id, errMsg string, live bool, reason string) (int, error) {
	now := s.clock()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: abandon batch %q: %w", id, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	tag, err := tx.Exec(ctx, `UPDATE batches SET status = 'failed', error = $2, ingested_at = $3, updated_at = $3
		WHERE id = $1 AND status = 'submitting'`, id, errMsg, now)
	if err != nil {
		return 0, fmt.Errorf("store: abandon batch %q: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return 0, fmt.Errorf("store: abandon batch %q: %w", id, ErrBatchNotSubmitting)
	}
	if live {
		tag, err = tx.Exec(ctx, `UPDATE jobs SET lane = 'live', lane_reason = $2, batch_id = '', updated_at = $3
			WHERE batch_id = $1 AND status = 'queued'`, id, reason, now)
	} else {
		tag, err = tx.Exec(ctx, `UPDATE jobs SET batch_id = '', updated_at = $2 WHERE batch_id = $1 AND status = 'queued'`, id, now)
	}
	if err != nil {
		return 0, fmt.Errorf("store: abandon batch %q: %w", id, err)
	}
	n := int(tag.RowsAffected())
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("store: abandon batch %q: %w", id, err)
	}
	return n, nil
}

// GetBatch returns the batch with llmq id or provider batch id ref.
func (s *Batches) GetBatch(ctx context.Context, ref string) (*BatchRecord, error) {
	recs, err := s.queryBatches(ctx, "get batch "+strconv.Quote(ref),
		`SELECT `+batchColumns+` FROM batches WHERE id = $1 OR (provider_batch_id = $1 AND $1 <> '')`, ref)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("store: get batch %q: %w", ref, ErrBatchNotFound)
	}
	return recs[0], nil
}

// OpenBatches returns the batches not yet ingested (submitting, followed
// at the provider, or final but not yet brought home), oldest first.
func (s *Batches) OpenBatches(ctx context.Context) ([]*BatchRecord, error) {
	return s.queryBatches(ctx, "open batches",
		`SELECT `+batchColumns+` FROM batches WHERE ingested_at IS NULL ORDER BY created_at, id`)
}

// ListBatches returns up to limit batches, newest first; with open set only
// those not yet ingested.
func (s *Batches) ListBatches(ctx context.Context, limit int, open bool) ([]*BatchRecord, error) {
	if limit <= 0 {
		limit = ListLimitDefault
	}
	return s.queryBatches(ctx, "list batches", `SELECT `+batchColumns+` FROM batches
		WHERE NOT $2 OR ingested_at IS NULL ORDER BY created_at DESC, id DESC LIMIT $1`, min(limit, ListLimitMax), open)
}

// BatchProgress is the provider's view of a batch.
type BatchProgress struct {
	Status                                        string
	OutputFileID, ErrorFileID                     string
	RequestTotal, RequestCompleted, RequestFailed int
	// CompletedAt is when the batch reached a final status (nil if not).
	CompletedAt *time.Time
	// Error describes a failed batch's validation errors.
	Error string
}

// UpdateBatchProgress records the provider's view of a submitted batch.
func (s *Batches) UpdateBatchProgress(ctx context.Context, id string, p BatchProgress) error {
	_, err := s.pool.Exec(ctx, `UPDATE batches SET status = $2, output_file_id = $3, error_file_id = $4,
		request_total = $5, request_completed = $6, request_failed = $7, completed_at = coalesce(completed_at, $8),
		error = CASE WHEN $9 = '' THEN error ELSE $9 END, updated_at = $10
		WHERE id = $1 AND ingested_at IS NULL AND status <> 'submitting'`,
		id, p.Status, p.OutputFileID, p.ErrorFileID, p.RequestTotal, p.RequestCompleted, p.RequestFailed,
		p.CompletedAt, p.Error, s.clock())
	if err != nil {
		return fmt.Errorf("store: update batch %q: %w", id, err)
	}
	return nil
}

// BatchResult is the result of one batch line to store on its job.
type BatchResult struct {
	Job              Key
	Response         []byte
	UsedModel        string
	PromptTokens     int
	CompletionTokens int
	// CostUSD is the batch price of the call; LiveCostUSD the live price of
	// the same tokens.
	CostUSD, LiveCostUSD float64
}

// BatchReturn is a job the batch lane hands back, with the reason.
type BatchReturn struct {
	Job Key
	// Code and Reason describe why (Code is the job's error_code for a dead
	// letter; Reason goes to lane_reason or error_message).
	Code, Reason string
}

// BatchIngest is everything a final batch brought home.
type BatchIngest struct {
	// BatchID is llmq's id of the batch.
	BatchID string
	// Results are stored on their jobs.
	Results []BatchResult
	// Live jobs go back to the live lane (queued, where the schedulers
	// claim them).
	Live []BatchReturn
	// DeadLetter jobs end dead_lettered (outbox dead_letter).
	DeadLetter []BatchReturn
}

// IngestStats says what IngestBatch changed.
type IngestStats struct {
	Stored, Live, DeadLettered int
	CostUSD, LiveCostUSD       float64
}

// ingestChunk bounds the rows per statement.
const ingestChunk = 1000

// IngestBatch brings a final batch home in one transaction: each result is
// stored on its job if the job is still batched in this batch (so exactly
// once, whatever the retries or restarts), the returned jobs go back to
// the live lane or end dead_lettered (with an outbox row each, for their
// dead letters), the budgets of the stored jobs' scopes are charged their
// batch price, and the batch is closed with its costs. A batch already ingested changes
// nothing (ErrBatchIngested).
func (s *Batches) IngestBatch(ctx context.Context, in BatchIngest) (IngestStats, error) {
	var st IngestStats
	now := s.clock()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return st, fmt.Errorf("store: ingest batch %q: %w", in.BatchID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if err := lockBatchForIngest(ctx, tx, in.BatchID); err != nil {
		return st, err
	}
	if err := ingestResults(ctx, tx, in, now, &st); err != nil {
		return st, err
	}
	if err := ingestReturned(ctx, tx, in, now, &st); err != nil {
		return st, err
	}
	if err := s.chargeBatchBudgets(ctx, tx, in.BatchID, now); err != nil {
		return st, fmt.Errorf("store: ingest batch %q: charge budgets: %w", in.BatchID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE batches SET ingested_at = $2, updated_at = $2, cost_usd = $3, live_cost_usd = $4
		WHERE id = $1`, in.BatchID, now, st.CostUSD, st.LiveCostUSD); err != nil {
		return st, fmt.Errorf("store: ingest batch %q: %w", in.BatchID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return st, fmt.Errorf("store: ingest batch %q: %w", in.BatchID, err)
	}
	return st, nil
}

// lockBatchForIngest locks batch id's row for the ingest's transaction:
// ErrBatchNotFound without one, ErrBatchIngested when it was ingested.
func lockBatchForIngest(ctx context.Context, tx pgx.Tx, id string) error {
	var ingested *time.Time
	if err := tx.QueryRow(ctx, `SELECT ingested_at FROM batches WHERE id = $1 FOR UPDATE`, id).Scan(&ingested); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: ingest batch %q: %w", id, ErrBatchNotFound)
		}
		return fmt.Errorf("store: ingest batch %q: %w", id, err)
	}
	if ingested != nil {
		return fmt.Errorf("store: ingest batch %q: %w", id, ErrBatchIngested)
	}
	return nil
}

// ingestResults stores in.Results on their jobs still batched in the batch,
// counting the stored jobs and their batch and live costs into st.
func ingestResults(ctx context.Context, tx pgx.Tx, in BatchIngest, now time.Time, st *IngestStats) error {
	live := map[Key]float64{}
	for chunk := range chunks(in.Results) {
		n := len(chunk)
		tenants, ids, bodies, models := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		pt, ct, cost := make([]int32, n), make([]int32, n), make([]float64, n)
		for i, r := range chunk {
			tenants[i], ids[i], bodies[i], models[i] = r.Job.Tenant, r.Job.ID, string(r.Response), r.UsedModel
			pt[i], ct[i], cost[i] = int32(r.PromptTokens), int32(r.CompletionTokens), r.CostUSD
			live[r.Job] = r.LiveCostUSD
		}
		rows, err := tx.Query(ctx, notifyDone(`UPDATE jobs j SET status = `+tIngestResult.to+`, result = u.body::jsonb,
			used_model = u.model, prompt_tokens = u.pt, completion_tokens = u.ct, cost_usd = u.cost,
			finished_at = $2, updated_at = $2, lease_expires_at = NULL, error_code = '', error_message = ''
		FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::int[], $9::float8[])
			AS u(tenant, id, body, model, pt, ct, cost)
		WHERE j.tenant = u.tenant AND j.id = u.id AND j.status `+tIngestResult.in+` AND j.batch_id = $1
		RETURNING j.tenant, j.id, j.cost_usd`, aliasJ, `tenant, id, cost_usd`), in.BatchID, now, tenants, ids, bodies, models, pt, ct, cost)
		if err != nil {
			return dataError("ingest batch "+strconv.Quote(in.BatchID), err)
		}
		var k Key
		var c float64
		_, err = pgx.ForEachRow(rows, []any{&k.Tenant, &k.ID, &c}, func() error {
			st.Stored++
			st.CostUSD += c
			st.LiveCostUSD += live[k]
			return nil
		})
		if err != nil {
			return dataError("ingest batch "+strconv.Quote(in.BatchID), err)
		}
	}
	return nil
}

// ingestReturned moves in.Live back to the live lane and ends
// in.DeadLetter dead_lettered (an outbox row each), counting both into st.
func ingestReturned(ctx context.Context, tx pgx.Tx, in BatchIngest, now time.Time, st *IngestStats) error {
	for chunk := range chunks(in.Live) {
		tenants, ids, reasons := returnCols(chunk)
		tag, err := tx.Exec(ctx, `UPDATE jobs j SET status = `+tIngestLive.to+`, lane = 'live', batch_id = '',
			lane_reason = u.reason, updated_at = $2
		FROM unnest($3::text[], $4::text[], $5::text[]) AS u(tenant, id, reason)
		WHERE j.tenant = u.tenant AND j.id = u.id AND j.status `+tIngestLive.in+` AND j.batch_id = $1`,
			in.BatchID, now, tenants, ids, reasons)
		if err != nil {
			return fmt.Errorf("store: ingest batch %q: %w", in.BatchID, err)
		}
		st.Live += int(tag.RowsAffected())
	}
	for chunk := range chunks(in.DeadLetter) {
		tenants, ids, reasons := returnCols(chunk)
		codes := make([]string, len(chunk))
		for i, r := range chunk {
			codes[i] = r.Code
		}
		rows, err := tx.Query(ctx, notifyDone(`UPDATE jobs j SET status = `+tIngestDeadLetter.to+`, error_code = u.code,
			error_message = u.reason, finished_at = $2, updated_at = $2, lease_expires_at = NULL
		FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS u(tenant, id, reason, code)
		WHERE j.tenant = u.tenant AND j.id = u.id AND j.status `+tIngestDeadLetter.in+` AND j.batch_id = $1
		RETURNING j.tenant, j.id, u.reason`, aliasJ, `tenant, id, reason`),
			in.BatchID, now, tenants, ids, reasons, codes)
		if err != nil {
			return fmt.Errorf("store: ingest batch %q: %w", in.BatchID, err)
		}
		n, err := outboxFrom(ctx, tx, rows, now)
		if err != nil {
			return fmt.Errorf("store: ingest batch %q: %w", in.BatchID, err)
		}
		st.DeadLettered += n
	}
	return nil
}

func chunks[T any](s []T) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			n := min(len(s), ingestChunk)
			if !yield(s[:n]) {
				return
			}
			s = s[n:]
		}
	}
}

func returnCols(rs []BatchReturn) (tenants, ids, reasons []string) {
	tenants, ids, reasons = make([]string, len(rs)), make([]string, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		tenants[i], ids[i], reasons[i] = r.Job.Tenant, r.Job.ID, r.Reason
	}
	return tenants, ids, reasons
}

// outboxFrom reads (tenant, id, reason) rows of dead-lettered jobs and
// writes one outbox row each.
func outboxFrom(ctx context.Context, tx pgx.Tx, rows pgx.Rows, now time.Time) (int, error) {
	var tenants, ids, reasons []string
	var tenant, id, reason string
	_, err := pgx.ForEachRow(rows, []any{&tenant, &id, &reason}, func() error {
		tenants, ids, reasons = append(tenants, tenant), append(ids, id), append(reasons, reason)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	_, err = tx.Exec(ctx, `INSERT INTO batch_outbox (tenant, job_id, action, reason, created_at)
		SELECT u.tenant, u.id, $1, u.reason, $2 FROM unnest($3::text[], $4::text[], $5::text[]) AS u(tenant, id, reason)
		ON CONFLICT (tenant, job_id) DO UPDATE SET action = excluded.action, reason = excluded.reason`,
		OutboxDeadLetter, now, tenants, ids, reasons)
	return len(ids), err
}

// pullBackSQL moves batch-lane jobs with a deadline back to the live lane:
// pending ones (not yet in a batch) whose deadline is at or before $1 are
// queued already and only change lane; batched ones whose deadline is at or
// before $2 make the transition tPullBack.
var pullBackSQL = `UPDATE jobs SET status = ` + tPullBack.to + `, lane = 'live', batch_id = '', lane_reason = $3, updated_at = $4
	WHERE lane = 'batch' AND deadline IS NOT NULL AND status ` + sqlIn(append([]llmq.Status{tPullBack.To}, tPullBack.From...)...) + `
		AND ((status ` + tPullBack.in + ` AND deadline <= $2) OR (status = ` + tPullBack.to + ` AND batch_id = '' AND deadline <= $1))
	RETURNING tenant, id`

// PullBack returns to the live lane (queued, where the schedulers claim
// them) the batch-lane jobs whose deadline is too near: pending jobs (not
// yet in a batch) whose deadline is at or before pending, and batched jobs
// whose deadline is at or before batched; jobs reserved for a batch still
// being submitted are left until it is submitted. The batches themselves
// are not touched: a late result of a pulled-back job is ignored. It
// returns the keys moved.
func (s *Batches) PullBack(ctx context.Context, pending, batched time.Time, reason string) ([]Key, error) {
	return s.keys(ctx, "pull back", pullBackSQL, pending, batched, reason, s.clock())
}

// OutboxEntry is one job the batch lane dead-lettered and whose dead letter
// is not yet published.
type OutboxEntry struct {
	Action, Reason string
	Job            *JobRecord
}

// Outbox returns up to limit outbox entries, oldest first.
func (s *Batches) Outbox(ctx context.Context, limit int) ([]OutboxEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT o.action AS outbox_action, o.reason AS outbox_reason, j.*
		FROM batch_outbox o JOIN LATERAL (SELECT `+jobColumns+` FROM jobs
			WHERE jobs.tenant = o.tenant AND jobs.id = o.job_id) j ON true
		ORDER BY o.created_at, o.tenant, o.job_id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: outbox: %w", err)
	}
	type outboxRow struct {
		OutboxAction string `db:"outbox_action"`
		OutboxReason string `db:"outbox_reason"`
		JobRecord
	}
	recs, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[outboxRow])
	if err != nil {
		return nil, fmt.Errorf("store: outbox: %w", err)
	}
	out := make([]OutboxEntry, len(recs))
	for i, r := range recs {
		job := r.JobRecord
		if job.Metadata == nil {
			job.Metadata = map[string]string{}
		}
		out[i] = OutboxEntry{Action: r.OutboxAction, Reason: r.OutboxReason, Job: &job}
	}
	return out, nil
}

// DeleteOutbox removes the outbox entries of the jobs keys (their dead
// letters are out).
func (s *Batches) DeleteOutbox(ctx context.Context, keys []Key) error {
	tenants, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], ids[i] = k.Tenant, k.ID
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM batch_outbox o USING unnest($1::text[], $2::text[]) AS u(tenant, id)
		WHERE o.tenant = u.tenant AND o.job_id = u.id`, tenants, ids); err != nil {
		return fmt.Errorf("store: delete outbox: %w", err)
	}
	return nil
}

// BatchCost sums the batch lane's cost: what its results cost at batch
// prices against what they would have cost live.
type BatchCost struct {
	Batches, Jobs        int
	CostUSD, LiveCostUSD float64
}

// SavingUSD is LiveCostUSD - CostUSD.
func (c BatchCost) SavingUSD() float64 { return c.LiveCostUSD - c.CostUSD }

// BatchCostSummary sums the costs of the ingested batches created at or
// after since (zero: all).
func (s *Batches) BatchCostSummary(ctx context.Context, since time.Time) (BatchCost, error) {
	var c BatchCost
	err := s.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(b.stored), 0), coalesce(sum(b.cost_usd), 0),
		coalesce(sum(b.live_cost_usd), 0) FROM (SELECT id, cost_usd, live_cost_usd,
			(SELECT count(*) FROM jobs WHERE batch_id = batches.id AND status = 'succeeded') AS stored
		FROM batches WHERE ingested_at IS NOT NULL AND created_at >= $1) b`, since).
		Scan(&c.Batches, &c.Jobs, &c.CostUSD, &c.LiveCostUSD)
	if err != nil {
		return c, fmt.Errorf("store: batch cost summary: %w", err)
	}
	return c, nil
}

// BatchJobCounts counts the jobs of batch id per status.
func (s *Batches) BatchJobCounts(ctx context.Context, id string) (map[llmq.Status]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM jobs WHERE batch_id = $1 GROUP BY status`, id)
	if err != nil {
		return nil, fmt.Errorf("store: batch job counts %q: %w", id, err)
	}
	out := map[llmq.Status]int{}
	var st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[llmq.Status(st)] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: batch job counts %q: %w", id, err)
	}
	return out, nil
}

// WithAdvisoryLock runs fn while holding the session advisory lock name on
// one connection, so that of several processes only one runs fn at a
// time. It returns ran=false without calling fn when another holds it.
func (s *Batches) WithAdvisoryLock(ctx context.Context, name string, fn func(ctx context.Context) error) (ran bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("store: lock %q: %w", name, err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, name).Scan(&got); err != nil {
		return false, fmt.Errorf("store: lock %q: %w", name, err)
	}
	if !got {
		return false, nil
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, name); uerr != nil {
			// A lock we cannot release must not stay on a pooled connection.
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
		}
	}()
	return true, fn(ctx)
}

// BatchJobKeys returns the keys of the jobs of batch id that are in
// status.
func (s *Batches) BatchJobKeys(ctx context.Context, id string, status llmq.Status) ([]Key, error) {
	return s.keys(ctx, fmt.Sprintf("batch job keys %q", id), `SELECT tenant, id FROM jobs WHERE batch_id = $1 AND status = $2 ORDER BY tenant, id`,
		id, string(status))
}
