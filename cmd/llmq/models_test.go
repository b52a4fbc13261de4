package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store/storetest"
)

// TestModelsCommands: llmq apply makes the models match the file's
// models: (the diff first), refuses a fallback naming an unknown model and
// changes nothing, leaves the models alone for a file without models:;
// llmq models set changes the settings it names and creates a model, and
// refuses an unknown fallback; llmq models rm refuses a model another
// falls back to.
func TestModelsCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("Postgres")
	}
	t.Setenv("LLMQ_CONFIG", "")
	db := []string{"--database-url", storetest.NewDB(t)}
	dir := t.TempDir()
	write := func(name, content string) string {
		f := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(f, []byte(content), 0o600))
		return f
	}
	file := write("models.yaml", "models:\n  big: {rpm: 60, fallbacks: [small]}\n  small: {rpm: 600}\n")
	out, err := runLLMQ(t, append([]string{"apply", "-f", file, "--dry-run"}, db...)...)
	require.NoError(t, err, out)
	require.Equal(t, "+ model big {\"rpm\":60,\"fallbacks\":[\"small\"]}\n+ model small {\"rpm\":600}\n", out)
	out, err = runLLMQ(t, append([]string{"apply", "-f", file}, db...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "applied 2 changes")

	bad := write("bad.yaml", "models:\n  big: {rpm: 60, fallbacks: [smal]}\n  small: {rpm: 600}\n")
	_, err = runLLMQ(t, append([]string{"apply", "-f", bad}, db...)...)
	require.ErrorContains(t, err, `models.big.fallbacks[0]: "smal" is not in models (big, small)`)
	out, err = runLLMQ(t, append([]string{"apply", "-f", write("tenants.yaml", "tenants:\n  acme: {}\n")}, db...)...)
	require.NoError(t, err, out)
	require.Equal(t, "+ tenant acme {}\napplied 1 changes\n", out, "a file without models: leaves them")

	out, err = runLLMQ(t, append([]string{"models", "set", "big", "--tpm", "6000"}, db...)...)
	require.NoError(t, err, out)
	out, err = runLLMQ(t, append([]string{"models", "set", "new", "--rpm", "5", "--fallbacks", "big"}, db...)...)
	require.NoError(t, err, out)
	_, err = runLLMQ(t, append([]string{"models", "set", "new", "--fallbacks", "nope"}, db...)...)
	require.ErrorContains(t, err, `models.new.fallbacks[0]: "nope" is not in models`)
	_, err = runLLMQ(t, append([]string{"models", "set", "big", "--rpm", "-1"}, db...)...)
	require.ErrorContains(t, err, "models.big.rpm: must not be negative")
	out, err = runLLMQ(t, append([]string{"models", "ls"}, db...)...)
	require.NoError(t, err, out)
	require.Regexp(t, `big\s+60\s+6000\s+0\s+0\s+0\s+0\s+small\s+2`, out, "set changes the settings named")
	require.Regexp(t, `new\s+5\s+0\s+0\s+0\s+0\s+0\s+big\s+1`, out)
	_, err = runLLMQ(t, append([]string{"models", "rm", "small"}, db...)...)
	require.ErrorContains(t, err, `models.big.fallbacks[0]: "small" is not in models`)
	out, err = runLLMQ(t, append([]string{"models", "rm", "new"}, db...)...)
	require.NoError(t, err, out)
	out, err = runLLMQ(t, append([]string{"tenants", "audit"}, db...)...)
	require.NoError(t, err, out)
	for _, want := range []string{"delete  model   new", "update  model   big", "apply   model   small"} {
		require.Contains(t, out, want)
	}
}
