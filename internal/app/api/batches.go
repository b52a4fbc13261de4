package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/store"
)

// listBatches lists the newest provider batches: GET /v1/batches
// ?open=true &limit=. Batches hold several tenants' jobs: operators only.
// The store lists the newest batches without a cursor, so next_cursor is
// always null.
// batchHandler serves the batch lane's provider batches to operator
// keys.
type batchHandler struct {
	replies
	store BatchStore
	// cancel is Config.CancelBatch; nil: cancelling answers 503.
	cancel func(ctx context.Context, ref string) (*store.BatchRecord, error)
	// retryAfter is the Retry-After of a 503.
	retryAfter time.Duration
}

func (bh *batchHandler) listBatches(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := store.ListLimitDefault
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.ListLimitMax {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "limit",
				Message: fmt.Sprintf("must be an integer from 1 to %d", store.ListLimitMax)})
			return
		}
		limit = n
	}
	open := false
	if s := q.Get("open"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "open", Message: "must be true or false"})
			return
		}
		open = b
	}
	recs, err := bh.store.ListBatches(r.Context(), limit, open)
	if err != nil {
		bh.internalError(w, r, err)
		return
	}
	out := make([]Batch, len(recs))
	for i, b := range recs {
		out[i] = BatchView(b)
	}
	writeJSON(w, http.StatusOK, NewList(out, ""))
}

// batchRef returns the {id} of the path: llmq's batch id or the
// provider's. A path that cannot be one answers 404.
func batchRef(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !llmq.ValidID(id) {
		batchNotFound(w, id)
		return "", false
	}
	return id, true
}

func batchNotFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Field: "id", Message: fmt.Sprintf("no batch %.128q", id)})
}

// getBatch shows one batch with its jobs per status: GET /v1/batches/{id}.
func (bh *batchHandler) getBatch(w http.ResponseWriter, r *http.Request) {
	ref, ok := batchRef(w, r)
	if !ok {
		return
	}
	b, err := bh.store.GetBatch(r.Context(), ref)
	switch {
	case errors.Is(err, store.ErrBatchNotFound):
		batchNotFound(w, ref)
		return
	case err != nil:
		bh.internalError(w, r, err)
		return
	}
	counts, err := bh.store.BatchJobCounts(r.Context(), b.ID)
	if err != nil {
		bh.internalError(w, r, err)
		return
	}
	v := BatchView(b)
	v.JobsByStatus = make(map[string]int, len(counts))
	for st, n := range counts {
		v.JobsByStatus[string(st)] = n
	}
	writeJSON(w, http.StatusOK, v)
}

// cancelBatch asks the provider to cancel a batch: POST
// /v1/batches/{id}/cancel. The batch lane's poller then brings the finished
// results home and sends the other jobs back to the live lane.
func (bh *batchHandler) cancelBatch(w http.ResponseWriter, r *http.Request) {
	ref, ok := batchRef(w, r)
	if !ok {
		return
	}
	if bh.cancel == nil {
		setRetryAfter(w, bh.retryAfter)
		writeError(w, http.StatusServiceUnavailable, Error{Code: CodeUnavailable,
			Message: "this server cannot reach the provider's Batch API"})
		return
	}
	b, err := bh.cancel(r.Context(), ref)
	switch {
	case errors.Is(err, store.ErrBatchNotFound):
		batchNotFound(w, ref)
	case errors.Is(err, batchapi.ErrNotSubmitted), errors.Is(err, batchapi.ErrFinished):
		status := "being submitted"
		if b != nil && b.Status != store.BatchSubmitting {
			status = b.Status
		}
		writeError(w, http.StatusConflict, Error{Code: CodeNotCancellable, Field: "id",
			Message: fmt.Sprintf("batch %q is %s: only a batch the provider is running can be cancelled", ref, status)})
	case err != nil && b != nil:
		// Found, but the provider refused or could not be reached.
		bh.log.Warn("api: cancel batch", slog.String("batch", b.ID), slog.String("error", err.Error()))
		writeError(w, http.StatusBadGateway, Error{Code: CodeUpstream,
			Message: "the provider did not confirm the cancellation: retry later"})
	case err != nil:
		bh.internalError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, BatchView(b))
	}
}
