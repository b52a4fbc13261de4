package llmq_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os/exec"
	"path/filepath"
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
		"internal/upstreamsim", "internal/workload", "internal/chaos", "internal/tracing/...", "internal/webhook"}},
	{"components used by others", []string{"producer", "dlq", "internal/tenancy", "internal/tenantroutes"}},
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

// appFiles parses, with mode, each non-test Go file under root outside
// store/ and migrations/, and hands it to fn with its slash path.
func appFiles(t *testing.T, root string, mode parser.Mode, fn func(fset *token.FileSet, rel string, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "store" || rel == "migrations" || rel == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, mode)
		if err != nil {
			return err
		}
		fn(fset, filepath.ToSlash(rel), f)
		return nil
	})
	require.NoError(t, err)
}

// poolCallers lists every call of a method Pool() with no arguments (the
// store's pool) in the app files (appFiles), as "path:line".
func poolCallers(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	appFiles(t, root, parser.SkipObjectResolution, func(fset *token.FileSet, rel string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok && len(c.Args) == 0 {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Pool" {
					out = append(out, fmt.Sprintf("%s:%d", rel, fset.Position(c.Pos()).Line))
				}
			}
			return true
		})
	})
	return out
}

// TestAppsGoThroughTheStore: outside store/ and migrations/, no non-test
// code reaches the store's pool (Store.Pool): every query is a method of
// the store, in the file of its aggregate. Tests may read the pool.
func TestAppsGoThroughTheStore(t *testing.T) {
	t.Parallel()
	require.Empty(t, poolCallers(t, "."), "calls of Pool() outside store/ and migrations/")
}

// TestPoolCallersFound holds the check itself: a call in an app is found,
// one in store/, migrations/ or a test file is not.
func TestPoolCallersFound(t *testing.T) {
	t.Parallel()
	root := writeTree(t, map[string]string{
		"internal/app/x/x.go":      "package x\nfunc f(s interface{ Pool() int }) int {\n\treturn s.Pool()\n}\n",
		"internal/app/x/x_test.go": "package x\nfunc g(s interface{ Pool() int }) int { return s.Pool() }\n",
		"store/store.go":           "package store\nfunc h(s interface{ Pool() int }) int { return s.Pool() }\n",
		"migrations/m.go":          "package migrations\nfunc h(s interface{ Pool() int }) int { return s.Pool() }\n",
		"cmd/c/c.go":               "package main\nfunc Pool(n int) int { return n }\nfunc main() { _ = Pool(1) }\n",
	})
	require.Equal(t, []string{"internal/app/x/x.go:3"}, poolCallers(t, root))
}

// ownPools are the files outside store/ and migrations/ that open a pool
// or connection of their own, and why: the soak audits the database apart
// from the store it checks, and the benchmarks read Postgres' own
// statistics, load a backlog of a million rows and drop their databases.
// Any other file reaches Postgres through the store.
var ownPools = map[string]string{
	"internal/app/soak/soak.go":        "the soak's auditor and its database",
	"internal/app/bench/runner.go":     "drops a run's database",
	"internal/app/bench/throughput.go": "waits on the jobs of a throughput run",
	"internal/app/bench/fleet.go":      "reads pg_stat_database and pg_stat_activity",
	"internal/app/bench/million.go":    "loads a backlog of a million rows",
}

// poolOpeners lists the app files (appFiles) that import pgx or pgxpool
// (a connection or pool of their own), as paths.
func poolOpeners(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	appFiles(t, root, parser.ImportsOnly, func(_ *token.FileSet, rel string, f *ast.File) {
		for _, im := range f.Imports {
			if p := strings.Trim(im.Path.Value, `"`); p == "github.com/jackc/pgx/v5" || p == "github.com/jackc/pgx/v5/pgxpool" {
				out = append(out, rel)
				break
			}
		}
	})
	return out
}

// TestAppsOpenNoPool: outside store/ and migrations/, the files of
// ownPools, and they only, open a Postgres pool or connection of their
// own (a file that stops doing so leaves the list).
func TestAppsOpenNoPool(t *testing.T) {
	t.Parallel()
	got := poolOpeners(t, ".")
	slices.Sort(got)
	require.Equal(t, slices.Sorted(maps.Keys(ownPools)), got, "a file opens a pool of its own: query through the store")
}

// TestPoolOpenersFound holds the check itself: an app importing pgxpool is
// found, a test file or the store is not.
func TestPoolOpenersFound(t *testing.T) {
	t.Parallel()
	root := writeTree(t, map[string]string{
		"internal/app/x/x.go":      "package x\nimport _ \"github.com/jackc/pgx/v5/pgxpool\"\n",
		"internal/app/x/y.go":      "package x\nimport _ \"github.com/jackc/pgx/v5/pgconn\"\n",
		"internal/app/x/x_test.go": "package x\nimport _ \"github.com/jackc/pgx/v5\"\n",
		"store/store.go":           "package store\nimport _ \"github.com/jackc/pgx/v5/pgxpool\"\n",
	})
	require.Equal(t, []string{"internal/app/x/x.go"}, poolOpeners(t, root))
}
