package store

import (
	"cmp"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
)

// maxSizeDelay bounds a job's size delay, so that a TPM set absurdly low
// cannot push a job out of every order (or overflow the key).
const maxSizeDelay = 24 * time.Hour

// Sizer gives a job about to be recorded its shaping estimate and its size
// delay (NewJob.SizeDelay), the same way on every path a job enters by:
// the worker's ingest from the broker and the producer's outbox
// (POST /v1/jobs, llmq produce), so that a short question recorded through
// the API goes before a document as it does through the broker. The
// recorders run it, not the store: it is CPU work, kept out of the
// store's shared flushes. The zero Sizer estimates nothing (the worker
// then estimates when it claims).
type Sizer struct {
	// Estimator counts a body's tokens; nil: no estimate.
	Estimator *shaping.Estimator
	// Catalog gives the model's TPM and default output allowance.
	Catalog llmq.Catalog
	// Order is how many times its estimated tokens' time at the model's
	// TPM a job sorts later than its creation; <= 0, or no TPM configured
	// for the model: no size delay.
	Order float64
}

// NewJob is j with its estimate and size delay.
func (z Sizer) NewJob(j *llmq.Job) NewJob {
	n := NewJob{Job: j}
	if z.Estimator == nil {
		return n
	}
	est, err := z.Estimator.EstimateBody(j.Body)
	if err != nil {
		return n // a body Decode accepted always parses; the claim estimates again
	}
	m := z.Catalog.Lookup(j.Model())
	n.EstPromptTokens = est.PromptTokens
	n.EstOutputTokens = cmp.Or(est.MaxOutputTokens, est.N*cmp.Or(m.MaxOutputDefault, shaping.LaneMaxOutputDefault))
	if z.Order > 0 && m.TPM > 0 {
		secs := z.Order * float64(n.EstPromptTokens+n.EstOutputTokens) / (m.TPM / 60)
		n.SizeDelay = time.Duration(min(secs, maxSizeDelay.Seconds()) * float64(time.Second))
	}
	return n
}
