package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store/storetest"
)

// procStatus reads a field in kB of /proc/<pid>/status (VmRSS, VmHWM).
func procStatus(t testing.TB, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(t, err)
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestAPIMemoryUnderHugeBatches runs `llmq api` and sends it eight
// parallel 16 MiB bodies of {"jobs":[0,0,...]}: the API stops reading at
// the 1,000-job limit and its peak RSS stays under 200 MB (the Kubernetes
// manifest allows 256 Mi).
func TestAPIMemoryUnderHugeBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	base, pid := startAPI(t, buildLLMQ(t))
	before := procStatus(t, pid, "VmRSS")

	// The review's attack, and its twin inside one job's body.
	const size = api.MaxBodyBytesDefault
	zeros := func(prefix, suffix string) []byte {
		body := make([]byte, 0, size)
		body = append(body, prefix...)
		body = append(body, '0')
		for len(body) < size-len(suffix)-2 {
			body = append(body, ",0"...)
		}
		return append(body, suffix...)
	}
	bodies := map[string][]byte{
		`{"jobs":[0,0,...]}`:                          zeros(`{"jobs":[`, `]}`),
		`{"body":{"model":"m","messages":[0,0,...]}}`: zeros(`{"body":{"model":"m","messages":[`, `]}}`),
	}
	for name, body := range bodies {
		require.LessOrEqual(t, len(body), size)
		var wg sync.WaitGroup
		codes := make([]int, 8)
		for i := range codes {
			wg.Go(func() {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/jobs", bytes.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Authorization", "Bearer key-rss")
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					codes[i] = -1
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			})
		}
		wg.Wait()
		peak := procStatus(t, pid, "VmHWM")
		t.Logf("llmq api RSS: %d MB before, peak %d MB after eight parallel %d MiB %s (codes %v)",
			before>>10, peak>>10, size>>20, name, codes)
		for _, c := range codes {
			require.Equal(t, http.StatusBadRequest, c)
		}
		require.Less(t, peak, int64(200<<10), "peak RSS %d MB", peak>>10)
	}
}

// hostileBodies are 16 MiB bodies of each shape that once made the API
// allocate in proportion to them: one object key, a long array, arrays
// nested deep, one long string, each where a job (or a gateway call)
// would hold it.
func hostileBodies(route string) map[string][]byte {
	const size = api.MaxBodyBytesDefault
	fill := func(prefix, unit, suffix string) []byte {
		body := append(make([]byte, 0, size), prefix...)
		for len(body)+len(unit)+len(suffix) <= size {
			body = append(body, unit...)
		}
		return append(body, suffix...)
	}
	// Inside a job's body on POST /v1/jobs; the request is the body on
	// the gateway.
	in := func(s string) string {
		if route == "/v1/jobs" {
			return `{"body":` + s
		}
		return s
	}
	out := func(s string) string {
		if route == "/v1/jobs" {
			return s + `}`
		}
		return s
	}
	pre, post := in(`{"model":"m","messages":`), out(`}`)
	depth := (size - len(pre) - len(post)) / 2
	return map[string][]byte{
		"object key":    fill(`{"`, "a", `":0}`),
		"array":         fill(in(`{"model":"m","messages":[0`), ",0", out(`]}`)),
		"nested arrays": []byte(pre + strings.Repeat("[", depth) + strings.Repeat("]", depth) + post),
		"long string":   fill(in(`{"model":"m","messages":[{"role":"user","content":"`), "a", out(`"}]}`)),
	}
}

// BenchmarkAPIMemoryHostileBodies runs `llmq api` and sends it, for each
// shape of hostileBodies and each of POST /v1/jobs and POST
// /v1/chat/completions, eight concurrent 16 MiB bodies while a client
// asks /healthz every 10 ms, each round on a new process. It reports the peak RSS of each round
// (peak_MB; the goal is under 200) and the /healthz calls that failed.
// Run: go test -run '^$' -bench APIMemoryHostile -benchtime 1x ./cmd/llmq
func BenchmarkAPIMemoryHostileBodies(b *testing.B) {
	bin := buildLLMQ(b)
	for _, route := range []string{"/v1/jobs", "/v1/chat/completions"} {
		bodies := hostileBodies(route)
		for _, shape := range []string{"object key", "array", "nested arrays", "long string"} {
			body := bodies[shape]
			b.Run(strings.TrimPrefix(route, "/v1/")+"/"+strings.ReplaceAll(shape, " ", "_"), func(b *testing.B) {
				var peak int64
				var healthFailed int
				codes := map[int]int{}
				// A process of its own: the runtime keeps what an earlier
				// round grew the heap to.
				base, pid := startAPI(b, bin)
				for b.Loop() {
					stop := make(chan struct{})
					var health sync.WaitGroup
					health.Go(func() {
						tick := time.NewTicker(10 * time.Millisecond)
						defer tick.Stop()
						client := &http.Client{Timeout: 2 * time.Second}
						for {
							select {
							case <-stop:
								return
							case <-tick.C:
							}
							resp, err := client.Get(base + "/healthz")
							if err != nil || resp.StatusCode != http.StatusOK {
								healthFailed++
							}
							if err == nil {
								resp.Body.Close()
							}
						}
					})
					var wg sync.WaitGroup
					var mu sync.Mutex
					for range 8 {
						wg.Go(func() {
							code := postBody(base+route, body)
							mu.Lock()
							codes[code]++
							mu.Unlock()
						})
					}
					wg.Wait()
					close(stop)
					health.Wait()
					peak = max(peak, procStatus(b, pid, "VmHWM"))
				}
				b.ReportMetric(float64(peak>>10), "peak_MB")
				b.ReportMetric(float64(healthFailed), "healthz_failed")
				b.Logf("%s %s: peak RSS %d MB, answers %v, /healthz failures %d", route, shape, peak>>10, codes, healthFailed)
			})
		}
	}
}

// startAPI runs `llmq api` on a free port with one key, key-rss of
// tenant acme, and returns its address and process id.
func startAPI(tb testing.TB, bin string) (string, int) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	addr := ln.Addr().String()
	require.NoError(tb, ln.Close())
	cmd := exec.Command(bin, "api", "--listen", addr, "--metrics-listen", "")
	cmd.Env = append(os.Environ(), "LLMQ_DATABASE_URL="+storetest.NewDB(tb), "LLMQ_BROKER=memory://rss/jobs",
		"LLMQ_API_KEYS=key-rss:acme", "LLMQ_CONFIG=", "GOMAXPROCS=2")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(tb, cmd.Start())
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := "http://" + addr
	require.Eventually(tb, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "api did not start: %s", &logs)
	return base, cmd.Process.Pid
}

// postBody posts body with key-rss and returns the status (-1: no answer).
func postBody(url string, body []byte) int {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return -1
	}
	req.Header.Set("Authorization", "Bearer key-rss")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
