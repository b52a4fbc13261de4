package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/llmq/llmq/internal/config"
)

// TestDeployFilesMatchTheBinary checks deploy/ against the real binary: the
// sample llmq.yaml loads, and every llmq command line in the compose file
// and the Kubernetes manifests names a real subcommand with real flags.
func TestDeployFilesMatchTheBinary(t *testing.T) {
	t.Parallel()
	env := map[string]string{config.EnvConfig: filepath.Join("..", "..", "deploy", "llmq.yaml")}
	_, err := config.Load(func(k string) string { return env[k] }, config.Flags{})
	require.NoError(t, err, "deploy/llmq.yaml")

	files := []string{"docker-compose.yml", "kubernetes/worker.yaml", "kubernetes/api.yaml"}
	var lines [][]string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("..", "..", "deploy", f))
		require.NoError(t, err)
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		for {
			var doc any
			if err := dec.Decode(&doc); err != nil {
				break
			}
			lines = append(lines, commandLines(doc)...)
		}
	}
	require.GreaterOrEqual(t, len(lines), 5, "sim, worker, api and migrate in compose; worker and api in Kubernetes")
	for _, args := range lines {
		root := newRootCmd()
		cmd, rest, err := root.Find(args)
		require.NoError(t, err, "%v", args)
		require.NotEqual(t, root, cmd, "%v names no subcommand", args)
		require.NoError(t, cmd.ParseFlags(rest), "%v", args)
		// A container must be reachable from outside: the deploy files
		// listen on every interface, and say so, since the defaults are
		// loopback.
		for _, name := range listenFlags[cmd.Name()] {
			f := cmd.Flags().Lookup(name)
			require.NotNil(t, f, "%v: no --%s", args, name)
			require.True(t, f.Changed, "%v must set --%s explicitly (the default is loopback)", args, name)
			require.True(t, strings.HasPrefix(f.Value.String(), "0.0.0.0:"), "%v: --%s %s", args, name, f.Value)
		}
	}
}

// listenFlags are the address flags of the commands that serve.
var listenFlags = map[string][]string{"api": {"listen", "metrics-listen"}, "worker": {"metrics-listen"}, "sim": {"listen"}}

// TestListenDefaultsAreLoopback: a command started by hand serves on
// 127.0.0.1 only, until an address says otherwise.
func TestListenDefaultsAreLoopback(t *testing.T) {
	t.Parallel()
	for cmdName, names := range listenFlags {
		cmd, _, err := newRootCmd().Find([]string{cmdName})
		require.NoError(t, err)
		for _, name := range names {
			def := cmd.Flags().Lookup(name).DefValue
			require.True(t, strings.HasPrefix(def, "127.0.0.1:"), "%s --%s defaults to %q", cmdName, name, def)
		}
	}
}

// commandLines finds the llmq invocations of a parsed YAML document: the
// string lists under "command" or "args" whose first word is a subcommand.
func commandLines(node any) [][]string {
	var out [][]string
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			if list, ok := v.([]any); ok && (k == "command" || k == "args") {
				if args := stringList(list); len(args) > 0 && isSubcommand(args[0]) {
					out = append(out, args)
					continue
				}
			}
			out = append(out, commandLines(v)...)
		}
	case []any:
		for _, v := range n {
			out = append(out, commandLines(v)...)
		}
	}
	return out
}

// stringList returns list as strings, or nil when an item is not a string.
func stringList(list []any) []string {
	out := make([]string, 0, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		out = append(out, s)
	}
	return out
}

func isSubcommand(name string) bool {
	for _, c := range newRootCmd().Commands() {
		if c.Name() == name {
			return true
		}
	}
	return false
}
