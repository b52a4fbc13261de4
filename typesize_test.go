package llmq_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The size of a type a reader can hold in mind: a type with more methods
// or locks than these is several things, each of which should be a type of
// its own with its own configuration and tests (docs/architecture.md).
const (
	typeMethodsMax = 30
	typeMutexesMax = 2
)

// smallTypePackages are the packages whose types keep to those sizes, and
// the type of each whose pointer no free function may take (moving a
// method into a function that takes the type is not a split).
var smallTypePackages = map[string]string{
	"internal/tenancy":     "",
	"internal/webhook":     "",
	"dlq":                  "",
	"internal/upstreamsim": "",
	"internal/app/api":     "",
	"internal/app/console": "",
	"store":                "",
	"worker":               "Worker",
}

// bigTypes lists, in the non-test Go files of dir, the types with more
// than typeMethodsMax methods or typeMutexesMax mutex fields, and the free
// functions that take a *whole, as "what".
func bigTypes(t *testing.T, dir, whole string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	methods := map[string]int{}
	var out []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil {
					methods[receiverName(d.Recv.List[0].Type)]++
				} else if whole != "" && takesPointerTo(d.Type, whole) {
					out = append(out, fmt.Sprintf("func %s takes a *%s", d.Name.Name, whole))
				}
			case *ast.GenDecl:
				out = append(out, lockHeavy(d)...)
			}
		}
	}
	for name, n := range methods {
		if n > typeMethodsMax {
			out = append(out, fmt.Sprintf("type %s has %d methods", name, n))
		}
	}
	sort.Strings(out)
	return out
}

// receiverName is the base type name of a method's receiver.
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprintf("%T", e)
		}
	}
}

// takesPointerTo reports whether a function's parameters include a *name.
func takesPointerTo(ft *ast.FuncType, name string) bool {
	for _, p := range ft.Params.List {
		if s, ok := p.Type.(*ast.StarExpr); ok {
			if id, ok := s.X.(*ast.Ident); ok && id.Name == name {
				return true
			}
		}
	}
	return false
}

// lockHeavy lists the struct types of d with more than typeMutexesMax
// sync.Mutex or sync.RWMutex fields.
func lockHeavy(d *ast.GenDecl) []string {
	var out []string
	for _, spec := range d.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		n := 0
		for _, f := range st.Fields.List {
			if sel, ok := f.Type.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex") {
				n += max(len(f.Names), 1)
			}
		}
		if n > typeMutexesMax {
			out = append(out, fmt.Sprintf("type %s has %d mutexes", ts.Name.Name, n))
		}
	}
	return out
}

func TestTypesSmall(t *testing.T) {
	t.Parallel()
	for dir, whole := range smallTypePackages {
		assert.Empty(t, bigTypes(t, filepath.FromSlash(dir), whole), "%s: split these types", dir)
	}
}

// TestBigTypesFound checks the checker on a package that breaks each rule.
func TestBigTypesFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("package big\n\nimport \"sync\"\n\ntype W struct{ a, b sync.Mutex; c sync.RWMutex }\n\n")
	for i := range typeMethodsMax + 1 {
		fmt.Fprintf(&src, "func (w *W) M%d() {}\n", i)
	}
	src.WriteString("func use(w *W) {}\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.go"), []byte(src.String()), 0o600))
	require.Equal(t, []string{"func use takes a *W", "type W has 3 mutexes", "type W has 31 methods"},
		bigTypes(t, dir, "W"))
}
