package console

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/llmq/llmq/internal/app/api"
)

// A job's page draws its calls (GET /v1/jobs/{id}'s calls) on a time line
// and lists its changes of state: queued, each call and its answer, the
// end.

// event is one change of a job's state.
type event struct {
	At time.Time
	// After is the time since the job was created.
	After string
	// Key names the colour (c-<key>); What says what happened.
	Key, What string
}

// jobEvents lists j's changes of state, oldest first.
func jobEvents(j api.Job) []event {
	out := []event{{At: j.CreatedAt, Key: "queued", What: "queued"}}
	for i, c := range j.Calls {
		var waits []string
		if c.BackoffMS > 0 {
			waits = append(waits, dur(ms(c.BackoffMS))+" backing off")
		}
		if c.QuotaWaitMS > 0 {
			waits = append(waits, dur(ms(c.QuotaWaitMS))+" waiting for quota")
		}
		what := fmt.Sprintf("call %d to %s", c.Attempt, c.Model)
		if i > 0 && j.Calls[i-1].Model != c.Model {
			what += " (fallback from " + j.Calls[i-1].Model + ")"
		}
		if len(waits) > 0 {
			what += ", after " + strings.Join(waits, " and ")
		}
		out = append(out, event{At: c.StartedAt, Key: "calling", What: what})
		if c.FinishedAt != nil {
			out = append(out, event{At: *c.FinishedAt, Key: c.Outcome, What: answerText(c)})
		}
	}
	if j.FinishedAt != nil {
		what := strings.ReplaceAll(j.Status, "_", " ")
		if j.Error != nil {
			what += ": " + j.Error.Code
		}
		out = append(out, event{At: *j.FinishedAt, Key: j.Status, What: what})
	}
	for i := range out {
		out[i].After = "+" + dur(out[i].At.Sub(j.CreatedAt))
	}
	return out
}

// answerText says how a call came back.
func answerText(c api.Call) string {
	s := "answered"
	if c.Status > 0 {
		s += " " + strconv.Itoa(c.Status)
	} else {
		s = "no answer"
	}
	s += " (" + strings.ReplaceAll(c.Outcome, "_", " ") + ")"
	if c.ErrorCode != "" {
		s += " " + c.ErrorCode
	}
	if c.PromptTokens+c.CompletionTokens > 0 {
		s += " · " + num(int64(c.PromptTokens+c.CompletionTokens)) + " tokens"
	}
	if c.RetryAfterMS != nil {
		s += " · retry after " + dur(ms(*c.RetryAfterMS))
	}
	return s
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// callTimeline draws j's life from its creation to its end (or now): the
// backoffs, the waits for quota and the calls, coloured by their answer.
func callTimeline(j api.Job, now time.Time) template.HTML {
	const (
		width  = 1000.0
		height = 28.0
	)
	start, end := j.CreatedAt, now
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	}
	for _, c := range j.Calls {
		if c.FinishedAt != nil && c.FinishedAt.After(end) {
			end = *c.FinishedAt
		}
	}
	span := max(end.Sub(start), time.Millisecond)
	x := func(t time.Time) float64 { return width * float64(t.Sub(start)) / float64(span) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img" aria-label="%s">`,
		int(width), int(height), template.HTMLEscapeString(fmt.Sprintf("%d calls over %s", len(j.Calls), dur(span))))
	fmt.Fprintf(&b, `<rect class="c-track" x="0" y="8" width="%.0f" height="12"><title>queued or between steps</title></rect>`, width)
	seg := func(key string, from, to time.Time, title string) {
		if !to.After(from) {
			return
		}
		fmt.Fprintf(&b, `<rect class="c-%s" x="%.2f" y="4" width="%.2f" height="20"><title>%s</title></rect>`,
			key, x(from), max(x(to)-x(from), 1.5), template.HTMLEscapeString(title))
	}
	for _, c := range j.Calls {
		waitFrom := c.StartedAt.Add(-ms(c.QuotaWaitMS))
		seg("backing_off", waitFrom.Add(-ms(c.BackoffMS)), waitFrom, fmt.Sprintf("backing off %s before call %d", dur(ms(c.BackoffMS)), c.Attempt))
		seg("waiting", waitFrom, c.StartedAt, fmt.Sprintf("waiting %s for quota before call %d", dur(ms(c.QuotaWaitMS)), c.Attempt))
		to := now
		if c.FinishedAt != nil {
			to = *c.FinishedAt
		}
		seg(c.Outcome, c.StartedAt, to.Add(time.Millisecond), fmt.Sprintf("call %d to %s: %s", c.Attempt, c.Model, answerText(c)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from escaped text and numbers
}

// msecText writes milliseconds (an int64 or *int64) as a duration.
func msecText(n any) string {
	switch v := n.(type) {
	case int64:
		return dur(ms(v))
	case *int64:
		if v != nil {
			return dur(ms(*v))
		}
	}
	return "—"
}
