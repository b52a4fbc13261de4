package config

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/redact"
)

// OperatorKey is an operator's HTTP API key and the name the audit log
// gives it (docs/design/tenants.md#tenants-as-data). In YAML it is a
// mapping {name: ops-alice, key: ...}, or a string: "ops-alice=KEY", or the
// bare key (its name is then "operator" and the first 8 hex digits of its
// SHA-256, as before names existed).
type OperatorKey struct {
	// Name is 1-128 characters of [A-Za-z0-9._:-], unique among the
	// operator keys; "" = derived from the key.
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

// UnmarshalYAML reads a mapping or a string (ParseOperatorKey).
func (k *OperatorKey) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*k = ParseOperatorKey(n.Value)
		return nil
	}
	type plain OperatorKey
	return n.Decode((*plain)(k))
}

// ParseOperatorKey reads "name=key" or a bare key. The part before the
// first "=" is a name when it is an id and the rest is not empty and does
// not start with "=": a base64 key's padding keeps it a bare key.
func ParseOperatorKey(s string) OperatorKey {
	s = strings.TrimSpace(s)
	if name, key, ok := strings.Cut(s, "="); ok && llmq.ValidID(name) && key != "" && !strings.HasPrefix(key, "=") {
		return OperatorKey{Name: name, Key: key}
	}
	return OperatorKey{Key: s}
}

// ParseOperatorKeys reads "name1=key1,key2"; blank entries are skipped.
func ParseOperatorKeys(s string) []OperatorKey {
	var out []OperatorKey
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, ParseOperatorKey(k))
		}
	}
	return out
}

// validateOperatorKeys checks each operator key: not empty, not a
// tenant's key, not listed twice; a name an id, not taken twice.
func (c *Config) validateOperatorKeys(bad func(setting, format string, args ...any)) {
	keys, names := map[string]int{}, map[string]int{}
	for i, k := range c.OperatorKeys {
		at := fmt.Sprintf("operator_keys[%d]", i)
		_, tenant := c.APIKeys[k.Key]
		first, dup := keys[k.Key]
		switch {
		case strings.TrimSpace(k.Key) == "":
			bad(at, "must not be empty")
		case tenant:
			bad(at, "key %q is also a tenant's key in api_keys: a key is one or the other", redact.Key(k.Key))
		case dup:
			bad(at, "key %q is listed twice (operator_keys[%d])", redact.Key(k.Key), first)
		}
		keys[k.Key] = i
		if k.Name == "" {
			continue
		}
		if !llmq.ValidID(k.Name) {
			bad(at+".name", "must be 1-%d characters of [A-Za-z0-9._:-]; got %q", llmq.MaxIDLength, k.Name)
		}
		if j, taken := names[k.Name]; taken {
			bad(at+".name", "%q names operator_keys[%d] too: each operator key has its own name", k.Name, j)
		}
		names[k.Name] = i
	}
}
