package worker

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/shaping"
)

// topOfWindow is a random source whose every draw is the largest, so a
// jittered delay is its whole window and the table can say it exactly.
type topOfWindow struct{}

func (topOfWindow) Uint64() uint64 { return math.MaxUint64 }

// TestDecide is the decision table of docs/worker-policy.md, row by row.
func TestDecide(t *testing.T) {
	t.Parallel()
	p := policy{
		MaxAttempts: 4, FallbackAfter: 2, FallbackMaxWait: 2 * time.Second, FallbackOn: []FallbackTrigger{FallbackOnRateLimit},
		Backoff:     Backoff{Base: 100 * time.Millisecond, Max: time.Second, MaxRetryAfter: 5 * time.Second},
		OutageLimit: 15 * time.Minute,
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	called := func(class Class, retryAfter time.Duration) Outcome {
		return Outcome{Class: class, Code: "code", Message: "message", Headers: shaping.RateLimitHeaders{RetryAfter: retryAfter}}
	}
	busy := func(retryAfter time.Duration) Outcome {
		o := called(ClassRateLimited, retryAfter)
		o.Headers.Concurrency = true
		return o
	}
	const (
		limited   = ClassRateLimited
		retryable = ClassRetryable
	)
	tests := []struct {
		name  string
		state state
		event event
		want  state
		act   action
	}{
		// Before a call.
		{name: "ready: call",
			event: event{Step: stepReady, Now: now},
			act:   action{Verb: doCall}},
		{name: "ready with a fallback: a paused lane may hold it FallbackMaxWait",
			event: event{Step: stepReady, Now: now, Next: 1},
			act:   action{Verb: doCall, MaxPause: 2 * time.Second}},
		{name: "ready before the first call: admission bounded by the deadline",
			event: event{Step: stepReady, Now: now, Deadline: now.Add(time.Minute)},
			act:   action{Verb: doCall, Deadline: now.Add(time.Minute)}},
		{name: "ready at the deadline before the first call: expire",
			event: event{Step: stepReady, Now: now, Deadline: now},
			act:   action{Verb: doExpire, Why: "deadline passed before the job started"}},
		{name: "ready past the deadline before the first call (after a fallback): expire",
			state: state{Model: 1}, event: event{Step: stepReady, Now: now, Deadline: now.Add(-time.Second)},
			want: state{Model: 1},
			act:  action{Verb: doExpire, Why: "deadline passed before the job started"}},
		{name: "ready past the deadline after a call: a started job is finished",
			state: state{Attempts: 1, Retries: 1}, event: event{Step: stepReady, Now: now, Deadline: now.Add(-time.Second)},
			want: state{Attempts: 1, Retries: 1},
			act:  action{Verb: doCall}},
		{name: "ready with every attempt spent (claimed again after calls that never answered): dead-letter",
			state: state{Attempts: 4}, event: event{Step: stepReady, Now: now},
			want: state{Attempts: 4},
			act:  action{Verb: doDeadLetter, Reason: dlq.ReasonRetriesExhausted}},

		// Admission refused.
		{name: "lane paused, fallback: fall back",
			state: state{RateLimited: 1}, event: event{Step: stepLanePaused, Next: 2},
			want: state{Model: 2},
			act:  action{Verb: doFallBack, Why: "lane held it past fallback_max_wait"}},
		{name: "pooled, ready: a paused lane may hold it FallbackMaxWait (another key may take it)",
			event: event{Step: stepReady, Now: now, Pooled: true},
			act:   action{Verb: doCall, MaxPause: 2 * time.Second}},
		{name: "pooled, lane paused, another key and a fallback: the other key first",
			state: state{RateLimited: 1}, event: event{Step: stepLanePaused, Pooled: true, Entry: 2, Next: 1},
			act: action{Verb: doSwitchEntry, Entry: 1, Why: "lane held it past fallback_max_wait"}},
		{name: "pooled, lane paused, no other key, a fallback: fall back",
			event: event{Step: stepLanePaused, Pooled: true, Next: 1},
			want:  state{Model: 1},
			act:   action{Verb: doFallBack, Why: "lane held it past fallback_max_wait"}},
		{name: "pooled, lane paused, no other key, no fallback: wait in the lane",
			state: state{Attempts: 1}, event: event{Step: stepLanePaused, Pooled: true, Deadline: now.Add(time.Minute)},
			want: state{Attempts: 1},
			act:  action{Verb: doCall}},
		{name: "pooled, 429 past FallbackAfter, another key and a fallback: the other key first",
			state: state{Attempts: 1, RateLimited: 1},
			event: event{Step: stepCalled, Outcome: called(limited, 0), Pooled: true, Entry: 1, Next: 1, BudgetLeft: true},
			want:  state{Attempts: 2},
			act:   action{Verb: doSwitchEntry, Entry: 0, Why: "rate limited 2 times"}},
		{name: "lane paused, no fallback: hand back",
			event: event{Step: stepLanePaused},
			act:   action{Verb: doHandBack, Why: errLanePaused.Error()}},
		{name: "too large: fail",
			event: event{Step: stepTooLarge, Detail: "too large"},
			act:   action{Verb: doFail, Code: "request_too_large", Message: "too large"}},
		{name: "wait passes the deadline: expire",
			event: event{Step: stepWaitTooLong, Detail: "60s"},
			act:   action{Verb: doExpire, Why: "predicted wait passes the deadline: 60s"}},

		// After a call.
		{name: "success",
			event: event{Step: stepCalled, Outcome: called(ClassSuccess, 0)},
			want:  state{Attempts: 1},
			act:   action{Verb: doSucceed}},
		{name: "permanent: fail with the upstream's code",
			event: event{Step: stepCalled, Outcome: Outcome{Class: ClassPermanent, Status: 401, Code: "code", Message: "message"},
				Next: 1, BudgetLeft: true},
			want: state{Attempts: 1},
			act:  action{Verb: doFail, Status: 401, Code: "code", Message: "message"}},
		{name: "404 on a fallback: back to the first model, counted",
			state: state{Attempts: 1, Model: 2, RateLimited: 1},
			event: event{Step: stepCalled, Outcome: Outcome{Class: ClassPermanent, Status: 404, Code: "model_not_found"}},
			want:  state{Attempts: 2},
			act:   action{Verb: doFallBack, Why: "fallback model not found (HTTP 404): back to the first model"}},
		{name: "404 on a fallback with the last attempt: fail",
			state: state{Attempts: 3, Model: 1},
			event: event{Step: stepCalled, Outcome: Outcome{Class: ClassPermanent, Status: 404, Code: "model_not_found"}},
			want:  state{Attempts: 4, Model: 1},
			act:   action{Verb: doFail, Status: 404, Code: "model_not_found"}},
		{name: "404 on the first model: fail",
			event: event{Step: stepCalled, Outcome: Outcome{Class: ClassPermanent, Status: 404, Code: "model_not_found"}, Next: 1},
			want:  state{Attempts: 1},
			act:   action{Verb: doFail, Status: 404, Code: "model_not_found"}},
		{name: "retryable, first retry: jitter over Base",
			event: event{Step: stepCalled, Outcome: called(retryable, 0), BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1},
			act:   action{Verb: doRetry, Delay: 100 * time.Millisecond, Budgeted: true}},
		{name: "retryable, fourth retry: the window doubled three times",
			state: state{Attempts: 2, Retries: 3}, event: event{Step: stepCalled, Outcome: called(retryable, 0), BudgetLeft: true},
			want: state{Attempts: 3, Retries: 4},
			act:  action{Verb: doRetry, Delay: 800 * time.Millisecond, Budgeted: true}},
		{name: "retryable, later retries: the window stops at Max",
			state: state{Attempts: 1, Retries: 4}, event: event{Step: stepCalled, Outcome: called(retryable, 0), BudgetLeft: true},
			want: state{Attempts: 2, Retries: 5},
			act:  action{Verb: doRetry, Delay: time.Second, Budgeted: true}},
		{name: "retryable with a longer Retry-After: wait it",
			event: event{Step: stepCalled, Outcome: called(retryable, 3*time.Second), BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1},
			act:   action{Verb: doRetry, Delay: 3 * time.Second, Budgeted: true}},
		{name: "retryable with a Retry-After past MaxRetryAfter: clamped",
			event: event{Step: stepCalled, Outcome: called(retryable, time.Hour), BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1},
			act:   action{Verb: doRetry, Delay: 5 * time.Second, Budgeted: true}},
		{name: "retryable, budget spent: delayed by Max, not given up",
			event: event{Step: stepCalled, Outcome: called(retryable, 0)},
			want:  state{Attempts: 1, Retries: 1},
			act:   action{Verb: doRetry, Delay: time.Second}},
		{name: "retryable, budget spent: the server's longer Retry-After, unclamped",
			event: event{Step: stepCalled, Outcome: called(retryable, time.Hour)},
			want:  state{Attempts: 1, Retries: 1},
			act:   action{Verb: doRetry, Delay: time.Hour}},
		{name: "5xx never falls back, even with the budget spent",
			event: event{Step: stepCalled, Outcome: called(retryable, 3*time.Second), Next: 1},
			want:  state{Attempts: 1, Retries: 1},
			act:   action{Verb: doRetry, Delay: 3 * time.Second}},
		{name: "last attempt retryable: dead letter",
			state: state{Attempts: 3, Retries: 3}, event: event{Step: stepCalled, Outcome: called(retryable, 0), BudgetLeft: true},
			want: state{Attempts: 4, Retries: 3},
			act:  action{Verb: doDeadLetter, Reason: dlq.ReasonRetriesExhausted}},
		{name: "last attempt rate limited, fallback left: dead letter all the same",
			state: state{Attempts: 3, RateLimited: 1}, event: event{Step: stepCalled, Outcome: called(limited, 0), Next: 1},
			want: state{Attempts: 4, RateLimited: 1},
			act:  action{Verb: doDeadLetter, Reason: dlq.ReasonRetriesExhausted}},
		{name: "outage: a failure of the incident costs no attempt, even the last",
			state: state{Attempts: 3, Retries: 3},
			event: event{Step: stepCalled, Outcome: called(retryable, 0), Outage: true, OutageFor: 14 * time.Minute, BudgetLeft: true},
			want:  state{Attempts: 3, Free: 1, Retries: 4},
			act:   action{Verb: doRetry, Delay: 800 * time.Millisecond, Budgeted: true}},
		{name: "outage past OutageLimit: counted again",
			state: state{Attempts: 3, Retries: 3},
			event: event{Step: stepCalled, Outcome: called(retryable, 0), Outage: true, OutageFor: 15 * time.Minute, BudgetLeft: true},
			want:  state{Attempts: 4, Retries: 3},
			act:   action{Verb: doDeadLetter, Reason: dlq.ReasonRetriesExhausted}},
		{name: "outage: a 401 while the lane is held for it waits, free",
			state: state{Attempts: 1, Free: 2},
			event: event{Step: stepCalled, Outcome: Outcome{Class: ClassPermanent, Status: 401, Code: "invalid_api_key"}, Outage: true, BudgetLeft: true},
			want:  state{Attempts: 1, Free: 3, Retries: 1},
			act:   action{Verb: doRetry, Delay: 100 * time.Millisecond, Budgeted: true}},
		{name: "outage past OutageLimit: a 401 fails the job",
			event: event{Step: stepCalled, Outcome: Outcome{Class: ClassPermanent, Status: 401, Code: "invalid_api_key"}, Outage: true, OutageFor: time.Hour},
			want:  state{Attempts: 1},
			act:   action{Verb: doFail, Status: 401, Code: "invalid_api_key"}},
		{name: "429 below FallbackAfter: retry, counted",
			event: event{Step: stepCalled, Outcome: called(limited, 0), Next: 1, BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1, RateLimited: 1},
			act:   action{Verb: doRetry, Delay: 100 * time.Millisecond, Budgeted: true}},
		{name: "429 reaching FallbackAfter: fall back, 429s counted afresh",
			state: state{Attempts: 1, Retries: 1, RateLimited: 1}, event: event{Step: stepCalled, Outcome: called(limited, 0), Next: 1, BudgetLeft: true},
			want: state{Attempts: 2, Retries: 1, Model: 1},
			act:  action{Verb: doFallBack, Why: "rate limited 2 times"}},
		{name: "429 reaching FallbackAfter without a fallback: retry",
			state: state{Attempts: 1, Retries: 1, RateLimited: 1}, event: event{Step: stepCalled, Outcome: called(limited, 0), BudgetLeft: true},
			want: state{Attempts: 2, Retries: 2, RateLimited: 2},
			act:  action{Verb: doRetry, Delay: 200 * time.Millisecond, Budgeted: true}},
		{name: "429 with Retry-After past FallbackMaxWait: fall back at once",
			event: event{Step: stepCalled, Outcome: called(limited, 3*time.Second), Next: 2, BudgetLeft: true},
			want:  state{Attempts: 1, Model: 2},
			act:   action{Verb: doFallBack, Why: "retry-after 3s"}},
		{name: "429 with Retry-After of exactly FallbackMaxWait: wait it",
			event: event{Step: stepCalled, Outcome: called(limited, 2*time.Second), Next: 1, BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1, RateLimited: 1},
			act:   action{Verb: doRetry, Delay: 2 * time.Second, Budgeted: true}},
		{name: "429, budget spent, fallback: fall back",
			event: event{Step: stepCalled, Outcome: called(limited, 0), Next: 1},
			want:  state{Attempts: 1, Model: 1},
			act:   action{Verb: doFallBack, Why: "retry budget spent"}},
		{name: "429, budget spent, no fallback: delayed by Max",
			event: event{Step: stepCalled, Outcome: called(limited, 0)},
			want:  state{Attempts: 1, Retries: 1, RateLimited: 1},
			act:   action{Verb: doRetry, Delay: time.Second}}, {name: "concurrency 429, budget spent: the first backoff, not Max",
			state: state{Attempts: 1, Retries: 3}, event: event{Step: stepCalled, Outcome: busy(0)},
			want: state{Attempts: 2, Retries: 4, RateLimited: 1},
			act:  action{Verb: doRetry, Delay: 100 * time.Millisecond}},
		{name: "concurrency 429 with Retry-After, budget left: what the provider asked, unbudgeted",
			event: event{Step: stepCalled, Outcome: busy(time.Second), BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1, RateLimited: 1},
			act:   action{Verb: doRetry, Delay: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, act := p.decide(tt.state, tt.event, rand.New(topOfWindow{}))
			require.Equal(t, tt.act, act)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestDecideFallbackOn: with FallbackOn [server_error, timeout], 5xx and
// timeouts count towards FallbackAfter and move the job on; 429s are
// retried on the model, and a paused lane holds the job as long as it is
// paused.
func TestDecideFallbackOn(t *testing.T) {
	t.Parallel()
	p := policy{
		MaxAttempts: 6, FallbackAfter: 2, FallbackMaxWait: 2 * time.Second,
		FallbackOn: []FallbackTrigger{FallbackOnServerError, FallbackOnTimeout},
		Backoff:    Backoff{Base: 100 * time.Millisecond, Max: time.Second, MaxRetryAfter: 5 * time.Second},
	}
	out := func(class Class, status int, code string, retryAfter time.Duration) Outcome {
		return Outcome{Class: class, Status: status, Code: code, Headers: shaping.RateLimitHeaders{RetryAfter: retryAfter}}
	}
	tests := []struct {
		name  string
		state state
		event event
		want  state
		act   action
	}{
		{name: "ready with a fallback: no pause bound, 429s do not move the job",
			event: event{Step: stepReady, Next: 1},
			act:   action{Verb: doCall}},
		{name: "5xx below FallbackAfter: retry, counted",
			event: event{Step: stepCalled, Outcome: out(ClassRetryable, 502, "http_502", 0), Next: 1, BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1, RateLimited: 1},
			act:   action{Verb: doRetry, Delay: 100 * time.Millisecond, Budgeted: true}},
		{name: "5xx reaching FallbackAfter: fall back",
			state: state{Attempts: 1, Retries: 1, RateLimited: 1},
			event: event{Step: stepCalled, Outcome: out(ClassRetryable, 500, "server_error", 0), Next: 1, BudgetLeft: true},
			want:  state{Attempts: 2, Retries: 1, Model: 1},
			act:   action{Verb: doFallBack, Why: "server error 2 times"}},
		{name: "503 with a Retry-After past FallbackMaxWait: fall back at once",
			event: event{Step: stepCalled, Outcome: out(ClassRetryable, 503, "server_is_overloaded", 3*time.Second), Next: 1, BudgetLeft: true},
			want:  state{Attempts: 1, Model: 1},
			act:   action{Verb: doFallBack, Why: "retry-after 3s"}},
		{name: "timeout reaching FallbackAfter: fall back",
			state: state{Attempts: 1, Retries: 1, RateLimited: 1},
			event: event{Step: stepCalled, Outcome: out(ClassRetryable, 0, "timeout", 0), Next: 2, BudgetLeft: true},
			want:  state{Attempts: 2, Retries: 1, Model: 2},
			act:   action{Verb: doFallBack, Why: "timed out 2 times"}},
		{name: "connection error: retried on the model, not counted",
			event: event{Step: stepCalled, Outcome: out(ClassRetryable, 0, "connection_error", 0), Next: 1, BudgetLeft: true},
			want:  state{Attempts: 1, Retries: 1},
			act:   action{Verb: doRetry, Delay: 100 * time.Millisecond, Budgeted: true}},
		{name: "429 with a long Retry-After: retried on the model, not counted",
			state: state{Attempts: 1, Retries: 1, RateLimited: 1},
			event: event{Step: stepCalled, Outcome: out(ClassRateLimited, 429, "rate_limit_exceeded", 3*time.Second), Next: 1},
			want:  state{Attempts: 2, Retries: 2, RateLimited: 1},
			act:   action{Verb: doRetry, Delay: 3 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, act := p.decide(tt.state, tt.event, rand.New(topOfWindow{}))
			require.Equal(t, tt.act, act)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestDecideJitterComesFromRand: the backoff delay is drawn from the rand
// the caller gives, so one seed gives one sequence and another seed
// another.
func TestDecideJitterComesFromRand(t *testing.T) {
	t.Parallel()
	p := policy{MaxAttempts: 100, Backoff: Backoff{Base: time.Second, Max: time.Second, MaxRetryAfter: time.Second}}
	e := event{Step: stepCalled, Outcome: Outcome{Class: ClassRetryable}, BudgetLeft: true}
	delays := func(seed uint64) []time.Duration {
		rng := rand.New(rand.NewPCG(seed, 0))
		var out []time.Duration
		for range 8 {
			_, a := p.decide(state{}, e, rng)
			require.Equal(t, doRetry, a.Verb)
			require.LessOrEqual(t, a.Delay, time.Second)
			out = append(out, a.Delay)
		}
		return out
	}
	require.Equal(t, delays(1), delays(1))
	require.NotEqual(t, delays(1), delays(2))
}

func TestNextFallback(t *testing.T) {
	t.Parallel()
	cat := llmq.Catalog{Models: map[string]llmq.Model{
		"tiny":  {ContextWindow: 50},
		"1k":    {ContextWindow: 1000},
		"small": {ContextWindow: 1000, MaxOutputDefault: 100},
	}}
	prompt := func(tokens, maxOutput int) shaping.Estimate {
		return shaping.Estimate{PromptTokens: tokens, MaxOutputTokens: maxOutput}
	}
	tests := []struct {
		name  string
		chain []string
		from  int
		est   shaping.Estimate
		want  int
	}{
		{"no fallback", []string{"a"}, 0, prompt(10, 10), 0},
		{"the next one", []string{"a", "b", "c"}, 0, prompt(10, 10), 1},
		{"from a fallback, the one after", []string{"a", "b", "c"}, 1, prompt(10, 10), 2},
		{"from the last, none", []string{"a", "b", "c"}, 2, prompt(10, 10), 0},
		{"a window too small is skipped", []string{"a", "tiny", "big"}, 0, prompt(100, 10), 2},
		{"an unknown window holds anything", []string{"a", "big"}, 0, prompt(1<<20, 10), 1},
		{"the output allowance counts", []string{"a", "1k"}, 0, prompt(991, 10), 0},
		{"prompt + output equal to the window fits", []string{"a", "1k"}, 0, prompt(990, 10), 1},
		{"no max_tokens: the shaping default allowance counts", []string{"a", "1k"}, 0, prompt(100, 0), 0},
		{"no max_tokens: the model's default allowance counts", []string{"a", "small"}, 0, prompt(900, 0), 1},
		{"none fits", []string{"a", "tiny", "1k"}, 0, prompt(2000, 10), 0},
		{"a model the provider does not serve is skipped", []string{"a", "unserved", "b"}, 0, prompt(10, 10), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, nextFallback(cat, tt.chain, tt.from, tt.est, func(m string) bool { return m == "unserved" }))
		})
	}
}
