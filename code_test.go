package llmq_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The sizes a reader can hold in mind: a comment says what and why in a
// few lines and links to docs/ for the reasoning (a package's doc.go may
// run longer); a function fits on a screen or two.
const (
	commentLinesMax  = 10
	functionLinesMax = 80
)

// writeTree writes files (slash path to content) under a new temporary
// folder and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, src := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, path), []byte(src), 0o600))
	}
	return root
}

// longCode lists, in the non-test Go files under root, the comment blocks
// of more than commentLinesMax lines outside doc.go and the functions of
// more than functionLinesMax lines, as "path:line: what".
func longCode(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	lines := func(n ast.Node) int { return fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1 }
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if d.Name() != "doc.go" {
			for _, c := range f.Comments {
				if n := lines(c); n > commentLinesMax {
					out = append(out, fmt.Sprintf("%s:%d: a comment of %d lines", rel, fset.Position(c.Pos()).Line, n))
				}
			}
		}
		ast.Inspect(f, func(node ast.Node) bool {
			var name string
			switch fn := node.(type) {
			case *ast.FuncDecl:
				name = fn.Name.Name
			case *ast.FuncLit:
				name = "a function literal"
			default:
				return true
			}
			if n := lines(node); n > functionLinesMax {
				out = append(out, fmt.Sprintf("%s:%d: %s of %d lines", rel, fset.Position(node.Pos()).Line, name, n))
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestCodeShort: no comment block over commentLinesMax lines outside
// doc.go (the long reasoning lives in docs/design/), and no function over
// functionLinesMax lines outside tests.
func TestCodeShort(t *testing.T) {
	t.Parallel()
	require.Empty(t, longCode(t, "."), "shorten these: a comment links to docs/ for the reasoning; a long function is split")
}

// TestLongCodeFound holds the check itself: a long comment and a long
// function are found; a long doc.go comment, a long test and the short
// ones are not.
func TestLongCodeFound(t *testing.T) {
	t.Parallel()
	comment := func(n int) string { return strings.Repeat("// a line\n", n) }
	body := func(n int) string { return "{\n" + strings.Repeat("\t_ = 0\n", n-2) + "}\n" }
	root := writeTree(t, map[string]string{
		"x/x.go":      "package x\n\n" + comment(11) + "func f() " + body(81) + comment(10) + "func g() " + body(80),
		"x/lit.go":    "package x\n\nvar h = func() " + body(81),
		"x/doc.go":    comment(40) + "package x\n",
		"x/x_test.go": "package x\n\n" + comment(20) + "func k() " + body(200),
	})
	require.Equal(t, []string{
		"x/lit.go:3: a function literal of 81 lines",
		"x/x.go:3: a comment of 11 lines",
		"x/x.go:14: f of 81 lines",
	}, longCode(t, root))
}

// codePath is a repository path in a comment: folders, then a file with a
// known extension, or a docs/ note.
var codePath = regexp.MustCompile(`(?:^|[\s(\x60"])((?:[\w-]+/)+[\w.-]+\.(?:go|md|sql|yaml|yml|json))\b`)

// TestCodeNamesRealPaths: a path named in a comment of a non-test Go file,
// whose first folder is an entry of the repository root or of the file's
// folder, exists from there: comments follow the files they point to.
func TestCodeNamesRealPaths(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	require.NoError(t, filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && p != "."):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(p)
		for _, c := range f.Comments {
			for _, m := range codePath.FindAllStringSubmatch(c.Text(), -1) {
				first, _, _ := strings.Cut(m[1], "/")
				if !exists(first) && !exists(filepath.Join(dir, first)) {
					continue // another repository's file
				}
				if !exists(m[1]) && !exists(filepath.Join(dir, m[1])) {
					t.Errorf("%s:%d: %s: no such path from the repository root or %s/", p, fset.Position(c.Pos()).Line, m[1], dir)
				}
			}
		}
		return nil
	}))
}
