package store

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Attempts (table job_attempts, migration 0010): a row per upstream call of
// a job, for the job page and the per-model statistics. The paths every call
// takes record them without a round trip of their own (MarkCalling inserts
// the row, the next write carries the answer); only the paths that end or
// hand back a job after a failed call use EndAttempt
// (docs/design/queue-of-record.md#attempts).

// Call is what MarkCalling records of the call it counts.
type Call struct {
	// Model is the model called; "" records the job's requested model.
	Model string
	// Entry names the entry of the model's key pool that made the call;
	// "" for a model without a pool.
	Entry string
	// QuotaWait is how long the job waited for admission (quota,
	// concurrency, pacing) before the call; Backoff how long it waited
	// out a backoff since its last call.
	QuotaWait, Backoff time.Duration
}

// Answer is how one call came back, recorded with the write that follows
// it.
type Answer struct {
	// Attempt is the call's number: the attempts MarkCalling returned.
	Attempt int
	// At is when the answer came (or the call failed).
	At time.Time
	// Status is the HTTP status, 0 when no answer arrived.
	Status int
	// Outcome classifies it: success, rate_limited, retryable, permanent.
	Outcome string
	// ErrorCode is the upstream's or the transport's error code.
	ErrorCode                      string
	PromptTokens, CompletionTokens int
	// RetryAfter is the wait the answer asked for; 0 = none.
	RetryAfter time.Duration
	// LimitRequests and LimitTokens are the limits the answer's
	// x-ratelimit-limit-* headers stated; 0 = not stated.
	LimitRequests, LimitTokens float64
}

// Attempt is one recorded upstream call of a job.
type Attempt struct {
	// Seq numbers the job's calls for good; Attempt is the call's number
	// in the job's current run (a replayed dead letter counts again from
	// 1).
	Seq, Attempt int
	Model        string
	// Entry is the key pool entry that made the call ("" without a pool).
	Entry     string
	StartedAt time.Time
	// QuotaWait and Backoff are the waits before the call.
	QuotaWait, Backoff time.Duration
	// FinishedAt is nil while the call has not answered, or when its
	// holder stopped before recording the answer.
	FinishedAt *time.Time
	Status     int
	// Outcome is "" until the call answered.
	Outcome                        string
	ErrorCode                      string
	PromptTokens, CompletionTokens int
	// RetryAfter is nil when the answer asked for no wait.
	RetryAfter *time.Duration
}

// insertAttemptSQL wraps the fenced UPDATE of MarkCalling (which returns
// tenant, id, attempts, requested_model) so that the same statement
// records the call: $n.. are the model, the quota wait, the backoff (ms)
// and the pool entry.
func insertAttemptSQL(update string, n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	return `WITH j AS (` + update + `), a AS (
	INSERT INTO job_attempts (tenant, job_id, seq, attempt, model, started_at, quota_wait_ms, backoff_ms, entry)
	SELECT j.tenant, j.id, coalesce((SELECT max(seq) FROM job_attempts x WHERE x.tenant = j.tenant AND x.job_id = j.id), 0) + 1,
		j.attempts, coalesce(nullif(` + p(0) + `::text, ''), j.requested_model), $3, ` + p(1) + `, ` + p(2) + `, ` + p(3) + ` FROM j
) SELECT attempts FROM j`
}

// answerStmt records a's answer on the job k's latest call, when that is
// call a.Attempt and has no answer yet (a second record of the same answer,
// by a write retried after a database error, changes nothing).
func answerStmt(k Key, a *Answer) stmt {
	retryAfter, limReq, limTok := a.nullable()
	return stmt{`UPDATE job_attempts SET finished_at = $4, status = $5, outcome = $6, error_code = $7,
		prompt_tokens = $8, completion_tokens = $9, retry_after_ms = $10, limit_requests = $11, limit_tokens = $12
	WHERE tenant = $1 AND job_id = $2 AND attempt = $3 AND finished_at IS NULL
		AND seq = (SELECT max(seq) FROM job_attempts WHERE tenant = $1 AND job_id = $2)`,
		[]any{k.Tenant, k.ID, a.Attempt, a.At.UTC(), a.Status, a.Outcome, a.ErrorCode, a.PromptTokens,
			a.CompletionTokens, retryAfter, limReq, limTok}}
}

// answersCTE is the CTE "ans" of a merged statement (rowKind) that records
// the answers of its ops, like answerStmt does one, from the arrays of
// answerArrays at $n.. (the ops without an answer are not in them). Every
// sub-statement of a statement sees the same snapshot, so an answer is
// recorded on the call it answers even when the statement also inserts the
// job's next call (MarkCalling after a fallback).
func answersCTE(n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	return `ans AS (UPDATE job_attempts x SET finished_at = a.at, status = a.status, outcome = a.outcome,
		error_code = a.error_code, prompt_tokens = a.prompt_tokens, completion_tokens = a.completion_tokens,
		retry_after_ms = a.retry_after_ms, limit_requests = a.limit_requests, limit_tokens = a.limit_tokens
	FROM unnest(` + p(0) + `::text[], ` + p(1) + `::text[], ` + p(2) + `::int[], ` + p(3) + `::timestamptz[], ` + p(4) + `::int[], ` +
		p(5) + `::text[], ` + p(6) + `::text[], ` + p(7) + `::int[], ` + p(8) + `::int[], ` + p(9) + `::bigint[], ` +
		p(10) + `::float8[], ` + p(11) + `::float8[]) AS a(tenant, job_id, attempt, at, status, outcome, error_code,
		prompt_tokens, completion_tokens, retry_after_ms, limit_requests, limit_tokens)
	WHERE x.tenant = a.tenant AND x.job_id = a.job_id AND x.attempt = a.attempt AND x.finished_at IS NULL
		AND x.seq = (SELECT max(seq) FROM job_attempts y WHERE y.tenant = a.tenant AND y.job_id = a.job_id))`
}

// withAnswers adds answersCTE(n) to sql, a statement that begins with a
// WITH clause.
func withAnswers(sql string, n int) string {
	rest, ok := strings.CutPrefix(sql, "WITH ")
	if !ok {
		panic("store: withAnswers needs a statement that begins with WITH")
	}
	return "WITH " + answersCTE(n) + ",\n" + rest
}

// answerArrays are the arguments of answersCTE: the answers of the ops
// that have one, a column per array.
func answerArrays(ops []*op) []any {
	var (
		tenants, ids, outcomes, codes []string
		attempts, statuses, pt, ct    []int
		ats                           []time.Time
		retryAfter                    []*int64
		limReq, limTok                []*float64
	)
	for _, o := range ops {
		a := o.row.answer
		if a == nil {
			continue
		}
		ra, lr, lt := a.nullable()
		tenants, ids, attempts = append(tenants, o.row.key.Tenant), append(ids, o.row.key.ID), append(attempts, a.Attempt)
		ats, statuses, outcomes, codes = append(ats, a.At.UTC()), append(statuses, a.Status), append(outcomes, a.Outcome),
			append(codes, a.ErrorCode)
		pt, ct = append(pt, a.PromptTokens), append(ct, a.CompletionTokens)
		retryAfter, limReq, limTok = append(retryAfter, ra), append(limReq, lr), append(limTok, lt)
	}
	return []any{tenants, ids, attempts, ats, statuses, outcomes, codes, pt, ct, retryAfter, limReq, limTok}
}

// nullable returns the columns of a that are NULL when not known: the
// Retry-After in milliseconds and the limits the answer's headers stated.
func (a *Answer) nullable() (retryAfterMs *int64, limitRequests, limitTokens *float64) {
	if a.RetryAfter > 0 {
		ms := a.RetryAfter.Milliseconds()
		retryAfterMs = &ms
	}
	if a.LimitRequests > 0 {
		limitRequests = &a.LimitRequests
	}
	if a.LimitTokens > 0 {
		limitTokens = &a.LimitTokens
	}
	return retryAfterMs, limitRequests, limitTokens
}

// withAnswer prepends the record of a (when set) to an op's statements.
func withAnswer(k Key, a *Answer, s stmt) []stmt {
	if a == nil {
		return []stmt{s}
	}
	return []stmt{answerStmt(k, a), s}
}

// EndAttempt records a's answer on job k's call, for the paths where no
// write of the job follows the answer that could carry it.
func (s *Queue) EndAttempt(ctx context.Context, k Key, a Answer) error {
	st := answerStmt(k, &a)
	if _, err := s.pool.Exec(ctx, st.sql, st.args...); err != nil {
		return dataError("end attempt "+strconv.Quote(k.String()), err)
	}
	return nil
}

// Attempts returns the recorded calls of tenant's job id, in order.
func (s *Jobs) Attempts(ctx context.Context, tenant, id string) ([]Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, attempt, model, entry, started_at, quota_wait_ms, backoff_ms, finished_at,
		status, outcome, error_code, prompt_tokens, completion_tokens, retry_after_ms
	FROM job_attempts WHERE tenant = $1 AND job_id = $2 ORDER BY seq`, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("store: attempts %q: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var wait, backoff int64
		var retryAfter *int64
		err := r.Scan(&a.Seq, &a.Attempt, &a.Model, &a.Entry, &a.StartedAt, &wait, &backoff, &a.FinishedAt, &a.Status,
			&a.Outcome, &a.ErrorCode, &a.PromptTokens, &a.CompletionTokens, &retryAfter)
		a.StartedAt = a.StartedAt.UTC()
		if a.FinishedAt != nil {
			t := a.FinishedAt.UTC()
			a.FinishedAt = &t
		}
		a.QuotaWait, a.Backoff = time.Duration(wait)*time.Millisecond, time.Duration(backoff)*time.Millisecond
		if retryAfter != nil {
			d := time.Duration(*retryAfter) * time.Millisecond
			a.RetryAfter = &d
		}
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: attempts %q: %w", id, err)
	}
	return out, nil
}

// callOpenFor is how long a call without an answer counts as in flight:
// longer than any upstream timeout. An older one is a call whose holder
// stopped before recording the answer.
const callOpenFor = 10 * time.Minute

// ModelMinute is one model's calls that started in one minute.
type ModelMinute struct {
	Minute time.Time
	// Requests counts the calls; RateLimited those answered 429; Failed
	// the other calls that did not succeed (5xx, timeouts, 4xx).
	Requests, RateLimited, Failed int64
	// Tokens are the tokens the answers counted (prompt + completion).
	Tokens int64
	// QuotaWaitMean, QuotaWaitP50 and QuotaWaitP95 are the waits for
	// admission before the calls (the percentiles to the bucket of
	// waitBounds, capped at the minute's longest wait).
	QuotaWaitMean, QuotaWaitP50, QuotaWaitP95 time.Duration
	// Concurrency is the mean number of calls in flight over the minute:
	// the time the minute's calls spent in flight, over a minute.
	Concurrency float64
}

// ModelCalls is one model's calls since a time.
type ModelCalls struct {
	Model string
	// InFlight counts the calls not answered yet.
	InFlight int64
	// LimitRequests and LimitTokens are the largest limits the answers
	// of the window stated (x-ratelimit-limit-*); 0 = none did.
	LimitRequests, LimitTokens float64
	// Minutes are the minutes with calls, in order.
	Minutes []ModelMinute
}

// waitBounds are the bounds (ms) of the buckets the waits for admission are
// counted in for their percentiles, in 1-2-5 steps: bucket 0 holds waits
// under 1 ms, bucket i those from waitBounds[i-1] up to waitBounds[i].
// Exact percentiles (percentile_cont) sort an hour of calls at every
// read; counting buckets is a hash aggregate (BenchmarkModelStats, an hour
// of 100,000 calls: 175-210 ms a read instead of 600-1,090 ms, on a loaded
// 2-core machine), and a percentile is then the upper bound of its bucket,
// capped at the minute's longest wait.
var waitBounds = []int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000,
	200_000, 500_000}

// modelMinutesSQL reads the calls that started since $1 in one pass, a
// row per model, minute and wait bucket ($4, waitBounds): the counts, the
// waits, the time in flight ($2 is now; an unanswered call counts until
// now, or $3 seconds at most), the calls open and the limits the answers
// stated. scope narrows the tenants ("AND tenant = $5": a condition of its
// own, not an OR with an empty $5, which a generic plan could not take to
// job_attempts_tenant_started_idx).
func modelMinutesSQL(scope string) string {
	return `SELECT model, date_trunc('minute', started_at) AS minute, width_bucket(quota_wait_ms, $4::bigint[]),
	count(*), count(*) FILTER (WHERE status = 429),
	count(*) FILTER (WHERE outcome <> '' AND outcome <> 'success' AND status <> 429),
	coalesce(sum(prompt_tokens + completion_tokens), 0), sum(quota_wait_ms), max(quota_wait_ms),
	coalesce(sum(extract(epoch FROM least(coalesce(finished_at, $2::timestamptz),
		started_at + $3::float8 * interval '1 second') - started_at)), 0)::float8,
	count(*) FILTER (WHERE finished_at IS NULL AND started_at > $2::timestamptz - $3::float8 * interval '1 second'),
	coalesce(max(limit_requests), 0), coalesce(max(limit_tokens), 0)
FROM job_attempts WHERE started_at >= $1 ` + scope + `
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`
}

// modelMinutesArgs are modelMinutesSQL's scope and arguments: tenant ""
// reads every tenant's calls.
func modelMinutesArgs(tenant string, since, now time.Time) (string, []any) {
	args := []any{since.UTC(), now, callOpenFor.Seconds(), waitBounds}
	if tenant == "" {
		return "", args
	}
	return "AND tenant = $5", append(args, tenant)
}

// minuteBuilder folds the bucket rows of one model's minute.
type minuteBuilder struct {
	m               ModelMinute
	waitSum, maxMS  int64
	inFlightSeconds float64
	buckets         []bucketCount
}

type bucketCount struct {
	bucket int
	n      int64
}

// percentile is the nearest-rank p-th percentile of the minute's waits,
// to the bucket.
func (b *minuteBuilder) percentile(p float64) time.Duration {
	rank := int64(math.Ceil(p * float64(b.m.Requests)))
	var seen int64
	for _, bc := range b.buckets {
		seen += bc.n
		if seen >= max(rank, 1) {
			if bc.bucket == 0 {
				return 0
			}
			upper := b.maxMS
			if bc.bucket < len(waitBounds) {
				upper = min(waitBounds[bc.bucket], b.maxMS)
			}
			return time.Duration(upper) * time.Millisecond
		}
	}
	return time.Duration(b.maxMS) * time.Millisecond
}

func (b *minuteBuilder) done() ModelMinute {
	m := b.m
	m.QuotaWaitMean = msDuration(float64(b.waitSum) / float64(m.Requests))
	m.QuotaWaitP50, m.QuotaWaitP95 = b.percentile(0.5), b.percentile(0.95)
	m.Concurrency = b.inFlightSeconds / 60
	return m
}

// ModelStats returns each model's calls that started since since, per
// minute, with the calls in flight and the limits the answers stated;
// tenant "" reads every tenant's calls. Models by name. The percentiles of the waits are to the bucket
// (waitBounds).
func (s *Jobs) ModelStats(ctx context.Context, tenant string, since time.Time) ([]ModelCalls, error) {
	scope, args := modelMinutesArgs(tenant, since, s.clock())
	rows, err := s.pool.Query(ctx, modelMinutesSQL(scope), args...)
	if err != nil {
		return nil, fmt.Errorf("store: model stats: %w", err)
	}
	var (
		out    []ModelCalls
		cur    *minuteBuilder
		model  string
		minute time.Time
		bucket int
		r      struct {
			n, limited, failed, tokens, waitSum, maxMS, open int64
			inFlightSeconds, limitReqs, limitTokens          float64
		}
	)
	flush := func() {
		if cur != nil {
			mc := &out[len(out)-1]
			mc.Minutes = append(mc.Minutes, cur.done())
			cur = nil
		}
	}
	if _, err := pgx.ForEachRow(rows, []any{&model, &minute, &bucket, &r.n, &r.limited, &r.failed, &r.tokens,
		&r.waitSum, &r.maxMS, &r.inFlightSeconds, &r.open, &r.limitReqs, &r.limitTokens}, func() error {
		minute = minute.UTC()
		if len(out) == 0 || out[len(out)-1].Model != model {
			flush()
			out = append(out, ModelCalls{Model: model})
		}
		if cur != nil && !cur.m.Minute.Equal(minute) {
			flush()
		}
		if cur == nil {
			cur = &minuteBuilder{m: ModelMinute{Minute: minute}}
		}
		mc := &out[len(out)-1]
		cur.m.Requests += r.n
		cur.m.RateLimited += r.limited
		cur.m.Failed += r.failed
		cur.m.Tokens += r.tokens
		cur.waitSum += r.waitSum
		cur.maxMS = max(cur.maxMS, r.maxMS)
		cur.inFlightSeconds += r.inFlightSeconds
		cur.buckets = append(cur.buckets, bucketCount{bucket: bucket, n: r.n})
		mc.InFlight += r.open
		if r.limitReqs > 0 {
			mc.LimitRequests = max(mc.LimitRequests, r.limitReqs)
		}
		if r.limitTokens > 0 {
			mc.LimitTokens = max(mc.LimitTokens, r.limitTokens)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: model stats: %w", err)
	}
	flush()
	return out, nil
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// CallSpan is the time from the first call's start to the last job's end
// (0 without either): a benchmark's run, in a database of its own.
func (s *Jobs) CallSpan(ctx context.Context) (time.Duration, error) {
	var span float64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM
		(SELECT max(finished_at) FROM jobs) - (SELECT min(started_at) FROM job_attempts)), 0)::float8`).Scan(&span); err != nil {
		return 0, fmt.Errorf("store: call span: %w", err)
	}
	return time.Duration(span * float64(time.Second)), nil
}

// TimesToFirstCall reads, for each job called at least once, the time from
// its record to its first call's start (a benchmark's run): of every job,
// and of the warm ones, recorded after the first call's answer.
func (s *Jobs) TimesToFirstCall(ctx context.Context) (all, warm []time.Duration, err error) {
	rows, err := s.pool.Query(ctx, `SELECT extract(epoch FROM min(a.started_at) - j.created_at)::float8,
		coalesce(j.created_at > (SELECT min(finished_at) FROM job_attempts), false)
		FROM jobs j JOIN job_attempts a ON a.tenant = j.tenant AND a.job_id = j.id GROUP BY j.tenant, j.id, j.created_at`)
	if err != nil {
		return nil, nil, fmt.Errorf("store: times to first call: %w", err)
	}
	var (
		secs  float64
		after bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&secs, &after}, func() error {
		d := time.Duration(secs * float64(time.Second))
		all = append(all, d)
		if after {
			warm = append(warm, d)
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("store: times to first call: %w", err)
	}
	return all, warm, nil
}
