package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store/storetest"
)

// TestTenancyCommands: llmq apply prints the diff and changes nothing with
// --dry-run, then makes Postgres match the file; llmq tenants pauses a
// project; llmq keys creates a key (printed once), refuses its name
// again, and revokes it; the audit log lists it all, never a key.
func TestTenancyCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("Postgres")
	}
	t.Setenv("LLMQ_CONFIG", "")
	db := []string{"--database-url", storetest.NewDB(t)}
	file := filepath.Join(t.TempDir(), "tenants.yaml")
	require.NoError(t, os.WriteFile(file, []byte("tenants:\n  acme:\n    tpm: 4000\n    projects:\n      bulk: {rpm: 5}\n  globex: {weight: 2}\n"), 0o600))

	out, err := runLLMQ(t, append([]string{"apply", "-f", file, "--dry-run"}, db...)...)
	require.NoError(t, err, out)
	require.Equal(t, `+ tenant acme {"tpm":4000}
+ project acme/bulk {"rpm":5}
+ tenant globex {"weight":2}
`, out)
	out, err = runLLMQ(t, append([]string{"tenants", "ls"}, db...)...)
	require.NoError(t, err, out)
	require.NotContains(t, out, "acme", "a dry run changes nothing")

	out, err = runLLMQ(t, append([]string{"apply", "-f", file}, db...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "applied 3 changes")
	out, err = runLLMQ(t, append([]string{"apply", "-f", file}, db...)...)
	require.NoError(t, err, out)
	require.Equal(t, "no change: the database matches the file\n", out)

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("tenants:\n  acme: {tpm: -1}\n"), 0o600))
	_, err = runLLMQ(t, append([]string{"apply", "-f", bad}, db...)...)
	require.ErrorContains(t, err, "tenants.acme.tpm: must be a finite number, not negative")

	out, err = runLLMQ(t, append([]string{"tenants", "pause", "acme", "--project", "bulk"}, db...)...)
	require.NoError(t, err, out)
	out, err = runLLMQ(t, append([]string{"tenants", "ls"}, db...)...)
	require.NoError(t, err, out)
	require.Regexp(t, `acme\s+bulk\s+true`, out)

	out, err = runLLMQ(t, append([]string{"keys", "create", "ci", "--tenant", "acme"}, db...)...)
	require.NoError(t, err, out)
	key := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	require.True(t, strings.HasPrefix(key, "llmq_"), out)
	_, err = runLLMQ(t, append([]string{"keys", "create", "ci", "--tenant", "acme"}, db...)...)
	require.ErrorContains(t, err, `"ci" is taken`)
	out, err = runLLMQ(t, append([]string{"keys", "revoke", "ci"}, db...)...)
	require.NoError(t, err, out)
	out, err = runLLMQ(t, append([]string{"keys", "ls"}, db...)...)
	require.NoError(t, err, out)
	require.NotContains(t, out, key)
	require.Regexp(t, `ci\s+acme\s+\S+\s+-\s+-\s+\d{4}-`, out, "revoked")

	out, err = runLLMQ(t, append([]string{"tenants", "audit"}, db...)...)
	require.NoError(t, err, out)
	require.NotContains(t, out, key)
	for _, want := range []string{"revoke  key", "create  key", "update  project  acme/bulk", "apply   tenant   globex"} {
		require.Contains(t, out, want)
	}
}
