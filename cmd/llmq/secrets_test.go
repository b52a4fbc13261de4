package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store/storetest"
)

// Secrets planted in the URLs and keys; no command may print one.
const (
	dbSecret     = "S3cretDB"
	brokerSecret = "S3cretBR"
	upSecret     = "S3cretUP"
	openAIKey    = "sk-S3cretOpenAI-0123456789"
	apiKey       = "S3cretApiKey-0123456789"
)

var secrets = []string{dbSecret, brokerSecret, upSecret, openAIKey, apiKey}

// leafCommands returns the path of every command that runs (not the
// groups), e.g. ["dlq", "ls"].
func leafCommands(cmd *cobra.Command, path []string) [][]string {
	var out [][]string
	for _, c := range cmd.Commands() {
		p := append(append([]string(nil), path...), c.Name())
		if c.HasSubCommands() {
			out = append(out, leafCommands(c, p)...)
		} else if c.Runnable() && c.Name() != "help" && c.Name() != "completion" {
			out = append(out, p)
		}
	}
	return out
}

// extraArgs makes each command run far enough to open what it needs.
func extraArgs(t *testing.T, name string) []string {
	empty := filepath.Join(t.TempDir(), "jobs.jsonl")
	require.NoError(t, os.WriteFile(empty, []byte(`{"body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`+"\n"), 0o600))
	return map[string][]string{
		"worker":       {"--metrics-listen", ""},
		"api":          {"--listen", "127.0.0.1:0"},
		"produce":      {"--file", empty, "--wait=false"},
		"demo":         {"--listen", "127.0.0.1:0", "--jobs", "1", "--timeout", "20s"},
		"bench":        {"--out", t.TempDir(), "--only", "burst", "--scale", "0.01"},
		"soak":         {"--duration", "10s", "--rabbitmq-url", "amqp://guest:" + brokerSecret + "@127.0.0.1:1/"},
		"status":       {"no-such-job"},
		"batch show":   {"lb_none"},
		"batch cancel": {"lb_none"},
		"dlq show":     {"1"},
		"dlq replay":   {"1"},
		"dlq purge":    {"--all"},
	}[name]
}

// runLeaf runs one command in-process with a deadline and returns
// everything it printed and its error.
func runLeaf(t *testing.T, path, args []string, d time.Duration) (string, error) {
	t.Helper()
	return runLeafUntil(t, path, args, d, "")
}

// runLeafUntil is runLeaf that also stops the command once what it printed
// holds until (when until is not empty): a command that retries until it
// is stopped has shown what it prints by then.
func runLeafUntil(t *testing.T, path, args []string, d time.Duration, until string) (string, error) {
	t.Helper()
	root := newRootCmd()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := &output{until: until, seen: cancel}
	root.SetOut(out)
	root.SetErr(out)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(append(append([]string(nil), path...), args...))
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// output is what a command writes, from any of its goroutines; it calls
// seen once the text holds until.
type output struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	until string
	seen  func()
}

func (p *output) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, err := p.buf.Write(b)
	if p.until != "" && strings.Contains(p.buf.String(), p.until) {
		p.until = ""
		p.seen()
	}
	return n, err
}

func (p *output) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// requireNoSecret fails when a planted secret is in what a command printed
// or returned.
func requireNoSecret(t *testing.T, what, printed string, err error) {
	t.Helper()
	all := printed
	if err != nil {
		all += "\nerror: " + err.Error()
	}
	for _, s := range secrets {
		require.NotContains(t, all, s, "%s printed a secret:\n%s", what, all)
	}
}

// TestNoCommandPrintsASecret runs every command of the binary with
// passwords in the database, broker and upstream URLs and secret keys,
// where they cannot connect and where the URLs do not even parse, and checks
// that no password or key reaches the output, a log line or the error; and
// that no --help shows one in a default.
func TestNoCommandPrintsASecret(t *testing.T) {
	leaves := leafCommands(newRootCmd(), nil)
	require.GreaterOrEqual(t, len(leaves), 16, "every subcommand: %v", leaves)
	setEnv := func(db, broker, upstream string) {
		t.Setenv(config.EnvDatabaseURL, db)
		t.Setenv(config.EnvBroker, broker)
		t.Setenv(config.EnvOpenAIBaseURL, upstream)
		t.Setenv(config.EnvOpenAIAPIKey, openAIKey)
		t.Setenv(config.EnvAPIKeys, apiKey+":acme")
		t.Setenv(config.EnvConfig, "")
	}
	for _, round := range []struct {
		name              string
		db, broker, up    string
		benchPostgres     string
		wantErrorContains string
	}{{
		name:          "unreachable",
		db:            "postgres://postgres:" + dbSecret + "@127.0.0.1:1/llmq?sslmode=disable",
		broker:        "amqp://guest:" + brokerSecret + "@127.0.0.1:1/?queue=q",
		up:            "http://user:" + upSecret + "@127.0.0.1:1/v1",
		benchPostgres: "postgres://postgres:" + dbSecret + "@127.0.0.1:1/postgres?sslmode=disable",
	}, {
		name:          "unparsable",
		db:            "postgres://postgres:" + dbSecret + "%zz@127.0.0.1:1/llmq",
		broker:        "amqp://guest:" + brokerSecret + "%zz@127.0.0.1:1/?queue=q",
		up:            "http://user:" + upSecret + "%zz@127.0.0.1:1/v1",
		benchPostgres: "postgres://postgres:" + dbSecret + "%zz@127.0.0.1:1/postgres",
	}, {
		name:          "no scheme",
		db:            "postgres://postgres:" + dbSecret + "@127.0.0.1:1/llmq?sslmode=disable",
		broker:        "guest:" + brokerSecret + "@127.0.0.1:1",
		up:            "user:" + upSecret + "@127.0.0.1:1/v1",
		benchPostgres: "postgres://postgres:" + dbSecret + "@127.0.0.1:1/postgres?sslmode=disable",
	}} {
		setEnv(round.db, round.broker, round.up)
		for _, path := range leaves {
			name := strings.Join(path, " ")
			if name == "sim" {
				continue // no database, broker or upstream; it serves until interrupted
			}
			args := extraArgs(t, name)
			if name == "bench" || name == "soak" {
				args = append(args, "--database-url", round.benchPostgres)
			}
			// The worker and the API wait for an unreachable database,
			// retrying: their second retry's line is what they print.
			until := ""
			if round.name == "unreachable" && (name == "worker" || name == "api") {
				until = "attempt=2"
			}
			printed, err := runLeafUntil(t, path, args, 30*time.Second, until)
			require.Error(t, err, "%s (%s) must fail: nothing answers", name, round.name)
			requireNoSecret(t, name+" ("+round.name+")", printed, err)
		}
	}

	// Every --help, the flags' defaults included.
	for _, path := range append(leaves, []string{}) {
		printed, err := runLeaf(t, path, []string{"--help"}, 10*time.Second)
		require.NoError(t, err)
		require.NotContains(t, printed, "guest:guest", "%v --help shows the default broker's password", path)
		require.Contains(t, printed, "Usage:")
	}
}

// TestRunningCommandsPrintNoSecret starts the commands that reach the
// services with a database URL that carries a password (the local server
// trusts, so it is ignored) and a broker password RabbitMQ refuses: their
// logs, output and errors name neither.
func TestRunningCommandsPrintNoSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the worker, the API, produce and replay against the services; skipped with -short")
	}
	db := strings.Replace(storetest.NewDB(t), "postgres@", "postgres:"+dbSecret+"@", 1)
	require.Contains(t, db, dbSecret)
	t.Setenv(config.EnvDatabaseURL, db)
	t.Setenv(config.EnvBroker, "amqp://guest:"+brokerSecret+"@127.0.0.1:5672/?queue=llmq.secrets")
	t.Setenv(config.EnvOpenAIBaseURL, "http://user:"+upSecret+"@127.0.0.1:1/v1")
	t.Setenv(config.EnvOpenAIAPIKey, openAIKey)
	t.Setenv(config.EnvAPIKeys, apiKey+":acme")
	t.Setenv(config.EnvConfig, "")
	for _, name := range []string{"worker", "api", "produce", "dlq replay", "migrate"} {
		path := strings.Fields(name)
		// The API serves until its context ends; the others fail on the
		// broker or finish.
		printed, err := runLeaf(t, path, extraArgs(t, name), 5*time.Second)
		requireNoSecret(t, name, printed, err)
		if name == "api" || name == "worker" {
			// The refused password stops them at start-up, and the error
			// names the broker, redacted.
			require.ErrorContains(t, err, "(authentication failure): amqp://guest:xxxxx@127.0.0.1:5672/", name)
		}
	}

	// A worker that starts (on an embedded broker) logs its upstream.
	t.Setenv(config.EnvBroker, "embedded")
	printed, err := runLeaf(t, []string{"worker"}, extraArgs(t, "worker"), 5*time.Second)
	requireNoSecret(t, "worker (embedded)", printed, err)
	require.NoError(t, err)
	require.Contains(t, printed, "upstream=http://user:xxxxx@127.0.0.1:1/v1", "the worker logs its upstream, redacted")
}
