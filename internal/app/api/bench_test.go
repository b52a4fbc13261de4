package api_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// enqueueClients is the concurrency of BenchmarkEnqueue: callers each
// posting one job at a time (-enqueue.callers, 64 by default).
var enqueueClients = flag.Int("enqueue.callers", 64, "BenchmarkEnqueue: concurrent callers, each posting one job at a time")

// BenchmarkEnqueue measures POST /v1/jobs with one job per request, as
// *enqueueClients concurrent callers make them, over HTTP to the API with
// its real producer: the outbox in Postgres (store.Open, group commit) and
// RabbitMQ with publisher confirms. It reports jobs/s, the p99 latency of
// every POST and of all but each caller's first (p99-warm-ms), and the CPU
// per job of this process and of Postgres.
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	b.Cleanup(st.Close)
	queue := rabbitmqtest.NewQueue(b)
	pub, sub, err := open.Open(ctx, rabbitmqtest.BrokerURL(queue), open.Options{Logger: quiet})
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Close(); _ = pub.Close() })
	reg := prometheus.NewRegistry()
	p, err := producer.New(producer.Config{Publisher: pub, Store: st.Outbox(), Destination: queue, DepthProbe: sub,
		HardDepth: 1 << 40, SoftDepth: 1 << 39, Logger: quiet, Registerer: reg})
	require.NoError(b, err)
	// The door's limits are checked as a deployment's are, at rates no run
	// reaches: the defaults (6,000 a minute per key) refused 10,000 jobs
	// posted in seconds.
	doors := api.RateLimitConfig{KeyRPM: 1 << 30, TenantRPM: 1 << 30}
	a, err := api.New(api.Config{Producer: p, Store: st.Jobs(), Keys: map[string]string{keyAcme: "acme"}, RateLimits: doors,
		Logger: quiet, Registerer: reg})
	require.NoError(b, err)
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	prompt := strings.Repeat("Summarise this sentence in five words. ", 5)

	var next atomic.Int64
	lat := make([][]time.Duration, *enqueueClients)
	pgStart := pgCPU(b, st)
	procStart := procCPU(b, "self")
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := range *enqueueClients {
		wg.Go(func() {
			// Each caller keeps one connection and writes its requests on
			// it itself: the same HTTP/1.1 requests as net/http's client
			// sends, without its two goroutines per connection and their
			// hand-offs (a fifth of this process's CPU, which the server
			// measured here shares).
			var (
				conn net.Conn
				br   *bufio.Reader
				req  []byte
			)
			defer func() {
				if conn != nil {
					_ = conn.Close()
				}
			}()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				body := fmt.Sprintf(`{"id":"enq-%d","body":{"model":"gpt-4o-mini","max_tokens":32,"messages":[{"role":"user","content":"%s"}]}}`, i, prompt)
				req = fmt.Appendf(req[:0], "POST /v1/jobs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
					"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, keyAcme, len(body), body)
				start := time.Now()
				if conn == nil { // the first request dials, as a client's does
					var err error
					if conn, err = net.Dial("tcp", addr); err != nil {
						b.Error(err)
						return
					}
					br = bufio.NewReader(conn)
				}
				if _, err := conn.Write(req); err != nil {
					b.Error(err)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Error(err)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				lat[c] = append(lat[c], time.Since(start))
				switch {
				case err != nil:
					b.Error(err)
					return
				case resp.StatusCode != http.StatusAccepted:
					b.Errorf("POST /v1/jobs: HTTP %d", resp.StatusCode)
					return
				case resp.Close:
					b.Error("POST /v1/jobs: the server closed the connection")
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	procUsed := procCPU(b, "self") - procStart
	var pgUsed time.Duration
	for pid, cpu := range pgCPU(b, st) {
		pgUsed += cpu - pgStart[pid] // a backend started during the run: from 0
	}
	all := slices.Sorted(slices.Values(slices.Concat(lat...)))
	// Each caller's first POST dials its connection and, all callers at
	// once, waits for the pool's connections and the first measurement of
	// the queue: 64 of the slowest 100 of 10,000 jobs. p99-warm-ms leaves
	// them out: the steady state.
	var warm []time.Duration
	for _, l := range lat {
		if len(l) > 1 {
			warm = append(warm, l[1:]...)
		}
	}
	slices.Sort(warm)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	if len(warm) > 0 {
		b.ReportMetric(float64(warm[len(warm)*99/100].Microseconds())/1000, "p99-warm-ms")
	}
	b.ReportMetric(float64(procUsed.Microseconds())/float64(b.N), "proc-µs/job")
	b.ReportMetric(float64(pgUsed.Microseconds())/float64(b.N), "pg-µs/job")
	require.NoError(b, p.Drain(ctx))
	var published int
	require.NoError(b, st.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs WHERE published_at IS NOT NULL`).Scan(&published))
	require.Equal(b, b.N, published)
}

// procCPU is the CPU time (user and system) process pid ("self" for this
// one) has used, from /proc/pid/stat.
func procCPU(b *testing.B, pid string) time.Duration {
	b.Helper()
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	require.NoError(b, err)
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, err := strconv.ParseInt(f[11], 10, 64)
	require.NoError(b, err)
	stime, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(b, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// pgCPU is the CPU time of each Postgres backend of st's database (the
// server runs on this machine), by pid.
func pgCPU(b *testing.B, st *store.Store) map[string]time.Duration {
	b.Helper()
	rows, err := st.Pool().Query(context.Background(),
		`SELECT pid::text FROM pg_stat_activity WHERE datname = current_database()`)
	require.NoError(b, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(b, err)
	out := make(map[string]time.Duration, len(pids))
	for _, pid := range pids {
		out[pid] = procCPU(b, pid)
	}
	return out
}
