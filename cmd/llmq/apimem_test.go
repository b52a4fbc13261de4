package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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
func procStatus(t *testing.T, pid int, field string) int64 {
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
	bin := buildLLMQ(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := exec.Command(bin, "api", "--listen", addr)
	cmd.Env = append(os.Environ(), "LLMQ_DATABASE_URL="+storetest.NewDB(t), "LLMQ_BROKER=memory://rss/jobs",
		"LLMQ_API_KEYS=key-rss:acme", "LLMQ_CONFIG=", "GOMAXPROCS=2")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "api did not start: %s", &logs)
	pid := cmd.Process.Pid
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
