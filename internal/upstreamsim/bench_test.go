package upstreamsim

import (
	"bytes"
	"context"
	openai "github.com/sashabaranov/go-openai"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkChatLoopback measures tiny non-streaming completions per second
// over loopback with zero latency, load generator included:
//
//	go test -run '^$' -bench ChatLoopback -benchtime 5s ./internal/upstreamsim/
func BenchmarkChatLoopback(b *testing.B) {
	ts := NewTestServer(b, Config{
		Default: ModelConfig{Limits: Limits{RPM: -1, TPM: -1}},
		Output:  OutputConfig{Distribution: DistFixed, Min: 1, Max: 5, Mean: 5},
	})
	const workers = 32
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: workers * 2, MaxIdleConnsPerHost: workers * 2, IdleConnTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],"max_tokens":5,"stream":false}`)
	url := ts.URL + "/chat/completions"
	var next, failed atomic.Int64
	b.ResetTimer()
	cpu0 := processCPU(b)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for next.Add(1) <= int64(b.N) {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				req.Header.Set("Authorization", "Bearer sk-bench")
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				for {
					if _, err := resp.Body.Read(buf); err != nil {
						break
					}
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d requests failed", failed.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	// CPU per request (server + load generator) tells what the 2 cores can
	// do when other processes do not compete for them.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
	if got := ts.Sim.Stats().Total.Succeeded; got != int64(b.N) {
		b.Fatalf("simulator counted %d, sent %d", got, b.N)
	}
}

// BenchmarkChatGoOpenAI is BenchmarkChatLoopback through go-openai, the
// client the worker uses.
func BenchmarkChatGoOpenAI(b *testing.B) {
	ts := NewTestServer(b, Config{
		Default: ModelConfig{Limits: Limits{RPM: -1, TPM: -1}},
		Output:  OutputConfig{Distribution: DistFixed, Min: 1, Max: 5, Mean: 5},
	})
	const workers = 32
	tr := &http.Transport{MaxIdleConns: workers * 2, MaxIdleConnsPerHost: workers * 2, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	cfg := ts.ClientConfig("sk-bench")
	cfg.HTTPClient = &http.Client{Transport: tr}
	client := openai.NewClientWithConfig(cfg)
	req := chatReq("gpt-4o-mini", "Say hi", 5)
	var next, failed atomic.Int64
	b.ResetTimer()
	cpu0 := processCPU(b)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := client.CreateChatCompletion(context.Background(), req); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d requests failed", failed.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	// CPU per request (server + load generator) tells what the 2 cores can
	// do when other processes do not compete for them.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
}

// processCPU returns the user + system CPU time of this process.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
