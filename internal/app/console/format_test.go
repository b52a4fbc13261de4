package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormats(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		require.Equal(t, want, num(in))
	}
	for in, want := range map[float64]string{0: "$0", 0.000021: "$0.000021", 0.0456: "$0.0456", 12.345: "$12.35", 1234.6: "$1,235"} {
		require.Equal(t, want, usd(in))
	}
	for in, want := range map[time.Duration]string{850 * time.Millisecond: "850 ms", time.Second: "1 s", 1500 * time.Millisecond: "1.5 s",
		42 * time.Second: "42 s", 185 * time.Second: "3 min 5 s", 2 * time.Minute: "2 min", 130 * time.Minute: "2 h 10 min", 72 * time.Hour: "3 days"} {
		require.Equal(t, want, dur(in))
	}
	for in, want := range map[time.Duration]string{time.Second: "just now", 42 * time.Second: "42 s ago", 3 * time.Minute: "3 min ago", 5 * time.Hour: "5 h ago"} {
		require.Equal(t, want, ago(in))
	}
	require.Equal(t, "héll…", clip("héllo", 5), "cut on a rune boundary")
	require.Equal(t, "1.5 KiB", byteSize(1536))
	require.Equal(t, "—", pct(1, 0))
	require.Equal(t, "1 dead letter", plural(1, "dead letter", "dead letters"))
	require.Equal(t, "1,200 dead letters", plural(1200, "dead letter", "dead letters"))
	big := `{"a":"` + strings.Repeat("x", prettyJSONMax) + `"}`
	out := prettyJSON([]byte(big))
	require.Less(t, len(out), prettyJSONMax+64)
	require.Contains(t, out, "more not shown")
}

// TestChartsEscape: labels and keys are escaped; the bars are to scale.
func TestChartsEscape(t *testing.T) {
	t.Parallel()
	svg := string(barRows([]segment{{Key: `x"><script>`, Label: "<b>evil</b>", Value: 3}, {Key: "ok", Label: "ok", Value: 1}}))
	require.NotContains(t, svg, "<script>")
	require.NotContains(t, svg, "<b>")
	require.Contains(t, svg, "&lt;b&gt;evil&lt;/b&gt;")
	require.Contains(t, svg, `width="340.0"`, "the largest fills the track")
	require.Contains(t, svg, `width="113.3"`, "a third of it")
	bar := string(stackedBar([]segment{{Key: "succeeded", Label: "succeeded", Value: 3}, {Key: "failed", Label: "failed", Value: 1}}, barThick))
	require.Contains(t, bar, `class="c-succeeded" x="0.00" y="0" width="750.00"`)
	require.Contains(t, bar, `class="c-failed" x="750.00" y="0" width="250.00"`)
	require.Contains(t, bar, `aria-label="succeeded 3, failed 1"`)
}

// TestVendoredHTMX: the embedded htmx is the version its README names.
func TestVendoredHTMX(t *testing.T) {
	t.Parallel()
	js, err := staticFS.ReadFile("static/htmx.min.js")
	require.NoError(t, err)
	require.Contains(t, string(js), `version:"`+htmxVersion+`"`)
	readme, err := staticFS.ReadFile("static/README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), "htmx "+htmxVersion)
	lic, err := staticFS.ReadFile("static/htmx.LICENSE")
	require.NoError(t, err)
	require.Contains(t, string(lic), "Zero-Clause BSD")
}
