package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Streams is the chunks of streamed calls (table job_chunks): the worker
// appends them as the provider sends them, the API reads them as they land.
type Streams struct{ *base }

// Streamed gateway calls (docs/design/gateway.md#streaming): the worker
// appends each call's chunks to job_chunks (migration 0026) as the
// provider sends them, announcing them on JobChunkChannel in the same
// statement; the API that answers the caller reads them past the last it
// sent, and drops them when the call ends. A caller that leaves asks the
// worker to cut the call (CancelStream), which the next append reports.

// JobChunkChannel is the Postgres notification channel on which each
// append of a job's chunks announces the job's key (tenant/id).
const JobChunkChannel = "llmq_job_chunk"

// Chunk is one chunk of a streamed call: its place in the stream (from 1)
// and the provider's JSON, as sent.
type Chunk struct {
	Seq  int
	Data []byte
}

// AppendChunks records the chunks of job k's stream, numbered from first,
// and announces them (none: only asks). When the job's caller left
// (CancelStream) it
// records nothing, deletes what the stream left instead, and reports
// cancelled: the call should stop.
func (s *Streams) AppendChunks(ctx context.Context, k Key, first int, data [][]byte) (cancelled bool, err error) {
	seqs := make([]int32, len(data))
	texts := make([]string, len(data))
	for i, d := range data {
		seqs[i], texts[i] = int32(first+i), string(d)
	}
	err = s.pool.QueryRow(ctx, `WITH gone AS (
		DELETE FROM job_stream_cancels WHERE tenant = $1 AND job_id = $2 RETURNING 1
	), dropped AS (
		DELETE FROM job_chunks WHERE tenant = $1 AND job_id = $2 AND EXISTS (SELECT 1 FROM gone)
	), added AS (
		INSERT INTO job_chunks (tenant, job_id, seq, data)
		SELECT $1, $2, u.seq, u.data FROM unnest($3::integer[], $4::text[]) AS u(seq, data)
		WHERE NOT EXISTS (SELECT 1 FROM gone)
		ON CONFLICT DO NOTHING
	)
	SELECT EXISTS (SELECT 1 FROM gone),
		CASE WHEN cardinality($3::integer[]) > 0 THEN pg_notify('`+JobChunkChannel+`', $1 || '/' || $2) END`,
		k.Tenant, k.ID, seqs, texts).Scan(&cancelled, nil)
	if err != nil {
		return false, fmt.Errorf("store: append chunks of %s: %w", k, err)
	}
	return cancelled, nil
}

// Chunks returns job k's chunks numbered after after, in order.
func (s *Streams) Chunks(ctx context.Context, k Key, after int) ([]Chunk, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, data FROM job_chunks
		WHERE tenant = $1 AND job_id = $2 AND seq > $3 ORDER BY seq`, k.Tenant, k.ID, after)
	if err != nil {
		return nil, fmt.Errorf("store: chunks of %s: %w", k, err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Chunk, error) {
		var c Chunk
		var d string
		err := r.Scan(&c.Seq, &d)
		c.Data = []byte(d)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: chunks of %s: %w", k, err)
	}
	return cs, nil
}

// CancelStream records that job k's caller left: the worker streaming it
// cuts the call at its next append, which deletes the stream's rows.
func (s *Streams) CancelStream(ctx context.Context, k Key) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO job_stream_cancels (tenant, job_id) VALUES ($1, $2)
		ON CONFLICT DO NOTHING`, k.Tenant, k.ID); err != nil {
		return fmt.Errorf("store: cancel the stream of %s: %w", k, err)
	}
	return nil
}

// DropStream deletes job k's chunks once its caller read them.
func (s *Streams) DropStream(ctx context.Context, k Key) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM job_chunks WHERE tenant = $1 AND job_id = $2`, k.Tenant, k.ID); err != nil {
		return fmt.Errorf("store: drop the stream of %s: %w", k, err)
	}
	return nil
}

// ListenJobChunks is ListenJobsDone for JobChunkChannel: appended is
// called with the key of every job whose stream grew.
func (s *Streams) ListenJobChunks(ctx context.Context, listening func(), appended func(Key)) error {
	return s.listen(ctx, JobChunkChannel, listening, func(payload string) {
		if k, ok := ParseKey(payload); ok {
			appended(k)
		}
	})
}
