package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/config"
)

// TestPools: a model's key pool reads each entry's key from the file
// itself, a file, or an environment variable (and its _FILE variant),
// names the unnamed entries by their index, and every error names the
// entry's setting without showing a key.
func TestPools(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "key-b")
	require.NoError(t, os.WriteFile(keyFile, []byte("sk-from-file\n"), 0o600))
	e := map[string]string{"KEY_C": "sk-from-env", config.EnvConfig: writeYAML(t, `
models:
  gpt-4o: {rpm: 500}
pools:
  gpt-4o:
    - {name: openai, base_url: "https://api.openai.com/v1", api_key: sk-in-file, rpm: 500, tpm: 30000, concurrency: 8}
    - {base_url: "https://azure.example/openai/v1", api_key_file: `+keyFile+`, context_window: 8000, output_price_per_1m: 12}
    - {name: c, base_url: "http://127.0.0.1:8082/v1", api_key_env: KEY_C}
`)}
	c, err := config.Load(env(e), config.Flags{})
	require.NoError(t, err)
	pool := c.Pools["gpt-4o"]
	require.Len(t, pool, 3)
	require.Equal(t, []string{"openai", "1", "c"}, []string{pool[0].Name, pool[1].Name, pool[2].Name})
	require.Equal(t, []string{"sk-in-file", "sk-from-file", "sk-from-env"}, []string{pool[0].Key, pool[1].Key, pool[2].Key})
	require.Equal(t, config.PoolEntry{Name: "openai", BaseURL: "https://api.openai.com/v1", APIKey: "sk-in-file",
		RPM: 500, TPM: 30000, Concurrency: 8, Key: "sk-in-file"}, pool[0])
	require.Equal(t, 8000, pool[1].ContextWindow)
	require.InDelta(t, 12, pool[1].OutputPricePer1M, 0)

	for _, tc := range []struct {
		env        map[string]string
		pool, want string
	}{
		{pool: `[{base_url: "https://x/v1", api_key: k}]`, want: "pools.other: the model is not in models"},
		{pool: `[]`, want: "pools.m: want 1 to 16 entries; got 0"},
		{pool: `[{base_url: "https://x/v1"}]`, want: "pools.m[0]: set exactly one of api_key, api_key_file and api_key_env; got 0"},
		{pool: `[{base_url: "https://x/v1", api_key: sk-secret-one, api_key_env: K}]`, want: "pools.m[0]: set exactly one"},
		{pool: `[{base_url: "ftp://x", api_key: k}]`, want: "pools.m[0].base_url: "},
		{pool: `[{name: a, base_url: "https://x/v1", api_key: k}, {name: a, base_url: "https://y/v1", api_key: k}]`,
			want: `pools.m[1].name: must be 1-32 characters of [A-Za-z0-9._-], unique in the pool; got "a"`},
		{pool: `[{name: "a b", base_url: "https://x/v1", api_key: k}]`, want: "pools.m[0].name"},
		{pool: `[{base_url: "https://x/v1", api_key: k, tpm: -1}]`, want: "pools.m[0].tpm: must not be negative"},
		{pool: `[{base_url: "https://x/v1", api_key_env: UNSET}]`, want: "pools.m[0].api_key_env: UNSET (or UNSET_FILE) is empty or unset"},
		{pool: `[{base_url: "https://x/v1", api_key_file: /nonexistent/key}]`, want: "pools.m[0].api_key_file: "},
		{env: map[string]string{"K": "sk-a", "K_FILE": keyFile}, pool: `[{base_url: "https://x/v1", api_key_env: K}]`,
			want: "pools.m[0].api_key_env: invalid configuration: K and K_FILE are both set"},
	} {
		model := "m"
		if tc.want == "pools.other: the model is not in models" {
			model = "other"
		}
		e := map[string]string{config.EnvConfig: writeYAML(t, "models: {m: {}}\npools:\n  "+model+": "+tc.pool+"\n")}
		for k, v := range tc.env {
			e[k] = v
		}
		_, err := config.Load(env(e), config.Flags{})
		require.ErrorIs(t, err, config.ErrInvalid, tc.want)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "sk-", "no key in the error")
	}
}
