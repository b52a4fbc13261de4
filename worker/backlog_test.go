package worker_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/worker"
)

// backlogHeapGrowth bounds the worker's heap growth from a backlog of
// 10,000 queued jobs to one of 100,000: a worker that read the backlog's
// rows (90,000 more of about 500 bytes) would grow by some 45 MB.
const backlogHeapGrowth = 8 << 20

// backlogBundle records 10,000 queued jobs, then starts a worker over an
// unlimited simulator with a quota of 600 calls a minute: the lane claims
// about a second's worth of the backlog, runs steadily, the rest stays
// queued.
func backlogBundle(t testing.TB) *testBundle {
	t.Helper()
	tb := setup(t, upstreamsim.Config{Seed: 41, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	queueBacklog(t, tb, 1, 10_000)
	tb.start(t, func(c *worker.Config) {
		c.Strategy = shaping.StrategyRPM
		c.Catalog.Default = llmq.Model{RPM: 600}
	})
	return tb
}

// queueBacklog records the jobs backlog-from to backlog-to queued in
// Postgres, as the API's outbox records them past the ingest window (ten
// tenants, one model), then analyzes the table.
func queueBacklog(t testing.TB, tb *testBundle, from, to int) {
	t.Helper()
	ctx := context.Background()
	_, err := tb.store.Pool().Exec(ctx, `INSERT INTO jobs (tenant, id, status, priority, requested_model, body,
			created_at, updated_at, sched_key, est_prompt_tokens, est_output_tokens)
		SELECT 't' || (g % 10), 'backlog-' || g, 'queued', 'normal', 'gpt-4o-mini',
			jsonb_build_object('model', 'gpt-4o-mini', 'max_tokens', 32, 'messages',
				jsonb_build_array(jsonb_build_object('role', 'user', 'content', repeat('Summarise this sentence. ', 8) || g))),
			now(), now(), now(), 60, 32
		FROM generate_series($1::int, $2::int) g`, from, to)
	require.NoError(t, err)
	_, err = tb.store.Pool().Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
}

// memory is the process's memory once the worker runs steadily.
type memory struct {
	// HeapAlloc and HeapInuse are the Go heap's live objects and its spans
	// in use, after a collection.
	HeapAlloc, HeapInuse uint64
	// RSS is the resident set, /proc/self/status VmRSS (0 where there is
	// none).
	RSS uint64
}

// steadyMemory waits until the worker stores 20 more results (succeeded
// jobs grow, queued shrink), collects garbage and reads the memory.
func steadyMemory(t testing.TB, tb *testBundle) memory {
	t.Helper()
	done := tb.count(t, `status = 'succeeded'`)
	require.Eventually(t, func() bool { return tb.count(t, `status = 'succeeded'`) >= done+20 }, time.Minute, 10*time.Millisecond)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memory{HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, RSS: residentSet(t)}
}

// residentSet is VmRSS of /proc/self/status in bytes; 0 where there is
// no /proc.
func residentSet(t testing.TB) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	return 0
}

// TestWorkerMemoryIsFlatOverABacklog: with 10,000 and then 100,000 jobs
// queued in Postgres (recorded by the API's outbox, say) and a quota that
// lets the worker run a few of them, the worker claims what its lane can
// take, counts the ingest window up to the window, and its heap stays
// where it was. BenchmarkBacklogMemory takes it to 1,000,000.
func TestWorkerMemoryIsFlatOverABacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("records 100,000 jobs in Postgres")
	}
	tb := backlogBundle(t)
	steadyMemory(t, tb) // warm: lanes, connections, buffers
	at10k := steadyMemory(t, tb).HeapAlloc
	queueBacklog(t, tb, 10_001, 100_000)
	steadyMemory(t, tb)
	at100k := steadyMemory(t, tb).HeapAlloc
	t.Logf("heap in use: %d KiB at 10k queued, %d KiB at 100k", at10k>>10, at100k>>10)
	require.Less(t, int64(at100k)-int64(at10k), int64(backlogHeapGrowth), fmt.Sprintf("heap grew from %d to %d bytes", at10k, at100k))
	require.Greater(t, tb.count(t, `status = 'queued'`), 90_000, "the backlog stays queued in Postgres")
}

// BenchmarkBacklogMemory reports the worker's memory (Go heap in use and
// the process's RSS: the worker, its Postgres pool and the simulator; the
// broker runs in its own process) once it runs steadily over 10,000,
// 100,000 and 1,000,000 jobs queued in Postgres, the queue of record. It
// is one measurement, not a loop: run it with -benchtime 1x (make
// bench-backlog). It takes a few minutes, most of them recording rows.
func BenchmarkBacklogMemory(b *testing.B) {
	tb := backlogBundle(b)
	steadyMemory(b, tb) // warm: lanes, connections, buffers
	b.ResetTimer()
	queued := 10_000
	for _, level := range []struct {
		name string
		jobs int
	}{{"10k", 10_000}, {"100k", 100_000}, {"1M", 1_000_000}} {
		if level.jobs > queued {
			queueBacklog(b, tb, queued+1, level.jobs)
			queued = level.jobs
		}
		steadyMemory(b, tb)
		m := steadyMemory(b, tb)
		b.ReportMetric(float64(m.HeapInuse)/(1<<20), "heap-inuse-MiB@"+level.name)
		// What RSS holds beyond the same once the runtime returned its
		// free pages (debug.FreeOSMemory) is heap the collector freed
		// and has not given back yet.
		debug.FreeOSMemory()
		scavenged := residentSet(b)
		b.ReportMetric(float64(m.RSS)/(1<<20), "rss-MiB@"+level.name)
		b.ReportMetric(float64(scavenged)/(1<<20), "rss-scavenged-MiB@"+level.name)
		b.Logf("%s queued: heap alloc %.1f MiB, in use %.1f MiB, RSS %.1f MiB (%.1f MiB once free pages are returned)", level.name,
			float64(m.HeapAlloc)/(1<<20), float64(m.HeapInuse)/(1<<20), float64(m.RSS)/(1<<20), float64(scavenged)/(1<<20))
	}
	require.Greater(b, tb.count(b, `status = 'queued'`), 990_000, "the backlog stays queued in Postgres")
}
