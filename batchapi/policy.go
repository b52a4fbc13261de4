package batchapi

import (
	"fmt"
	"time"
)

// Policy decides the lane of a deferrable job. It is pure: the time and the
// live lane's drain estimate are passed in.
type Policy struct {
	// Window is the off-peak window; the zero Window never matches.
	Window Window
	// DrainThreshold: outside the window a job still goes to the batch
	// lane when the live lane would take longer than this to drain. 0
	// disables the rule.
	DrainThreshold time.Duration
	// MinDeadlineLead: a job with a deadline goes to the batch lane only
	// when the deadline is more than this after now (the completion window
	// plus a margin).
	MinDeadlineLead time.Duration
}

// Decision is a lane and the reason recorded with the job.
type Decision struct {
	Batch  bool
	Reason string
}

// Decide returns the lane of a deferrable job at now with the given
// deadline (nil: none) when the live lane would drain in drain.
func (p Policy) Decide(now time.Time, deadline *time.Time, drain time.Duration) Decision {
	if deadline != nil {
		if left := deadline.Sub(now); left <= p.MinDeadlineLead {
			return Decision{Reason: fmt.Sprintf("live: deadline in %s, batch needs more than %s", round(left), p.MinDeadlineLead)}
		}
	}
	if p.Window.Contains(now) {
		return Decision{Batch: true, Reason: "batch: inside off-peak window " + p.Window.String()}
	}
	if p.DrainThreshold > 0 && drain > p.DrainThreshold {
		return Decision{Batch: true, Reason: fmt.Sprintf("batch: live lane drains in %s, over the %s threshold", round(drain), p.DrainThreshold)}
	}
	return Decision{Reason: fmt.Sprintf("live: outside off-peak window %s, live lane drains in %s", p.Window, round(drain))}
}

func round(d time.Duration) time.Duration {
	if d > time.Minute || d < -time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
