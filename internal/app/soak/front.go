package soak

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmq/llmq/worker"
)

// front stands before the simulator: it injects the provider faults the
// nemesis turns on and off at run time (the simulator's own faults are
// fixed at start), and keeps the accounting of every call by job and by
// tenant from the headers each worker call carries (worker.HeaderJob,
// worker.HeaderTenant). The simulator's own 429s (its limiter) and the
// injected ones are counted apart: only the first say llmq paced badly.
type front struct {
	next http.Handler
	// The faults in force: each is a count of the nemesis's faults of
	// that kind under way (they may overlap).
	outage, storm5xx, storm429, slow atomic.Int32
	// slowBy is the latency a spike adds to every call.
	slowBy time.Duration

	mu      sync.Mutex
	jobs    map[string]*jobCalls // "tenant/id"
	tenants map[string][]time.Time
	calls   callCounts
}

// jobCalls is the accounting of one job's calls.
type jobCalls struct {
	calls, paid int
	// paidAt is when each paid answer was sent.
	paidAt []time.Time
	// startedAt is when each call arrived.
	startedAt []time.Time
}

// callCounts are the totals of the calls the front saw.
type callCounts struct {
	Total       int `json:"total"`
	Paid        int `json:"paid"`
	Limited429  int `json:"limited_429"`  // the simulator's limiter
	Injected429 int `json:"injected_429"` // a 429 storm
	Injected5xx int `json:"injected_5xx"`
	Refused     int `json:"refused"` // an outage: the connection reset
	OtherFailed int `json:"other_failed"`
	NoJob       int `json:"no_job"` // calls without the job header
}

func newFront(next http.Handler, slowBy time.Duration) *front {
	return &front{next: next, slowBy: slowBy, jobs: map[string]*jobCalls{}, tenants: map[string][]time.Time{}}
}

// statusWriter keeps the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		f.next.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	id, _ := url.QueryUnescape(r.Header.Get(worker.HeaderJob))
	tenant, _ := url.QueryUnescape(r.Header.Get(worker.HeaderTenant))
	var result string
	switch {
	case f.outage.Load() > 0:
		result = "refused"
		reset(w)
	case f.storm5xx.Load() > 0:
		result = "storm5xx"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprint(w, `{"error":{"message":"The server had an error processing your request (soak: 5xx storm).","type":"server_error","param":null,"code":null}}`)
	case f.storm429.Load() > 0:
		result = "storm429"
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = fmt.Fprint(w, `{"error":{"message":"Rate limit reached (soak: 429 storm). Please try again in 2s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	default:
		if f.slow.Load() > 0 {
			select {
			case <-time.After(f.slowBy):
			case <-r.Context().Done():
			}
		}
		sw := &statusWriter{ResponseWriter: w}
		f.next.ServeHTTP(sw, r)
		result = strconv.Itoa(sw.status)
	}
	f.record(tenant, id, result, start, time.Now())
}

// reset closes the client's connection with a TCP RST, no answer: what a
// worker sees of a provider that is down.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// record counts one call of job tenant/id that began at start and ended
// at end with result (a status, "refused", "storm5xx" or "storm429").
func (f *front) record(tenant, id, result string, start, end time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Total++
	switch result {
	case "200":
		f.calls.Paid++
	case "storm429":
		f.calls.Injected429++
	case "storm5xx":
		f.calls.Injected5xx++
	case "refused":
		f.calls.Refused++
	case strconv.Itoa(http.StatusTooManyRequests):
		f.calls.Limited429++
	default:
		f.calls.OtherFailed++
	}
	if id == "" {
		f.calls.NoJob++
		return
	}
	k := tenant + "/" + id
	j := f.jobs[k]
	if j == nil {
		j = &jobCalls{}
		f.jobs[k] = j
	}
	j.calls++
	j.startedAt = append(j.startedAt, start)
	if result == "200" {
		j.paid++
		j.paidAt = append(j.paidAt, end)
	}
	f.tenants[tenant] = append(f.tenants[tenant], start)
}

// snapshot returns copies of the accounting.
func (f *front) snapshot() (callCounts, map[string]jobCalls, map[string][]time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	jobs := make(map[string]jobCalls, len(f.jobs))
	for k, j := range f.jobs {
		jobs[k] = *j
	}
	tenants := make(map[string][]time.Time, len(f.tenants))
	for k, ts := range f.tenants {
		tenants[k] = append([]time.Time(nil), ts...)
	}
	return f.calls, jobs, tenants
}
