package dlq

import (
	"cmp"
	"slices"
	"time"

	"github.com/llmq/llmq"
)

// alertState is the state a notification reports.
type alertState string

const (
	stateFiring   alertState = "firing"
	stateResolved alertState = "resolved"
)

// notification is one message about one burst, sent to every sink.
type notification struct {
	State  alertState
	Reason Reason
	Tenant string
	// Count is the number of dead letters in the burst so far.
	Count int
	// SampleIDs are the latest job ids of the burst, oldest first.
	SampleIDs []string
	// Models are the distinct models of the burst, sorted, at most
	// SampleSize of them.
	Models []string
	// LastError is the last error of the latest event.
	LastError string
	// FirstAt and LastAt are the event times of the first and latest dead
	// letter.
	FirstAt, LastAt time.Time
	// StartsAt is when the burst began (alerter clock).
	StartsAt time.Time
	// EndsAt is when the burst was resolved, or, while firing, when the
	// alert lapses unless it is updated.
	EndsAt time.Time
	// Budget is set on a budget alert (budget_alert.go), which the other
	// fields but State, Tenant and the times do not describe.
	Budget *BudgetAlert
}

type groupKey struct {
	reason Reason
	tenant string
}

// group is one burst of dead letters with the same reason and tenant.
type group struct {
	key       groupKey
	firstSeen time.Time // alerter clock, first event
	lastSeen  time.Time // alerter clock, latest event
	total     int       // events in the burst
	unsent    int       // events not yet in a firing notification
	samples   []string  // latest job ids, oldest first
	models    []string  // distinct models, sorted
	lastError string
	firstAt   time.Time // event time, first event
	lastAt    time.Time // event time, latest event
	// firing is set once a firing notification left; lastNotified is when.
	firing       bool
	lastNotified time.Time
}

// grouper turns events into notifications. It is pure: no goroutines, no
// I/O, every method takes the time.
type grouper struct {
	groupWait      time.Duration
	groupInterval  time.Duration
	resolveTimeout time.Duration
	sampleSize     int
	limit          window
	groups         map[groupKey]*group
}

func newGrouper(c AlertConfig) *grouper {
	return &grouper{
		groupWait:      c.GroupWait,
		groupInterval:  c.GroupInterval,
		resolveTimeout: c.ResolveTimeout,
		sampleSize:     c.SampleSize,
		limit:          window{max: c.MaxPerMinute, span: time.Minute},
		groups:         map[groupKey]*group{},
	}
}

// add records an event that arrived at at (alerter clock).
func (g *grouper) add(ev Event, at time.Time) {
	key := groupKey{reason: cmp.Or(ev.Reason, ReasonUnknown), tenant: cmp.Or(ev.Tenant, llmq.DefaultTenant)}
	evTime := ev.Time
	if evTime.IsZero() {
		evTime = at
	}
	gr := g.groups[key]
	if gr == nil {
		gr = &group{key: key, firstSeen: at, firstAt: evTime}
		g.groups[key] = gr
	}
	gr.lastSeen = at
	gr.lastAt = evTime
	gr.total++
	gr.unsent++
	gr.lastError = ev.LastError
	if len(gr.samples) == g.sampleSize {
		gr.samples = slices.Delete(gr.samples, 0, 1)
	}
	gr.samples = append(gr.samples, ev.JobID)
	if i, found := slices.BinarySearch(gr.models, ev.Model); ev.Model != "" && !found && len(gr.models) < g.sampleSize {
		gr.models = slices.Insert(gr.models, i, ev.Model)
	}
}

// dueAt is when the group next needs a notification, and which.
func (g *grouper) dueAt(gr *group) (time.Time, alertState) {
	if !gr.firing {
		return gr.firstSeen.Add(g.groupWait), stateFiring
	}
	resolveAt := gr.lastSeen.Add(g.resolveTimeout)
	if gr.unsent > 0 {
		if update := gr.lastNotified.Add(g.groupInterval); update.Before(resolveAt) {
			return update, stateFiring
		}
	}
	return resolveAt, stateResolved
}

// next is the earliest time at which due may return something; zero when
// there is no burst.
func (g *grouper) next() time.Time {
	var earliest time.Time
	for _, gr := range g.groups {
		at, _ := g.dueAt(gr)
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	if free := g.limit.nextFree(); !earliest.IsZero() && free.After(earliest) {
		return free
	}
	return earliest
}

// due returns the notifications due at now, oldest due first, as many as
// the rate limit lets through; the others stay due.
func (g *grouper) due(now time.Time) []notification {
	type candidate struct {
		gr    *group
		at    time.Time
		state alertState
	}
	var cands []candidate
	for _, gr := range g.groups {
		if at, state := g.dueAt(gr); !at.After(now) {
			cands = append(cands, candidate{gr, at, state})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.gr.key.reason, b.gr.key.reason), cmp.Compare(a.gr.key.tenant, b.gr.key.tenant))
	})
	var out []notification
	for _, c := range cands {
		if !g.limit.allow(now) {
			break
		}
		out = append(out, g.emit(c.gr, c.state, now))
	}
	return out
}

// flush returns a firing notification for every burst with unreported
// events, ignoring GroupWait, GroupInterval and the rate limit.
func (g *grouper) flush(now time.Time) []notification {
	var grs []*group
	for _, gr := range g.groups {
		if gr.unsent > 0 {
			grs = append(grs, gr)
		}
	}
	slices.SortFunc(grs, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.key.reason, b.key.reason), cmp.Compare(a.key.tenant, b.key.tenant))
	})
	out := make([]notification, 0, len(grs))
	for _, gr := range grs {
		out = append(out, g.emit(gr, stateFiring, now))
	}
	return out
}

// emit builds the notification and moves the group on.
func (g *grouper) emit(gr *group, state alertState, now time.Time) notification {
	n := notification{
		State:     state,
		Reason:    gr.key.reason,
		Tenant:    gr.key.tenant,
		Count:     gr.total,
		SampleIDs: slices.Clone(gr.samples),
		Models:    slices.Clone(gr.models),
		LastError: gr.lastError,
		FirstAt:   gr.firstAt,
		LastAt:    gr.lastAt,
		StartsAt:  gr.firstSeen,
	}
	switch state {
	case stateFiring:
		// The alert lapses after the latest moment it could be resolved
		// plus one GroupInterval, by which an update would have arrived:
		// Alertmanager then resolves it by itself if the sender is gone.
		n.EndsAt = gr.lastSeen.Add(g.resolveTimeout + g.groupInterval)
		gr.firing = true
		gr.unsent = 0
		gr.lastNotified = now
	case stateResolved:
		n.EndsAt = now
		delete(g.groups, gr.key)
	}
	return n
}

// window admits at most max (> 0) events in any span; max < 0 admits all.
type window struct {
	max  int
	span time.Duration
	sent []time.Time // the latest admissions, at most max
}

// allow admits an event at now if the window has room.
func (w *window) allow(now time.Time) bool {
	if w.max < 0 {
		return true
	}
	if len(w.sent) == w.max && now.Before(w.sent[0].Add(w.span)) {
		return false
	}
	if len(w.sent) == w.max {
		w.sent = slices.Delete(w.sent, 0, 1)
	}
	w.sent = append(w.sent, now)
	return true
}

// nextFree is when the window next has room; zero when it has room now.
func (w *window) nextFree() time.Time {
	if w.max < 0 || len(w.sent) < w.max {
		return time.Time{}
	}
	return w.sent[0].Add(w.span)
}
