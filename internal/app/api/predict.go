package api

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/llmq/llmq/producer"
)

// predictionText tells what a deadline refusal's prediction was made of:
// the model lane's figures (docs/design/gateway.md), or the queue's drain
// when the producer runs without a predictor.
func predictionText(bp *producer.ErrBackpressure, qi queueInfo) string {
	if p := bp.Prediction; p != nil {
		floor := ""
		if p.Concurrency == 0 {
			floor = ", at least: the model's calls at a time not known yet"
		}
		return fmt.Sprintf("completion (%.0f s: %d jobs ahead on the model and %d in flight, at %.0f requests and %.0f tokens a minute%s)",
			p.Wait.Seconds(), p.Ahead, p.InFlight, p.RequestsPerMin, p.TokensPerMin, floor)
	}
	_, drain, _, _ := bp.Queue.Own()
	return fmt.Sprintf("wait (%.0f s for %d queued jobs)", drain.Seconds(), qi.QueueDepth)
}

// logDeadline logs a deadline refusal with its prediction, so that a
// refusal can be checked against what the lane did.
func (ad *admission) logDeadline(r *http.Request, bp *producer.ErrBackpressure, qi queueInfo) {
	attrs := []any{slog.String("path", r.URL.Path), slog.String("job_id", bp.JobID),
		slog.Duration("retry_after", bp.RetryAfter)}
	if p := bp.Prediction; p != nil {
		attrs = append(attrs, slog.Duration("predicted", p.Wait), slog.Int64("ahead", p.Ahead),
			slog.Int64("ahead_tokens", p.AheadTokens), slog.Int64("in_flight", p.InFlight),
			slog.Float64("rpm", p.RequestsPerMin), slog.Float64("tpm", p.TokensPerMin),
			slog.Int64("concurrency", p.Concurrency), slog.Duration("latency", p.Latency),
			slog.Duration("call_latency", p.CallLatency), slog.Duration("overhead", p.Overhead))
	} else {
		_, drain, _, _ := bp.Queue.Own()
		attrs = append(attrs, slog.Duration("predicted", drain), slog.Int64("queue_depth", qi.QueueDepth))
	}
	ad.log.Info("api: deadline refused", attrs...)
}
