package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadOnlyCommandsListNoBroker: a command that only reads Postgres
// does not offer --broker or the upstream's flags, and a flag that takes a
// key says that ps shows it.
func TestReadOnlyCommandsListNoBroker(t *testing.T) {
	t.Parallel()
	for _, path := range [][]string{{"status"}, {"jobs", "ls"}, {"batch", "ls"}, {"batch", "show"}, {"dlq", "ls"}, {"dlq", "show"}, {"migrate"}} {
		cmd, _, err := newRootCmd().Find(path)
		require.NoError(t, err)
		require.NotNil(t, cmd.Flags().Lookup("database-url"), "%v", path)
		for _, name := range []string{"broker", "openai-base-url", "openai-api-key", "api-keys"} {
			require.Nil(t, cmd.Flags().Lookup(name), "%v offers --%s", path, name)
		}
	}
	for _, path := range [][]string{{"worker"}, {"api"}, {"batch", "cancel"}} {
		cmd, _, err := newRootCmd().Find(path)
		require.NoError(t, err)
		for _, name := range []string{"openai-api-key", "api-keys"} {
			if f := cmd.Flags().Lookup(name); f != nil {
				require.Contains(t, f.Usage, "shows in ps", "%v --%s", path, name)
			}
		}
	}
	cmd, _, err := newRootCmd().Find([]string{"worker"})
	require.NoError(t, err)
	require.Contains(t, cmd.Flags().Lookup("broker").Usage, "memory://")
}

// TestBenchDatabaseURL: bench takes --database-url like every command; the
// old --postgres-url still works, hidden.
func TestBenchDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"database-url", "postgres-url"} {
		cmd, _, err := newRootCmd().Find([]string{"bench"})
		require.NoError(t, err)
		require.NoError(t, cmd.ParseFlags([]string{"--" + name, "postgres://h/x"}))
		require.Equal(t, "postgres://h/x", cmd.Flags().Lookup("database-url").Value.String(), name)
	}
	out, err := runLeaf(t, []string{"bench"}, []string{"--help"}, 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, out, "--database-url")
	require.NotContains(t, out, "--postgres-url")
}
