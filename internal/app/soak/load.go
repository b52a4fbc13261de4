package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmq/llmq/transport"
)

// tenantNames are the soak's tenants (tenantsYAML), each with its share
// of the load.
var tenantNames = []string{"acme", "umbrella", "initech", "globex"}

var tenantShare = []float64{0.40, 0.325, 0.20, 0.075}

// A submission's path.
const (
	pathAPI     = "api"     // POST /v1/jobs on a replica (RabbitMQ or Kafka)
	pathBroker  = "broker"  // published straight to RabbitMQ or Kafka
	pathGateway = "gateway" // POST /v1/chat/completions, waiting for the answer
)

// load submits jobs from several tenants: async jobs through the API
// replicas and straight to the brokers, gateway calls, and duplicates of
// jobs already accepted.
type load struct {
	s    *soak
	rng  *rand.Rand
	http *http.Client
	gw   chan struct{} // gateway calls in flight
	sem  chan struct{} // submissions in flight

	mu        sync.Mutex
	seq       int
	accepted  map[string]sent // "tenant/id"
	order     []string
	submitted map[string]int
	gwCalls   int
	gwOK      int
	gwMax     time.Duration // the longest gateway call
	gwFailed  map[string]int
}

// gatewayTimeout bounds a submission: a gateway call waits for its job,
// which may wait out a fault.
const gatewayTimeout = 2 * time.Minute

// sent is an accepted job and how it went, to send it again.
type sent struct {
	tenant, id, path, dest string
	replica                int
}

func newLoad(s *soak, seed uint64) *load {
	return &load{s: s, rng: rand.New(rand.NewPCG(seed, 0x10ad)), http: &http.Client{Timeout: gatewayTimeout},
		gw: make(chan struct{}, 16), sem: make(chan struct{}, 64),
		accepted: map[string]sent{}, submitted: map[string]int{}, gwFailed: map[string]int{}}
}

// run submits at the soak's rate until ctx ends, then waits for the
// submissions in flight.
func (l *load) run(ctx context.Context) {
	every := time.Duration(float64(time.Second) / l.s.cfg.Rate)
	t := time.NewTicker(every)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		job, dup := l.next()
		select {
		case l.sem <- struct{}{}:
		default:
			l.count("skipped (64 in flight)")
			continue
		}
		wg.Go(func() {
			defer func() { <-l.sem }()
			l.submit(job, dup)
		})
	}
}

// next draws the next submission: 10% a duplicate of an accepted job,
// else a new job of a tenant drawn by share on a path: 50% the API, 30%
// a broker, 20% the gateway.
func (l *load) next() (sent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.order) > 0 && l.rng.Float64() < 0.10 {
		return l.accepted[l.order[l.rng.IntN(len(l.order))]], true
	}
	x, tenant := l.rng.Float64(), tenantNames[len(tenantNames)-1]
	for i, share := range tenantShare {
		if x < share {
			tenant = tenantNames[i]
			break
		}
		x -= share
	}
	l.seq++
	j := sent{tenant: tenant, id: fmt.Sprintf("soak-%d-%d", l.s.cfg.Seed, l.seq), replica: l.rng.IntN(2)}
	switch x := l.rng.Float64(); {
	case x < 0.5:
		j.path = pathAPI
	case x < 0.8:
		j.path, j.dest = pathBroker, []string{"rabbitmq", "kafka"}[l.rng.IntN(2)]
	default:
		j.path = pathGateway
	}
	return j, false
}

// body is a job's chat completion request.
func body(id string) json.RawMessage {
	return json.RawMessage(`{"model":"` + model + `","max_tokens":128,"messages":[{"role":"user","content":"soak job ` + id + `: say something short"}]}`)
}

func (l *load) count(what string) {
	l.mu.Lock()
	l.submitted[what]++
	l.mu.Unlock()
}

func (l *load) accept(j sent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := j.tenant + "/" + j.id
	if _, ok := l.accepted[k]; !ok {
		l.accepted[k] = j
		l.order = append(l.order, k)
	}
}

// submit sends j (again when dup).
func (l *load) submit(j sent, dup bool) {
	label := j.path
	if j.path == pathBroker {
		label += " " + j.dest
	}
	if dup {
		label = "duplicate " + label
	}
	switch j.path {
	case pathAPI:
		b, _ := json.Marshal(map[string]any{"id": j.id, "body": body(j.id)})
		status, _ := l.post(j, "/v1/jobs", b)
		l.count(label + " " + status)
		if status == "202" || status == "200" {
			l.accept(j)
		}
	case pathBroker:
		b, _ := json.Marshal(map[string]any{"id": j.id, "tenant": j.tenant, "priority": "normal", "body": body(j.id)})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		msg := transport.Message{Key: []byte(j.id), Value: b}
		if err := l.s.pubs[j.dest].Publish(ctx, l.s.name, msg); err != nil {
			l.count(label + " failed")
			return
		}
		l.count(label + " published")
		l.accept(j)
	case pathGateway:
		if dup {
			return // a gateway call has no id of its own to repeat
		}
		select {
		case l.gw <- struct{}{}:
		default:
			l.count("gateway skipped (16 waiting)")
			return
		}
		defer func() { <-l.gw }()
		began := time.Now()
		status, _ := l.post(j, "/v1/chat/completions", body(j.id))
		l.count(label + " " + status)
		l.mu.Lock()
		l.gwMax = max(l.gwMax, time.Since(began))
		l.gwCalls++
		if status == "200" {
			l.gwOK++
		} else {
			l.gwFailed[status]++
		}
		l.mu.Unlock()
	}
}

// post sends b to path on j's API replica and returns the status ("no
// answer" or "timeout" when none came) and the body.
func (l *load) post(j sent, path string, b []byte) (string, []byte) {
	req, err := http.NewRequest(http.MethodPost, l.s.apiURLs[j.replica]+path, bytes.NewReader(b))
	if err != nil {
		return "error", nil
	}
	req.Header.Set("Authorization", "Bearer key-"+j.tenant)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.http.Do(req)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return "timeout", nil
	}
	if err != nil {
		return "no answer", nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return strconv.Itoa(resp.StatusCode), out
}

func (l *load) acceptedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

func (l *load) acceptedKeys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.order...)
}

// figures are the load's counts: submissions by path and answer, gateway
// calls made and answered 200, gateway failures by answer, the longest
// gateway call.
func (l *load) figures() (map[string]int, int, int, map[string]int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sub := make(map[string]int, len(l.submitted))
	for k, v := range l.submitted {
		sub[k] = v
	}
	failed := make(map[string]int, len(l.gwFailed))
	for k, v := range l.gwFailed {
		failed[k] = v
	}
	return sub, l.gwCalls, l.gwOK, failed, l.gwMax
}
