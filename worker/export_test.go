package worker

import "context"

// Waiting is the number of jobs in model's priority queue, not yet handed
// to its shaping lane; 0 when the lane does not exist. Tests use it to know
// that jobs are queued before they let the lane admit the next one.
func (w *Worker) Waiting(model string) int {
	l, ok := w.lanes.get(model)
	if !ok {
		return 0
	}
	return l.sched.Len()
}

// Lanes lists the models that have a lane.
func (w *Worker) Lanes() []string {
	lanes := w.lanes.all()
	names := make([]string, 0, len(lanes))
	for name := range lanes {
		names = append(names, name)
	}
	return names
}

// CapOutput is capOutput (budget.go).
var CapOutput = capOutput

// Measure is measure (observe.go).
func (w *Worker) Measure(ctx context.Context) { w.gauges.measure(ctx) }

// WindowRecount and WindowRefresh are how often the ingest window's count
// is read again (ingest.go).
const (
	WindowRecount = windowRecount
	WindowRefresh = windowRefresh
)

// ScopeTPM is the tokens per minute of scope name ("tenant:a") on this
// worker's share; false when the worker has not made it or it has no TPM.
func (w *Worker) ScopeTPM(name string) (float64, bool) {
	w.scopes.mu.Lock()
	defer w.scopes.mu.Unlock()
	sc, ok := w.scopes.byName[name]
	if !ok || sc.tpm == nil {
		return 0, false
	}
	return sc.tpm.Limit(), true
}

// CrashAfterClaim makes n's rounds stop right after their claim commits
// while crash returns true, as a process killed there would.
func (n *Notifier) CrashAfterClaim(crash func() bool) { n.crashAfterClaim = crash }
