package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
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

// k8sObject is what TestMetricsReachableByTheScraperOnly reads of a
// Kubernetes manifest: a Deployment's pod labels and ports, a
// NetworkPolicy's selector and ingress rules.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []struct {
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		PodSelector k8sSelector `yaml:"podSelector"`
		PolicyTypes []string    `yaml:"policyTypes"`
		Ingress     []struct {
			From []struct {
				PodSelector       *k8sSelector `yaml:"podSelector"`
				NamespaceSelector *k8sSelector `yaml:"namespaceSelector"`
				IPBlock           any          `yaml:"ipBlock"`
			} `yaml:"from"`
			Ports []struct {
				Port any `yaml:"port"`
			} `yaml:"ports"`
		} `yaml:"ingress"`
	} `yaml:"spec"`
}

type k8sSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []any             `yaml:"matchExpressions"`
}

// selects reports whether s selects a pod labelled labels.
func (s k8sSelector) selects(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return len(s.MatchExpressions) == 0
}

// TestMetricsReachableByTheScraperOnly: in what `kubectl apply -k
// deploy/kubernetes` creates, every pod's metrics port (per-tenant figures)
// is isolated by a NetworkPolicy that lets in Prometheus pods alone, and the
// API's http port stays open to its clients.
func TestMetricsReachableByTheScraperOnly(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var kustomization struct {
		Resources []string `yaml:"resources"`
	}
	require.NoError(t, yaml.Unmarshal(data, &kustomization))
	var deployments, policies []k8sObject
	for _, f := range kustomization.Resources {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		for {
			var o k8sObject
			if err := dec.Decode(&o); err != nil {
				require.ErrorIs(t, err, io.EOF, f)
				break
			}
			switch o.Kind {
			case "Deployment":
				deployments = append(deployments, o)
			case "NetworkPolicy":
				policies = append(policies, o)
			}
		}
	}
	require.Len(t, deployments, 2, "worker and api")
	scraper := map[string]string{"app.kubernetes.io/name": "prometheus"}
	for _, d := range deployments {
		labels := d.Spec.Template.Metadata.Labels
		ports := map[string]int{}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
		}
		require.Contains(t, ports, "metrics", d.Metadata.Name)
		// open[port] lists the sources of the rules that let port in; a
		// rule without sources lets everyone in.
		open := map[string][][]map[string]string{}
		isolated := false
		for _, p := range policies {
			if !p.Spec.PodSelector.selects(labels) {
				continue
			}
			isolated = isolated || slices.Contains(p.Spec.PolicyTypes, "Ingress")
			for _, rule := range p.Spec.Ingress {
				var from []map[string]string
				for _, peer := range rule.From {
					require.Nil(t, peer.IPBlock, "%s: a source by address", p.Metadata.Name)
					require.NotNil(t, peer.PodSelector, "%s: a source that is not a pod", p.Metadata.Name)
					from = append(from, peer.PodSelector.MatchLabels)
				}
				for name, number := range ports {
					allowed := len(rule.Ports) == 0
					for _, rp := range rule.Ports {
						allowed = allowed || rp.Port == name || rp.Port == number
					}
					if allowed {
						open[name] = append(open[name], from)
					}
				}
			}
		}
		require.True(t, isolated, "%s: no NetworkPolicy isolates its pods", d.Metadata.Name)
		require.NotEmpty(t, open["metrics"], "%s: nothing reaches the metrics port, not even the scraper", d.Metadata.Name)
		for _, from := range open["metrics"] {
			require.Equal(t, []map[string]string{scraper}, from, "%s: the metrics port takes others than the scraper", d.Metadata.Name)
		}
		if _, ok := ports["http"]; ok {
			require.Contains(t, open["http"], []map[string]string(nil), "%s: clients reach the http port", d.Metadata.Name)
		}
	}
}
