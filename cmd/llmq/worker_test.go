package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// buildLLMQ compiles the binary once per test into a temporary folder.
func buildLLMQ(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "llmq")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// TestWorkerKill9 kills a worker process with SIGKILL mid-run, restarts it,
// and checks that every job ends terminal with one result, and that the only
// upstream calls beyond one per job are those the dead worker had in flight.
func TestWorkerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	const n, inFlight = 600, 32
	bin := buildLLMQ(t)
	dbURL := storetest.NewDB(t)
	// Each call takes 100 ms, so about inFlight calls are always running.
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 9,
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}},
		Latency: upstreamsim.LatencyConfig{TTFT: 100 * time.Millisecond}})
	queue := rabbitmqtest.NewQueue(t)
	brokerURL := rabbitmqtest.BrokerURL(queue)

	pub, _, err := open.Open(context.Background(), brokerURL, open.Options{})
	require.NoError(t, err)
	defer pub.Close()
	ids := make([]string, n)
	msgs := make([]transport.Message, n)
	for i := range n {
		ids[i] = fmt.Sprintf("k9-%04d", i)
		msgs[i] = transport.Message{Value: []byte(fmt.Sprintf(
			`{"id":%q,"body":{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hi %d"}]}}`, ids[i], i))}
	}
	require.NoError(t, pub.Publish(context.Background(), queue, msgs...))

	st, err := store.Open(context.Background(), dbURL)
	require.NoError(t, err)
	defer st.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "worker", "--strategy", "retry", "--max-in-flight", fmt.Sprint(inFlight),
			"--metrics-listen", "", "--lease", "2s")
		cmd.Env = append(os.Environ(), "LLMQ_DATABASE_URL="+dbURL, "LLMQ_BROKER="+brokerURL,
			"OPENAI_BASE_URL="+sim.URL, "OPENAI_API_KEY=sk-test", "LLMQ_CONFIG=")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	countDone := func() int {
		var done int
		require.NoError(t, st.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM jobs WHERE status = 'succeeded'`).Scan(&done))
		return done
	}

	first := start()
	require.Eventually(t, func() bool { return countDone() >= n/3 }, 2*time.Minute, 50*time.Millisecond)
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	callsAtKill := sim.Sim.Stats().Total.Accepted

	second := start()
	t.Cleanup(func() {
		_ = second.Process.Signal(syscall.SIGTERM)
		_ = second.Wait()
	})
	require.Eventually(t, func() bool { return countDone() == n }, 3*time.Minute, 100*time.Millisecond)

	var terminal, results int
	require.NoError(t, st.Pool().QueryRow(context.Background(),
		`SELECT count(*) FILTER (WHERE status IN ('succeeded','failed','dead_lettered','expired','cancelled')),
		        count(*) FILTER (WHERE result IS NOT NULL) FROM jobs`).Scan(&terminal, &results))
	require.Equal(t, n, terminal)
	require.Equal(t, n, results, "one result per job")
	total := sim.Sim.Stats().Total.Accepted
	require.LessOrEqual(t, total-int64(n), int64(inFlight), "extra calls only for jobs in flight at the kill")
	t.Logf("calls: %d at kill, %d total for %d jobs (%d repeated)", callsAtKill, total, n, total-int64(n))
	rec, err := st.Jobs().Get(context.Background(), llmq.DefaultTenant, ids[0])
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
}
