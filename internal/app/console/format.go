package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// The page templates: each page file defines "content" (and its live
// fragments) and is parsed with the layout into a set of its own.
var pageNames = []string{"login", "error", "overview", "jobs", "job", "dead-letters", "dead-letter", "batches", "batch", "usage", "tenants"}

func (c *Console) parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"num":       num,
		"int":       func(n int) string { return num(int64(n)) },
		"usd":       usd,
		"seconds":   seconds,
		"since":     since,
		"ago":       func(t time.Time, now time.Time) string { return ago(now.Sub(t)) },
		"when":      when,
		"whenp":     whenp,
		"json":      prettyJSON,
		"clip":      clip,
		"bytes":     byteSize,
		"static":    func(name string) string { return Prefix + "/static/" + name + "?v=" + c.static[name].hash },
		"reason":    reasonText,
		"statuses":  func() []llmq.Status { return llmq.Statuses },
		"terminal":  func(s string) bool { return llmq.Status(s).Terminal() },
		"pct":       pct,
		"plural":    plural,
		"add":       func(a, b int) int { return a + b },
		"sub":       func(a, b float64) float64 { return a - b },
		"add2":      func(a, b float64) float64 { return a + b },
		"ptr":       func(t time.Time) *time.Time { return &t },
		"deref":     deref,
		"rate":      func(perMin float64) string { return strconv.FormatFloat(perMin, 'f', 1, 64) },
		"pageSizes": func() []int { return pageSizes },
		"weight":    func(w float64) string { return strconv.FormatFloat(w, 'f', -1, 64) },
		"limit":     func(v float64) string { return num(int64(v)) },
		"whole":     func(v float64) int64 { return int64(v) },
		"int64":     func(n int) int64 { return int64(n) },
		"msec":      func(n any) string { return msecText(n) },
		"share":     func(part, whole float64) string { return strconv.FormatFloat(100*part/whole, 'f', 1, 64) + "%" },
	}
	base, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := base.Clone()
		if err != nil {
			return nil, err
		}
		if _, err := t.ParseFS(templateFS, "templates/"+name+".html"); err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		out[name] = t
	}
	if names, _ := fs.Glob(templateFS, "templates/*.html"); len(names) != len(pageNames)+1 {
		return nil, fmt.Errorf("console: %d template files for %d pages and the layout", len(names), len(pageNames))
	}
	return out, nil
}

// deref is what an optional number or time of a view points to (zero for
// nil).
func deref(p any) any {
	switch v := p.(type) {
	case *float64:
		if v != nil {
			return *v
		}
		return 0.0
	case *time.Time:
		if v != nil {
			return *v
		}
		return time.Time{}
	}
	return p
}

// num writes n with thousands separators: 12,345.
func num(n int64) string { return english.Sprint(n) }

// english formats numbers as the console shows them.
var english = message.NewPrinter(language.English)

// usd writes a cost in dollars with the digits a small amount needs:
// $0, $0.000123, $0.0456, $12.34, $1,234.
func usd(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "$0"
	case a < 0.01:
		return "$" + strconv.FormatFloat(v, 'f', 6, 64)
	case a < 1:
		return "$" + strconv.FormatFloat(v, 'f', 4, 64)
	case a < 1000:
		return "$" + strconv.FormatFloat(v, 'f', 2, 64)
	}
	return "$" + num(int64(math.Round(v)))
}

// seconds writes a duration given in seconds: 850 ms, 12.4 s, 3 min 5 s,
// 2 h 10 min.
func seconds(s float64) string { return dur(time.Duration(s * float64(time.Second))) }

func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < 10*time.Second && d%time.Second != 0:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%d min", m)
		}
		return fmt.Sprintf("%d min %d s", m, s)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// since writes the time from a to b (both set) or "".
func since(a, b *time.Time) string {
	if a == nil || b == nil {
		return ""
	}
	return dur(b.Sub(*a))
}

// ago writes how long ago: "just now", "42 s ago", "3 min ago".
func ago(d time.Duration) string {
	switch {
	case d < 2*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// when writes a time in UTC to the second.
func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// whenp is when for an optional time; "—" when unset.
func whenp(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return when(*t)
}

// prettyJSONMax bounds what a page shows of a request or a result.
const prettyJSONMax = 64 << 10

// prettyJSON indents a JSON value for a page, cut at prettyJSONMax bytes
// with a note of what was left out.
func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		buf.Reset()
		buf.Write(raw)
	}
	if buf.Len() <= prettyJSONMax {
		return buf.String()
	}
	return clip(buf.String(), prettyJSONMax) + fmt.Sprintf("\n… %s more not shown", byteSize(buf.Len()-prettyJSONMax))
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// byteSize writes a size: 512 B, 1.5 KiB, 3.2 MiB.
func byteSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// pct is part of whole in percent, one decimal: "12.5%"; "—" of nothing.
func pct(part, whole int64) string {
	if whole == 0 {
		return "—"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

// plural is "1 letter", "3 letters".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return num(n) + " " + many
}

// reasonText says what a dead-letter reason means.
func reasonText(r string) string {
	switch dlq.Reason(r) {
	case dlq.ReasonPoison:
		return "The message could not be read as a job (not JSON, no model, a limit broken). Replaying it fails again unless its producer is fixed."
	case dlq.ReasonRetriesExhausted:
		return "The upstream kept failing (429, 5xx, timeouts) until the attempts ran out. Replay once the provider is healthy."
	case dlq.ReasonPermanentError:
		return "The upstream refused the request itself (400-class). Fix the request; a replay sends the same one."
	case dlq.ReasonExpired:
		return "The job's deadline passed before it could run."
	}
	return ""
}
