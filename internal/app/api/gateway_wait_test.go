package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store"
)

// waiters is the number of callers of TestGatewayThousandWaiters.
const waiters = 1000

// TestGatewayThousandWaiters: a thousand gateway calls wait at once (no
// worker: their jobs stay queued). The database sees at most the pool's
// connections plus the one listening connection, the process stays under
// 300 MB, and when the jobs end each caller gets its own job's answer
// (one tenant: its cap on waiting calls is raised to let them). Not parallel: the memory measured is this test's (the callers' side
// included, so the API's own share is less); its bound is not checked
// under the race detector.
func TestGatewayThousandWaiters(t *testing.T) {
	b := gatewaySetup(t, api.GatewayConfig{MaxWaiting: waiters})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := openai.DefaultConfig(keyAcme)
	cfg.BaseURL = b.srv.URL + "/v1"
	cfg.HTTPClient = &http.Client{Timeout: 3 * time.Minute}
	client := openai.NewClientWithConfig(cfg)

	type answer struct {
		jobID, id, content string
		err                error
	}
	answers := make([]answer, waiters)
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	// The callers come in waves of 100, each waiting before the next
	// comes: a thousand at once would measure the producer's admission
	// under a burst, not the waiting.
	const wave = 100
	for from := 0; from < waiters; from += wave {
		for i := from; i < from+wave; i++ {
			wg.Go(func() {
				resp, err := client.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "caller "+strconv.Itoa(i)))
				answers[i].err = err
				if err != nil {
					failed.Add(1)
					return
				}
				answers[i].jobID, answers[i].id = resp.Header().Get(api.HeaderJobID), resp.ID
				answers[i].content = resp.Choices[0].Message.Content
			})
		}
		require.Eventually(t, func() bool {
			return failed.Load() > 0 || metricValue(t, b.reg, "llmq_gateway_waiting_callers", nil) == float64(from+wave)
		}, time.Minute, 20*time.Millisecond, "%d callers waiting", from+wave)
		if failed.Load() > 0 {
			cancel() // the others leave
			wg.Wait()
			for _, a := range answers {
				if a.err != nil && !errors.Is(a.err, context.Canceled) {
					t.Fatalf("a caller failed: %v", a.err)
				}
			}
		}
	}

	var conns int
	require.NoError(t, b.store.Pool().QueryRow(ctx,
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&conns))
	maxConns := int(b.store.Pool().Config().MaxConns)
	rss, peak := memoryKB(t)
	t.Logf("%d callers waiting: %d database connections (pool of %d + 1 listening), RSS %d MB (peak %d MB)",
		waiters, conns, maxConns, rss>>10, peak>>10)
	require.LessOrEqual(t, conns, maxConns+1)
	if peak > 0 && !raceDetector {
		require.Less(t, peak, 300<<10, "peak RSS in KB")
	}

	// End every job: each caller is woken with its own job's answer.
	rows, err := b.store.Pool().Query(ctx, `SELECT id FROM jobs WHERE tenant = 'acme'`)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, waiters)
	ended := time.Now()
	for _, id := range ids {
		_, err := b.store.Queue().StoreResult(ctx, store.Key{Tenant: "acme", ID: id}, store.Result{Response: []byte(fmt.Sprintf(
			`{"id":"chatcmpl-%s","object":"chat.completion","created":1,"model":"gpt-4o-mini",`+
				`"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, id, id))})
		require.NoError(t, err)
	}
	wg.Wait()
	t.Logf("every caller answered %s after the first job ended", time.Since(ended).Round(time.Millisecond))
	seen := map[string]bool{}
	for _, a := range answers {
		require.NoError(t, a.err)
		require.Equal(t, "chatcmpl-"+a.jobID, a.id, "the caller's own job")
		require.Equal(t, a.jobID, a.content)
		seen[a.jobID] = true
	}
	require.Len(t, seen, waiters)
	require.Zero(t, metricValue(t, b.reg, "llmq_gateway_waiting_callers", nil))
}

// memoryKB returns the process's resident set and its peak, in KB, from
// /proc/self/status; 0 and 0 where there is none.
func memoryKB(t *testing.T) (rss, peak int) {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(value), " kB"))
		switch name {
		case "VmRSS":
			rss = n
		case "VmHWM":
			peak = n
		}
	}
	require.NoError(t, sc.Err())
	return rss, peak
}
