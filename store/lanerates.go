package store

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// LaneRates is what the workers' lanes run at (table lane_rates), written
// every second by each worker, and the predictions of a call's completion
// the API makes from them.
type LaneRates struct{ *base }

// LaneRateTTL is how long a lane's row counts after it was written: the
// workers rewrite theirs every second, so an older one is from a worker
// that stopped.
const LaneRateTTL = 5 * time.Second

// LaneRate is what one worker's lane of a model runs at (table
// lane_rates), for the API's completion prediction (PredictCompletion).
type LaneRate struct {
	// Model is the lane's model, Entry its pool entry ("" without a pool).
	Model, Entry string
	// RequestsPerMin and TokensPerMin are what the lane's limits let
	// through (its share of the provider's quota); 0 = not known yet.
	RequestsPerMin, TokensPerMin float64
	// Concurrency is the lane's concurrency limit, InFlight its calls
	// running now.
	Concurrency, InFlight int
	// Latency is the mean duration of the lane's recent calls (0: none).
	Latency time.Duration
}

// SetLaneRates records worker's lanes as they run now.
func (s *LaneRates) SetLaneRates(ctx context.Context, worker string, rates []LaneRate) error {
	if len(rates) == 0 {
		return nil
	}
	n := len(rates)
	models, entries := make([]string, n), make([]string, n)
	rpm, tpm, lat := make([]float64, n), make([]float64, n), make([]float64, n)
	conc, inflight := make([]int32, n), make([]int32, n)
	for i, r := range rates {
		models[i], entries[i] = r.Model, r.Entry
		rpm[i], tpm[i] = max(0, r.RequestsPerMin), max(0, r.TokensPerMin)
		conc[i], inflight[i] = int32(min(max(r.Concurrency, 0), math.MaxInt32)), int32(min(max(r.InFlight, 0), math.MaxInt32))
		lat[i] = float64(max(r.Latency, 0)) / float64(time.Millisecond)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO lane_rates (model, entry, worker, requests_per_min, tokens_per_min,
			concurrency, in_flight, latency_ms, updated_at)
		SELECT m, e, $1, r, t, c, f, l, $9
		FROM unnest($2::text[], $3::text[], $4::float8[], $5::float8[], $6::int[], $7::int[], $8::float8[]) AS x(m, e, r, t, c, f, l)
		ON CONFLICT (model, entry, worker) DO UPDATE SET requests_per_min = excluded.requests_per_min,
			tokens_per_min = excluded.tokens_per_min, concurrency = excluded.concurrency,
			in_flight = excluded.in_flight, latency_ms = excluded.latency_ms, updated_at = excluded.updated_at`,
		worker, models, entries, rpm, tpm, conc, inflight, lat, s.clock())
	if err != nil {
		return fmt.Errorf("store: set lane rates: %w", err)
	}
	return nil
}

// Prediction is when a call of a model would complete, from the model's
// lanes and the work ahead of it (PredictCompletion).
type Prediction struct {
	// Known is false while no live lane of the model knows its rate
	// (requests or tokens per minute): Wait and the jobs' counts are then
	// 0.
	Known bool
	// Wait is the predicted time from now to the call's completion.
	Wait time.Duration
	// Ahead is the model's queued jobs claimed before the call (Predict),
	// AheadTokens their estimated tokens; InFlight its jobs running.
	Ahead, AheadTokens, InFlight int64
	// The model's lanes summed over the live workers: their rates and
	// concurrency, 0 while a lane's slow start grows it (the provider's
	// calls at a time not known yet: Wait then counts no wait for a slot,
	// a floor). Latency is a job's median time from its first call to its
	// end (retries included) over the model's last recentJobs succeeded in
	// recentWindow, else the lanes' mean call latency.
	RequestsPerMin, TokensPerMin float64
	Concurrency                  int64
	Latency                      time.Duration
	// CallLatency is the lanes' mean call latency (their rows'): how long
	// a call ahead holds its slot, without llmq's writes around it that a
	// job's Latency counts.
	CallLatency time.Duration
	// Overhead is llmq's own time from a job's record to its first call,
	// its wait for the lane's admission left out (the slot and rate waits
	// count that): the median of those recent jobs'.
	Overhead time.Duration
	// RecentRequests and RecentTokens are the model's upstream calls of
	// the last minute and their settled tokens: what the lanes' one-minute
	// buckets have spent, the rest of which lets jobs ahead go at once.
	RecentRequests, RecentTokens int64
}

// The recent jobs Prediction's Latency and Overhead are measured over.
const (
	recentJobs   = 20
	recentWindow = 5 * time.Minute
)

// predictBound bounds the jobs ahead that PredictCompletion counts: past
// it the prediction is a floor, and passes any deadline a call may have.
const predictBound = 100_000

// PredictCompletion predicts when a call of model at priority, of tokens
// estimated tokens, recorded now would complete, behind every tenant's
// queued jobs at its priority or higher: Predict without a tenant.
func (s *LaneRates) PredictCompletion(ctx context.Context, model string, priority llmq.Priority, tokens int) (Prediction, error) {
	return s.Predict(ctx, PredictRequest{Model: model, Priority: priority, Tokens: tokens})
}

// PredictRequest is the call Predict predicts.
type PredictRequest struct {
	// Model, Priority and Tokens (estimated) are the call's.
	Model    string
	Priority llmq.Priority
	Tokens   int
	// Tenant is the call's; "": the work ahead is every tenant's queued
	// jobs at Priority or higher, as if one tenant.
	Tenant string
	// Weight is a tenant's weight in the claim's fair share; nil: every
	// tenant llmq.WeightDefault.
	Weight func(tenant string) float64
}

// Predict predicts when req's call, recorded now, would complete: the
// jobs ahead of it in claim order pass the lanes' rates, and they and the
// calls in flight hold their concurrency (a floor while a slow start grows
// it); then the call takes llmq's overhead and a job's latency. Ahead are
// its tenant's jobs at its priority or higher, and of each other tenant
// with queued jobs what the fair share gives it meanwhile: the tokens of
// the tenant's turn (its jobs ahead and the call) times the other's weight
// over the tenant's, at most the other's queued tokens (every priority:
// between tenants the claim goes by turns). docs/design/gateway.md.
func (s *LaneRates) Predict(ctx context.Context, req PredictRequest) (Prediction, error) {
	model, tokens := req.Model, req.Tokens
	now := s.clock()
	// The lanes first (a primary-key range): with no rate known the jobs
	// are not counted, so an unknown prediction costs one cheap read.
	rows, err := s.pool.Query(ctx, `SELECT requests_per_min, tokens_per_min, concurrency, latency_ms
		FROM lane_rates WHERE model = $1 AND updated_at > $2 AND updated_at <= $3`,
		model, now.Add(-LaneRateTTL), now.Add(LaneRateTTL))
	if err != nil {
		return Prediction{}, fmt.Errorf("store: predict completion of %q: %w", model, err)
	}
	lanes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LaneRate, error) {
		var l LaneRate
		var conc int32
		var latMS float64
		err := r.Scan(&l.RequestsPerMin, &l.TokensPerMin, &conc, &latMS)
		l.Concurrency, l.Latency = int(conc), time.Duration(latMS*float64(time.Millisecond))
		return l, err
	})
	if err != nil {
		return Prediction{}, fmt.Errorf("store: predict completion of %q: %w", model, err)
	}
	var p Prediction
	if p.addLanes(lanes); !p.Known {
		return p, nil
	}
	if err := s.predictAhead(ctx, req, &p); err != nil {
		return Prediction{}, err
	}
	var created, started, finished []time.Time
	var waitMS []int64
	err = s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM jobs WHERE status `+leasedIn+` AND requested_model = $1),
		a.n, a.tokens, r.created, r.started, r.finished, r.wait
		FROM (SELECT coalesce(array_agg(created_at), '{}') AS created, coalesce(array_agg(started_at), '{}') AS started,
				coalesce(array_agg(finished_at), '{}') AS finished, coalesce(array_agg(wait), '{}') AS wait
			FROM (SELECT j.created_at, j.started_at, j.finished_at, coalesce((SELECT x.quota_wait_ms FROM job_attempts x
					WHERE x.tenant = j.tenant AND x.job_id = j.id AND x.seq = 1), 0) AS wait
				FROM jobs j WHERE j.finished_at IS NOT NULL AND j.finished_at > $2
				AND j.requested_model = $1 AND j.status = 'succeeded' AND j.started_at IS NOT NULL
				ORDER BY j.finished_at DESC LIMIT $3) f) r,
			(SELECT count(*) AS n, coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint AS tokens
				FROM job_attempts WHERE started_at > $4 AND model = $1) a`,
		model, now.Add(-recentWindow), recentJobs, now.Add(-time.Minute)).
		Scan(&p.InFlight, &p.RecentRequests, &p.RecentTokens, &created, &started, &finished, &waitMS)
	if err != nil {
		return Prediction{}, fmt.Errorf("store: predict completion of %q: %w", model, err)
	}
	recent := make([]recentJob, len(created))
	for i := range recent {
		recent[i] = recentJob{created: created[i], started: started[i], finished: finished[i],
			laneWait: time.Duration(waitMS[i]) * time.Millisecond}
	}
	p.learn(recent)
	p.Wait = p.predict(tokens)
	return p, nil
}

// addLanes sets p's rates, concurrency and call latency from the model's
// live lane rows: the rates and the concurrency summed, the latency their
// mean (and p's Latency until learn). The concurrency is 0 (not known)
// when a lane's is: its slow start grows it, and the sum of the others
// would be short of what the model runs at.
func (p *Prediction) addLanes(lanes []LaneRate) {
	var latency time.Duration
	var timed int
	known := len(lanes) > 0
	for _, l := range lanes {
		p.RequestsPerMin += l.RequestsPerMin
		p.TokensPerMin += l.TokensPerMin
		p.Concurrency += int64(l.Concurrency)
		known = known && l.Concurrency > 0
		if l.Latency > 0 {
			latency += l.Latency
			timed++
		}
	}
	if !known {
		p.Concurrency = 0
	}
	if timed > 0 {
		p.CallLatency = latency / time.Duration(timed)
		p.Latency = p.CallLatency
	}
	p.Known = p.RequestsPerMin > 0 || p.TokensPerMin > 0
}

// recentJob is one of a model's recently succeeded jobs: when it was
// recorded, its first call started, it finished, and its first call's wait
// for the lane's admission.
type recentJob struct {
	created, started, finished time.Time
	laneWait                   time.Duration
}

// learn sets p's Latency (when recent jobs took any) and Overhead from
// recent: the median of their times from first call to end, and of their
// times from record to first call less their wait in the lane. Medians, as
// a job retried after a backoff, or one that waited behind a burst, says
// little of the next.
func (p *Prediction) learn(recent []recentJob) {
	if len(recent) == 0 {
		return
	}
	service, overhead := make([]time.Duration, len(recent)), make([]time.Duration, len(recent))
	for i, j := range recent {
		service[i] = j.finished.Sub(j.started)
		overhead[i] = max(0, j.started.Sub(j.created)-j.laneWait)
	}
	if l := median(service); l > 0 {
		p.Latency = l
	}
	p.Overhead = median(overhead)
}

// median is the median of ds, not empty (the mean of the middle two of an
// even count); it sorts ds.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	n := len(ds)
	if n%2 == 1 {
		return ds[n/2]
	}
	return (ds[n/2-1] + ds[n/2]) / 2
}

// predictAhead sets p's Ahead and AheadTokens: req's work ahead in claim
// order (Predict), from one read of the model's queued jobs by tenant.
func (s *LaneRates) predictAhead(ctx context.Context, req PredictRequest, p *Prediction) error {
	rows, err := s.pool.Query(ctx, `SELECT tenant,
			count(*) FILTER (WHERE priority = ANY($2)), coalesce(sum(tok) FILTER (WHERE priority = ANY($2)), 0)::bigint,
			count(*), coalesce(sum(tok), 0)::bigint
		FROM (SELECT tenant, priority, CASE WHEN est_prompt_tokens + est_output_tokens > 0
				THEN est_prompt_tokens + est_output_tokens ELSE $4 END AS tok
			FROM jobs WHERE status = 'queued' AND requested_model = $1 AND lane <> 'batch' LIMIT $3) q
		GROUP BY tenant`, req.Model, atOrAbove(req.Priority), predictBound, max(req.Tokens, 0))
	if err != nil {
		return fmt.Errorf("store: predict completion of %q: %w", req.Model, err)
	}
	type queued struct {
		tenant                        string
		ahead, aheadTokens, n, tokens int64
	}
	qs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queued, error) {
		var q queued
		return q, r.Scan(&q.tenant, &q.ahead, &q.aheadTokens, &q.n, &q.tokens)
	})
	if err != nil {
		return fmt.Errorf("store: predict completion of %q: %w", req.Model, err)
	}
	weight := req.Weight
	if weight == nil {
		weight = func(string) float64 { return llmq.WeightDefault }
	}
	if req.Tenant == "" {
		for _, q := range qs {
			p.Ahead += q.ahead
			p.AheadTokens += q.aheadTokens
		}
		return nil
	}
	// The tenant's turn first: its own jobs ahead and the call.
	for _, q := range qs {
		if q.tenant == req.Tenant {
			p.Ahead, p.AheadTokens = q.ahead, q.aheadTokens
		}
	}
	turn := float64(p.AheadTokens+int64(max(req.Tokens, 0))) / weight(req.Tenant)
	for _, q := range qs {
		if q.tenant == req.Tenant || q.tokens <= 0 {
			continue
		}
		share := min(float64(q.tokens), turn*weight(q.tenant))
		p.AheadTokens += int64(math.Round(share))
		p.Ahead += int64(math.Ceil(float64(q.n) * share / float64(q.tokens)))
	}
	return nil
}

// predict is the wait of a call of tokens behind p's work: the longer of
// the rate's (the queued jobs' requests and tokens past what the lanes'
// buckets hold, at the lanes' rates) and the concurrency's (every call
// ahead and in flight, Concurrency at a time, each holding its slot the
// lanes' call latency; none while the concurrency is not known), plus the
// call's own: a job's latency and llmq's overhead.
func (p Prediction) predict(tokens int) time.Duration {
	// A one-minute bucket lets through at once what the last minute's
	// calls left of it; the rest waits for its refill.
	var minutes float64
	if p.RequestsPerMin > 0 {
		left := max(0, p.RequestsPerMin-float64(p.RecentRequests))
		minutes = max(0, float64(p.Ahead)-left) / p.RequestsPerMin
	}
	if p.TokensPerMin > 0 {
		left := max(0, p.TokensPerMin-float64(p.RecentTokens))
		minutes = max(minutes, max(0, float64(p.AheadTokens+int64(max(tokens, 0)))-left)/p.TokensPerMin)
	}
	wait := minutes * float64(time.Minute)
	if slot := cmp.Or(p.CallLatency, p.Latency); p.Concurrency > 0 && slot > 0 {
		over := float64(p.Ahead + p.InFlight + 1 - p.Concurrency)
		wait = max(wait, over/float64(p.Concurrency)*float64(slot))
	}
	wait += float64(p.Latency + p.Overhead)
	if wait > float64(math.MaxInt64/2) {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(wait)
}

// atOrAbove lists the priorities claimed before or with priority.
func atOrAbove(priority llmq.Priority) []string {
	switch priority {
	case llmq.PriorityHigh:
		return []string{"high"}
	case llmq.PriorityLow:
		return []string{"high", "normal", "low"}
	}
	return []string{"high", "normal"}
}

// PredictJob is PredictCompletion for job j, its tokens counted roughly
// (one per 4 bytes of body, plus its output allowance): the tokenizer's
// count would cost the API more than the prediction's error is worth.
func (s *LaneRates) PredictJob(ctx context.Context, j *llmq.Job) (Prediction, error) {
	return s.JobPredictor(nil)(ctx, j)
}

// JobPredictor is PredictJob with tenants' weights and priority caps
// (every tenant weighs llmq.WeightDefault in nil), as the claim orders
// the jobs.
func (s *LaneRates) JobPredictor(tenants llmq.Tenants) func(ctx context.Context, j *llmq.Job) (Prediction, error) {
	return func(ctx context.Context, j *llmq.Job) (Prediction, error) {
		return s.Predict(ctx, PredictRequest{Model: j.Model(), Priority: tenants.Priority(j), Tokens: len(j.Body)/4 + j.MaxOutputTokens(),
			Tenant: j.Tenant, Weight: tenants.Weight})
	}
}
