package llmq_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// client is a package of another module that uses llmq as a library: it
// records and publishes a job with the producer and runs a worker on the
// same store and broker. It names no package under internal/, which another
// module cannot import. A library, not a program: compiling proves the API
// usable without the seconds a link takes.
const client = `package llmqclient

import (
	"context"
	"log/slog"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/worker"
)

// Run publishes one job and works the queue until ctx is done.
func Run(ctx context.Context, databaseURL, brokerURL string) error {
	st, err := store.Open(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	pub, sub, err := open.Open(ctx, brokerURL, open.Options{})
	if err != nil {
		return err
	}
	defer pub.Close()
	target, err := open.Parse(brokerURL)
	if err != nil {
		return err
	}

	p, err := producer.New(producer.Config{Publisher: pub, Store: st.Outbox(), Destination: target.Dest, DepthProbe: sub})
	if err != nil {
		return err
	}
	j, err := llmq.Decode([]byte(` + "`" + `{"body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}}` + "`" + `), llmq.DecodeOptions{})
	if err != nil {
		return err
	}
	if _, _, err := p.Publish(ctx, j); err != nil {
		return err
	}

	letters, err := dlq.NewWriter(dlq.Config{Store: st.DeadLetters(), Publisher: pub, Destination: target.Dest})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		Subscriber: sub, Store: st.Queue(), DeadLetters: letters,
		Upstream: worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: "http://127.0.0.1:8081/v1", APIKey: "sk-test"}), worker.ProviderOpenAI),
		Strategy: shaping.StrategyShape,
		Catalog:  llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {RPM: 500, TPM: 200000}}},
		Logger:   slog.Default(),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
`

// TestPublicAPIFromAnotherModule compiles client in a module of its own that
// requires llmq (replaced by this checkout): the producer, the worker and
// what they take (store, transport, dlq, shaping, the job contract) are
// usable from outside the module.
func TestPublicAPIFromAnotherModule(t *testing.T) {
	t.Parallel()
	root, err := os.Getwd()
	require.NoError(t, err)
	dir := t.TempDir()
	goMod := "module example.com/llmqclient\n\ngo 1.26.8\n\nrequire github.com/llmq/llmq v0.0.0\n\nreplace github.com/llmq/llmq => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o600))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "client.go"), []byte(client), 0o600))

	cmd := exec.Command("go", "build", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build in another module:\n%s", out)
}
