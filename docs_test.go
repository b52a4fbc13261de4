package llmq_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	docLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docSpan = regexp.MustCompile("`([^`]+)`")
	// goSymbol is `pkg/path.Symbol`: the package's folder is the path.
	goSymbol = regexp.MustCompile(`^(.+/[^/.]+)\.[A-Z]\w*$`)
)

// docFileExts make a bare name in backticks a file name.
var docFileExts = []string{".go", ".md", ".sql", ".yaml", ".yml", ".json", ".png", ".txt", ".sh", ".mod"}

// TestDocsNameRealPaths holds README.md and docs/ to the repository. A
// link's target (less its #fragment; URLs skipped) must exist from the
// doc's folder. A code span outside fenced blocks, with no space, glob or
// placeholder character, is a path when its first segment is an entry of
// the repository root or of the doc's folder (it must exist from there),
// or a bare file name with a known extension (it must exist somewhere, or
// be named in one of the doc's own fenced blocks: a file its commands write).
func TestDocsNameRealPaths(t *testing.T) {
	t.Parallel()
	docs := []string{"README.md"}
	baseNames := map[string]bool{}
	require.NoError(t, filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.Name() == ".git" && d.IsDir():
			return filepath.SkipDir
		}
		baseNames[d.Name()] = true
		if strings.HasPrefix(p, "docs/") && strings.HasSuffix(p, ".md") {
			docs = append(docs, p)
		}
		return nil
	}))
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		require.NoError(t, err)
		dir := path.Dir(doc)
		lines := strings.Split(string(data), "\n")
		var blocks strings.Builder
		fenced := false
		for _, line := range lines {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			} else if fenced {
				blocks.WriteString(line + "\n")
			}
		}
		for n, line := range lines {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, m := range docLink.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, ":") {
					continue
				}
				if !exists(path.Join(dir, target)) {
					t.Errorf("%s:%d: link to %s: no such file from %s/", doc, n+1, m[1], dir)
				}
			}
			for _, m := range docSpan.FindAllStringSubmatch(line, -1) {
				p := strings.TrimSuffix(m[1], "/")
				if p == "" || strings.ContainsAny(p, " *?{}[]<>$=:@,|\\") || strings.HasPrefix(p, "/") {
					continue
				}
				first, _, nested := strings.Cut(p, "/")
				switch {
				case nested && (exists(first) || exists(path.Join(dir, first))):
					if s := goSymbol.FindStringSubmatch(p); s != nil {
						p = s[1]
					}
					if !exists(p) && !exists(path.Join(dir, p)) {
						t.Errorf("%s:%d: `%s`: no such path from the repository root or %s/", doc, n+1, m[1], dir)
					}
				case !nested && slices.Contains(docFileExts, path.Ext(p)) && !strings.HasPrefix(p, "."):
					if !baseNames[p] && !strings.Contains(blocks.String(), p) {
						t.Errorf("%s:%d: `%s`: no file of that name in the repository", doc, n+1, m[1])
					}
				}
			}
		}
	}
}

// projectOnly finds what the code and docs must not name: tracker items
// (an issue's number, "#N", the tracker's item itself) and the notes the
// project began from, kept apart from the repository (its seeds, design
// card, platform notes and API reference). The design note that holds the
// reasoning is named instead.
var projectOnly = regexp.MustCompile(`(?i)\bissues? #?[0-9]+|\bthe issue\b|\bseed 00[0-9]|\bseed documents?\b|(^|[\s(])#[0-9]+\b|` +
	`\bproject's (design document|platform notes|openai api reference)|\boutside the repository\b`)

// mayNameProjectOnly reports whether line holds a word every match of
// projectOnly contains: "issue", "seed", "#", "project's" or "outside".
func mayNameProjectOnly(line string) bool {
	if strings.Contains(line, "#") {
		return true
	}
	l := strings.ToLower(line)
	return strings.Contains(l, "issue") || strings.Contains(l, "seed") || strings.Contains(l, "project's") ||
		strings.Contains(l, "outside")
}

// TestDocsNameNoTrackerOrSeed holds README.md, docs/ and every Go file
// (comments and text alike) to projectOnly.
func TestDocsNameNoTrackerOrSeed(t *testing.T) {
	t.Parallel()
	require.NoError(t, filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules"):
			return filepath.SkipDir
		case d.IsDir() || !(p == "README.md" || strings.HasPrefix(p, "docs/") && path.Ext(p) == ".md" || path.Ext(p) == ".go"):
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// The expression runs only on lines that hold one of its words:
		// run on every line of every file, it took most of a minute with
		// -race.
		for n, line := range strings.Split(string(data), "\n") {
			if !mayNameProjectOnly(line) {
				continue
			}
			if m := projectOnly.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: name the design note (docs/design/*.md) instead", p, n+1, strings.TrimSpace(m))
			}
		}
		return nil
	}))
}

// TestDocsMigrationCount: docs/architecture.md states how many migrations
// there are, and the count is migrations/'s.
func TestDocsMigrationCount(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("docs/architecture.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`the (\d+) numbered migrations`).FindSubmatch(data)
	require.NotNil(t, m, "docs/architecture.md states no count of migrations")
	ups, err := filepath.Glob("migrations/*.up.sql")
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(len(ups)), string(m[1]), "the count of migrations in docs/architecture.md")
}

var (
	// docAnchorRef is a design note named with a section in Go code:
	// docs/….md#section.
	docAnchorRef = regexp.MustCompile(`\bdocs/[\w./-]+\.md(#[\w-]+)?`)
	docHeading   = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
	slugDrop     = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// docAnchors returns the anchors of a Markdown file's headings, as
// GitHub makes them: lower case, punctuation dropped, spaces as hyphens, a
// repeated one suffixed -1, -2, ...
func docAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	anchors, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		m := docHeading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// TestDocsSectionsExist: a link to a section of a Markdown file (from
// README.md or docs/, "](file.md#section)" or "](#section)") and a design
// note named with its section in Go code ("docs/….md#section") lead to a
// heading of that file; a note named in Go code exists.
func TestDocsSectionsExist(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{}
	check := func(where, file, frag string) {
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s: %s: no such file", where, file)
			return
		}
		if frag == "" || path.Ext(file) != ".md" {
			return
		}
		if anchors[file] == nil {
			anchors[file] = docAnchors(t, file)
		}
		if !anchors[file][frag] {
			t.Errorf("%s: %s has no section #%s", where, file, frag)
		}
	}
	require.NoError(t, filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir():
			return nil
		}
		isDoc := p == "README.md" || strings.HasPrefix(p, "docs/") && path.Ext(p) == ".md"
		if !isDoc && path.Ext(p) != ".go" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for n, line := range strings.Split(string(data), "\n") {
			// What the expressions need before they run: a line of
			// neither kind is most lines, and the expressions on every
			// line took seconds with -race.
			if isDoc && !strings.Contains(line, "](") || !isDoc && !strings.Contains(line, "docs/") {
				continue
			}
			where := p + ":" + strconv.Itoa(n+1)
			if !isDoc {
				for _, m := range docAnchorRef.FindAllStringSubmatch(line, -1) {
					file, frag, _ := strings.Cut(m[0], "#")
					check(where, file, frag)
				}
				continue
			}
			for _, m := range docLink.FindAllStringSubmatch(line, -1) {
				target, frag, ok := strings.Cut(m[1], "#")
				if !ok || strings.Contains(target, ":") {
					continue
				}
				file := p
				if target != "" {
					file = path.Join(path.Dir(p), target)
				}
				check(where, file, frag)
			}
		}
		return nil
	}))
}

// migrationRef is a migration named by its number: "migration 0020",
// "migrations 0017 and 0018".
var migrationRef = regexp.MustCompile(`(?i)\bmigrations? ((?:\d{4}(?:,? and |, | to |-|–)?)+)`)

// TestDocsMigrationsNamedExist: a migration named by its number in
// README.md, docs/ or Go code is a file of migrations/.
func TestDocsMigrationsNamedExist(t *testing.T) {
	t.Parallel()
	require.NoError(t, filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !(p == "README.md" || strings.HasPrefix(p, "docs/") && path.Ext(p) == ".md" || path.Ext(p) == ".go"):
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for n, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(strings.ToLower(line), "migration") {
				continue // the expression's word: most of a minute with -race on every line
			}
			for _, m := range migrationRef.FindAllStringSubmatch(line, -1) {
				for _, num := range regexp.MustCompile(`\d{4}`).FindAllString(m[1], -1) {
					if ups, _ := filepath.Glob("migrations/" + num + "_*.up.sql"); len(ups) != 1 {
						t.Errorf("%s:%d: migration %s: no migrations/%s_*.up.sql", p, n+1, num, num)
					}
				}
			}
		}
		return nil
	}))
}

// docBarePath is a repository path written in prose, outside backticks:
// folders, then a file with a known extension.
var docBarePath = regexp.MustCompile(`(^|[\s(])((?:[\w-]+/)+[\w.-]+\.(?:go|md|sql|yaml|yml|json|png|txt|sh))\b`)

// TestDocsBarePathsExist: a path written in the prose of README.md or
// docs/ (outside code spans and fenced blocks, URLs skipped) whose first
// folder is an entry of the repository root or of the doc's folder exists
// from there.
func TestDocsBarePathsExist(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	more, err := filepath.Glob("docs/*/*.md")
	require.NoError(t, err)
	docs = append(append(docs, more...), "README.md")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		require.NoError(t, err)
		dir, fenced := path.Dir(doc), false
		for n, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			prose := docSpan.ReplaceAllString(line, "")
			for _, m := range docBarePath.FindAllStringSubmatch(prose, -1) {
				p := m[2]
				first, _, _ := strings.Cut(p, "/")
				if !exists(first) && !exists(path.Join(dir, first)) {
					continue // another repository's file, such as go-openai's
				}
				if !exists(p) && !exists(path.Join(dir, p)) {
					t.Errorf("%s:%d: %s: no such path from the repository root or %s/", doc, n+1, p, dir)
				}
			}
		}
	}
}
