package worker

import (
	"net/http"
	"sync"
	"time"
)

// unservedFor is how long the worker moves no job to a fallback model the
// provider answered 404 for: a model it does not serve (a typo in the
// configuration, a model retired) is not tried again by every job, and one
// the provider adds later is used within minutes.
const unservedFor = 5 * time.Minute

// unservedModels are the fallback models the provider answered 404 for
// lately. Safe for concurrent use.
type unservedModels struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// mark records that the provider does not serve model, at now.
func (u *unservedModels) mark(model string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.until == nil {
		u.until = map[string]time.Time{}
	}
	u.until[model] = now.Add(unservedFor)
}

// has reports whether model was found unserved within unservedFor of now.
func (u *unservedModels) has(model string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	until, ok := u.until[model]
	if ok && !now.Before(until) {
		delete(u.until, model)
		return false
	}
	return ok
}

// isNotFound reports an answer saying the provider does not serve the
// model called (OpenAI's 404 model_not_found).
func isNotFound(out Outcome) bool { return out.Status == http.StatusNotFound }
