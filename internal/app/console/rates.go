package console

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/llmq/llmq/internal/app/api"
)

// The overview's arrivals chart: what GET /v1/stats/arrivals answers, the
// jobs recorded and finished in each minute of the last hour.

// arrivals is the chart and the hour's totals.
type arrivals struct {
	Recorded, Succeeded, OtherFinished int64
	// Peak is the busiest minute's larger count.
	Peak  int64
	Chart template.HTML
}

// arrivalsOf totals the minutes and draws them: per minute, a column of
// the jobs recorded beside a column of the jobs finished (succeeded, then
// ended otherwise, stacked), to scale with the busiest minute.
func arrivalsOf(st api.Arrivals) arrivals {
	const (
		width  = 1200.0
		height = 90.0
	)
	var a arrivals
	for _, m := range st.Data {
		a.Recorded, a.Succeeded, a.OtherFinished = a.Recorded+m.Recorded, a.Succeeded+m.Succeeded, a.OtherFinished+m.OtherFinished
		a.Peak = max(a.Peak, m.Recorded, m.Succeeded+m.OtherFinished)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart rates" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img" aria-label="%s">`,
		int(width), int(height), template.HTMLEscapeString(fmt.Sprintf("jobs per minute: %s recorded, %s succeeded, %s ended otherwise in the hour, peak %s/min",
			num(a.Recorded), num(a.Succeeded), num(a.OtherFinished), num(a.Peak))))
	fmt.Fprintf(&b, `<rect class="c-track" x="0" y="0" width="%.0f" height="%.0f"/>`, width, height)
	if n := len(st.Data); n > 0 && a.Peak > 0 {
		step := width / float64(n)
		col := max(step/2-1, 0.5)
		scale := height / float64(a.Peak)
		bar := func(key string, x, bottom float64, v int64) float64 {
			if v <= 0 {
				return bottom
			}
			h := max(float64(v)*scale, 1)
			fmt.Fprintf(&b, `<rect class="c-%s" x="%.2f" y="%.2f" width="%.2f" height="%.2f"/>`, key, x, bottom-h, col, h)
			return bottom - h
		}
		for i, m := range st.Data {
			x := float64(i) * step
			fmt.Fprintf(&b, `<g><title>%s</title>`, template.HTMLEscapeString(fmt.Sprintf("%s: %s recorded, %s succeeded, %s ended otherwise",
				minutesAgo(n-1-i), num(m.Recorded), num(m.Succeeded), num(m.OtherFinished))))
			bar("recorded", x, height, m.Recorded)
			bar("failed", x+step/2, bar("succeeded", x+step/2, height, m.Succeeded), m.OtherFinished)
			b.WriteString(`</g>`)
		}
	}
	b.WriteString(`</svg>`)
	a.Chart = template.HTML(b.String()) //nolint:gosec // built from escaped text and numbers
	return a
}
