package llmq_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/llmq/llmq"

// layers are the module's packages, lowest first (paths relative to the
// module; "x/..." is x and every package below it). A package imports
// packages of its own layer and of the layers below, never one above, so
// the infrastructure never depends on a component and no component on an
// app. Every package of the module must be in the table: a new package is
// placed on purpose. Test files are exempt (a store test may run a worker).
var layers = []struct {
	name string
	pkgs []string
}{
	{"ground: the job contract and what is pure", []string{"", "shaping", "migrations", "internal/redact", "internal/tokencount", "internal/backoff",
		"internal/jsonlimit"}},
	{"infrastructure", []string{"store/...", "transport/...", "internal/config", "internal/background",
		"internal/upstreamsim", "internal/workload", "internal/chaos"}},
	{"components used by others", []string{"producer", "dlq"}},
	{"components", []string{"worker", "batchapi", "internal/retention"}},
	{"apps", []string{"internal/app/..."}},
	{"commands", []string{"cmd/llmq", "deploy"}},
}

// layerOf returns the index in layers of a package of the module, or -1.
func layerOf(importPath string) int {
	rel := strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
	for i, l := range layers {
		for _, p := range l.pkgs {
			if base, tree := strings.CutSuffix(p, "/..."); tree {
				if rel == base || strings.HasPrefix(rel, base+"/") {
					return i
				}
			} else if rel == p {
				return i
			}
		}
	}
	return -1
}

// pkg is what go list -json says of a package: its path and the imports
// of its non-test files.
type pkg struct {
	ImportPath string
	Imports    []string
}

// violations lists every package outside the table and every import of the
// module that runs upward.
func violations(pkgs []pkg) []string {
	var out []string
	inModule := func(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }
	for _, p := range pkgs {
		from := layerOf(p.ImportPath)
		if from < 0 {
			out = append(out, fmt.Sprintf("%s is in no layer: place it in layers_test.go", p.ImportPath))
			continue
		}
		for _, imp := range p.Imports {
			if !inModule(imp) {
				continue
			}
			if to := layerOf(imp); to > from {
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s), a layer above it",
					p.ImportPath, layers[from].name, imp, layers[to].name))
			}
		}
	}
	return out
}

// TestLayers checks the imports of every package of the module against the
// layer table.
func TestLayers(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
	require.Greater(t, len(pkgs), 20, "go list found the module's packages")
	require.Empty(t, violations(pkgs), "imports that run upward")
}

// TestLayersCatchUpwardImports holds the check itself: an upward import and
// an unplaced package are reported, imports within a layer, downward and
// outside the module are not.
func TestLayersCatchUpwardImports(t *testing.T) {
	t.Parallel()
	got := violations([]pkg{
		{module + "/store", []string{module, module + "/worker", "github.com/jackc/pgx/v5"}},
		{module + "/transport/kafka", []string{module + "/transport", module + "/internal/config"}},
		{module + "/worker", []string{module + "/batchapi", module + "/dlq", module + "/store"}},
		{module + "/internal/app/api", []string{module + "/producer", module + "/cmd/llmq"}},
		{module + "/internal/newthing", nil},
	})
	want := []string{
		module + "/store (infrastructure) imports " + module + "/worker (components), a layer above it",
		module + "/internal/app/api (apps) imports " + module + "/cmd/llmq (commands), a layer above it",
		module + "/internal/newthing is in no layer: place it in layers_test.go",
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got)
}
