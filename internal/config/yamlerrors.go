package config

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// yaml.v3 is the module's YAML library, but two of its errors mislead a
// reader: a parser error's line counts from 0 (a scanner error's from 1),
// and an unknown key is reported with the Go type that lacks it. The
// functions here correct the line and report keys and values by the
// setting's path instead.

// yamlParserProblems are the problems yaml.v3's parser (not its scanner)
// reports, with a line counted from 0.
var yamlParserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'", "did not find expected '-' indicator",
	"did not find expected <document start>", "did not find expected <stream-start>", "did not find expected key",
	"did not find expected node content", "found duplicate %TAG directive", "found duplicate %YAML directive",
	"found incompatible YAML document", "found undefined tag handle",
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlSyntaxError is yaml.v3's syntax error err with the line counted from
// 1 (and line 1 when yaml.v3 names none, as it does for the first line).
func yamlSyntaxError(err error) string {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	line := 1
	if m[1] != "" {
		line, _ = strconv.Atoi(m[1])
		if slices.Contains(yamlParserProblems, m[2]) {
			line++
		}
	}
	return fmt.Sprintf("line %d: %s", line, m[2])
}

var durationType = reflect.TypeFor[time.Duration]()

// checkYAML walks the document root against the type it decodes into and
// returns one problem per unknown key or value of the wrong kind, each
// with its line and the setting's path.
func checkYAML(root *yaml.Node, t reflect.Type) []string {
	var problems []string
	var walk func(n *yaml.Node, t reflect.Type, path string)
	walk = func(n *yaml.Node, t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if n.Kind == yaml.AliasNode || n.Tag == "!!null" {
			return
		}
		at := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("line %d: %s%s", n.Line, pathPrefix(path), fmt.Sprintf(format, args...)))
		}
		switch {
		case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
			fields := yamlFields(t)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				ft, ok := fields[k.Value]
				if !ok {
					problems = append(problems, fmt.Sprintf("line %d: %sunknown key %q; want one of %s", k.Line,
						pathPrefix(path), k.Value, strings.Join(slices.Sorted(maps.Keys(fields)), ", ")))
					continue
				}
				walk(v, ft, join(path, k.Value))
			}
		case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
			}
		case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
			for i, v := range n.Content {
				walk(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			}
		case n.Kind != yaml.ScalarNode:
			// Mapping for a list, list for a number...: yaml.v3's decoder
			// reports these.
		case t == durationType:
			// yaml.v3 reads a duration from a string only (0 included).
			if _, err := time.ParseDuration(n.Value); err != nil || n.Tag != "!!str" {
				at("%q is not a duration: give its unit, for example 500ms, 30s, 5m, 1h", n.Value)
			}
		case t.Kind() >= reflect.Int && t.Kind() <= reflect.Float64:
			if n.Tag != "!!int" && n.Tag != "!!float" {
				at("%q is not a number", n.Value)
			}
		}
	}
	if len(root.Content) > 0 {
		walk(root.Content[0], t, "")
	}
	return problems
}

// yamlFields maps the keys of struct t (its inline structs' included) to
// their types, as yaml.v3 names them: the tag's name, else the field's
// name in lower case.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case opts == "inline":
			maps.Copy(out, yamlFields(f.Type))
		default:
			out[cmp.Or(name, strings.ToLower(f.Name))] = f.Type
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func pathPrefix(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}
