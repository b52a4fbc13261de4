package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/workload"
)

// Summary is the outcome of a demo run. Job counts come from Postgres,
// upstream figures from the simulator's own accounting.
type Summary struct {
	// Jobs and Malformed are the valid jobs and malformed messages sent.
	Jobs, Malformed int
	// Succeeded, Failed, DeadLettered and Expired count the valid jobs by
	// final state.
	Succeeded, Failed, DeadLettered, Expired int
	// ViaBatch counts the jobs that succeeded through the Batch API,
	// ViaFallback those answered by the fallback model.
	ViaBatch, ViaFallback int
	// Poison counts the malformed messages dead-lettered as poison.
	Poison int
	// Elapsed is the time from the first publish to the last terminal job.
	Elapsed time.Duration

	// Requests and Tokens are the live calls the simulator admitted and
	// the tokens it served (every model).
	Requests, Tokens int64
	// RateLimited counts the simulator's 429s; Faults its injected faults.
	RateLimited, Faults int64
	// BatchLines counts the lines the simulator's Batch API answered.
	BatchLines int64
	// Retries counts the worker's retried attempts.
	Retries int64
	// RPM and TPM are the demo model's quota; RPMUsed and TPMUsed its
	// requests and tokens per minute over the run.
	RPM, TPM         int
	RPMUsed, TPMUsed float64
	// P50 and P99 are the latencies (enqueue to result) of the live jobs
	// that succeeded.
	P50, P99 time.Duration

	// APIURL, APIKey and ExampleJobID show how to poll a job.
	APIURL, APIKey, ExampleJobID string
}

// summary reads the final figures.
func (r *run) summary(ctx context.Context) (Summary, error) {
	c, err := r.count(ctx)
	if err != nil {
		return Summary{}, err
	}
	var last time.Time
	var lat []time.Duration
	var example string
	var rs runStore = r.app.Store().Jobs()
	done, err := rs.SucceededJobs(ctx, r.good)
	if err != nil {
		return Summary{}, fmt.Errorf("demo: read latencies: %w", err)
	}
	for _, j := range done {
		if j.FinishedAt.After(last) {
			last = j.FinishedAt
		}
		if j.Lane != "batch" {
			lat = append(lat, j.Latency)
			if example == "" {
				example = j.ID
			}
		}
	}
	elapsed := time.Since(r.started)
	if !last.IsZero() && last.After(r.started) {
		elapsed = last.Sub(r.started)
	}
	st := r.sim.Stats()
	m := st.Models[ModelDefault]
	minutes := elapsed.Minutes()
	return Summary{
		Jobs: len(r.good), Malformed: len(r.bad),
		Succeeded: c.byStatus[llmq.StatusSucceeded], Failed: c.byStatus[llmq.StatusFailed],
		DeadLettered: c.byStatus[llmq.StatusDeadLettered], Expired: c.byStatus[llmq.StatusExpired],
		ViaBatch: c.viaBatch, ViaFallback: c.viaFallback, Poison: c.poison, Elapsed: elapsed,
		Requests: st.Total.Accepted, Tokens: st.Total.PromptTokens + st.Total.CompletionTokens,
		RateLimited: sum(st.Total.RateLimited), Faults: sum(st.Total.Faults), BatchLines: st.Total.BatchLines,
		Retries: r.retries(),
		RPM:     r.cfg.RPM, TPM: r.cfg.TPM,
		RPMUsed: float64(m.Accepted) / minutes, TPMUsed: float64(m.PromptTokens+m.CompletionTokens) / minutes,
		P50: workload.Percentile(lat, 0.50), P99: workload.Percentile(lat, 0.99),
		APIURL: r.apiURL, APIKey: APIKeyDefault, ExampleJobID: example,
	}, nil
}

// Clean reports whether every valid job succeeded and every malformed
// message was dead-lettered.
func (s Summary) Clean() bool {
	return s.Succeeded == s.Jobs && s.Poison == s.Malformed
}

// Print writes the summary and how to poll a job through the API.
func (s Summary) Print(w io.Writer, keepRunning bool) {
	fmt.Fprintf(w, "\nsummary after %s\n", s.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  jobs          %d valid: %d succeeded (%d through the Batch API, %d on the fallback model), %d failed, %d dead-lettered, %d expired\n",
		s.Jobs, s.Succeeded, s.ViaBatch, s.ViaFallback, s.Failed, s.DeadLettered, s.Expired)
	fmt.Fprintf(w, "  malformed     %d sent, %d dead-lettered as poison\n", s.Malformed, s.Poison)
	// The simulator, as a provider, starts with a full minute of quota:
	// over a run of m minutes it allows 1 + m minutes of it.
	minutes := s.Elapsed.Minutes()
	allowed := 1 + minutes
	fmt.Fprintf(w, "  quota used    %.0f%% of the requests and %.0f%% of the tokens the provider allowed in the run (its initial allowance, a minute of quota, and the refill over %s)\n",
		100*s.RPMUsed*minutes/(float64(s.RPM)*allowed), 100*s.TPMUsed*minutes/(float64(s.TPM)*allowed), s.Elapsed.Round(100*time.Millisecond))
	avg := fmt.Sprintf("averaged over the run, %.0f of %d RPM and %s of %s TPM", s.RPMUsed, s.RPM, kilo(s.TPMUsed), kilo(float64(s.TPM)))
	if s.RPMUsed > float64(s.RPM) || s.TPMUsed > float64(s.TPM) {
		avg += ": above the quota, as a run shorter than a minute can be on the initial allowance"
	}
	fmt.Fprintf(w, "                %s\n", avg)
	retries := fmt.Sprintf("%d retries", s.Retries)
	if s.Retries == 1 {
		retries = "1 retry"
	}
	fmt.Fprintf(w, "  upstream      %d calls admitted, %d tokens served (the simulator's count), %d rate-limited (429), %d injected faults, %d batch lines; %s\n",
		s.Requests, s.Tokens, s.RateLimited, s.Faults, s.BatchLines, retries)
	fmt.Fprintf(w, "  latency       p50 %s, p99 %s (live jobs, enqueue to stored result)\n",
		s.P50.Round(10*time.Millisecond), s.P99.Round(10*time.Millisecond))
	if s.Clean() {
		fmt.Fprintln(w, "  result        clean: every valid job succeeded, every malformed message is in the dead-letter queue")
	} else {
		fmt.Fprintln(w, "  result        NOT clean: some valid jobs did not succeed or some malformed messages were not dead-lettered")
	}
	if s.ExampleJobID == "" {
		return
	}
	fmt.Fprintf(w, "\npoll a job through the API:\n  curl -s -H 'Authorization: Bearer %s' %s/v1/jobs/%s\n", s.APIKey, s.APIURL, s.ExampleJobID)
	fmt.Fprintf(w, "  curl -s -H 'Authorization: Bearer %s' %s/v1/queue\n", s.APIKey, s.APIURL)
	if keepRunning {
		fmt.Fprintf(w, "\nthe web console: %s/ui (sign in with the operator key %s)\n", s.APIURL, OperatorKeyDefault)
		fmt.Fprintln(w, "\nthe API and the worker keep running (Ctrl-C to stop)")
	} else {
		fmt.Fprintln(w, "\n(the demo has stopped; run it with --keep-running to keep the API up and try these)")
	}
}
