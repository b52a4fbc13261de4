package console

import (
	"fmt"
	"html/template"
	"strings"
)

// The charts are inline SVG written here, on the server: no chart library
// and no script in the browser. Colours are classes of console.css (the
// Content-Security-Policy allows no inline style), text is escaped, and
// each chart carries its numbers in a <title> for screen readers and
// hover.

// segment is one part of a stacked bar.
type segment struct {
	// Key names the colour class (c-<key>) and the part.
	Key   string
	Label string
	Value int64
	// AtLeast says Value is a floor: the count stopped there (shown
	// "10,000+").
	AtLeast bool
}

// Heights of a stacked bar (classes of console.css).
const (
	barThick = "bar"
	barThin  = "bar thin"
)

// stackedBar draws parts of a whole as one bar across the card's width, as
// high as class says (barThick, barThin). An empty whole draws an empty
// track.
func stackedBar(parts []segment, class string) template.HTML {
	const height = 10
	const width = 1000.0
	var total int64
	for _, p := range parts {
		total += p.Value
	}
	var b strings.Builder
	var title []string
	for _, p := range parts {
		if p.Value > 0 {
			title = append(title, fmt.Sprintf("%s %s", p.Label, num(p.Value)))
		}
	}
	if len(title) == 0 {
		title = []string{"nothing to show"}
	}
	fmt.Fprintf(&b, `<svg class="chart %s" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img" aria-label="%s">`,
		class, int(width), height, template.HTMLEscapeString(strings.Join(title, ", ")))
	fmt.Fprintf(&b, `<rect class="c-empty" x="0" y="0" width="%d" height="%d"/>`, int(width), height)
	x := 0.0
	for _, p := range parts {
		if p.Value <= 0 || total == 0 {
			continue
		}
		w := width * float64(p.Value) / float64(total)
		fmt.Fprintf(&b, `<rect class="c-%s" x="%.2f" y="0" width="%.2f" height="%d"><title>%s: %s</title></rect>`,
			template.HTMLEscapeString(p.Key), x, w, height, template.HTMLEscapeString(p.Label), num(p.Value))
		x += w
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from escaped text and numbers
}

// barRows draws one horizontal bar per row, to scale with the largest,
// with its label at the left and its value at the right.
func barRows(rows []segment) template.HTML {
	const (
		width  = 560
		labelW = 150
		valueW = 70
		rowH   = 26
		barH   = 14
	)
	var peak int64
	for _, r := range rows {
		peak = max(peak, r.Value)
	}
	height := rowH * len(rows)
	var b strings.Builder
	var title []string
	for _, r := range rows {
		title = append(title, fmt.Sprintf("%s %s", r.Label, num(r.Value)))
	}
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height,
		template.HTMLEscapeString(strings.Join(title, ", ")))
	span := float64(width - labelW - valueW)
	for i, r := range rows {
		y := i * rowH
		fmt.Fprintf(&b, `<text x="0" y="%d" dominant-baseline="middle">%s</text>`, y+rowH/2, template.HTMLEscapeString(r.Label))
		fmt.Fprintf(&b, `<rect class="c-track" x="%d" y="%d" width="%.0f" height="%d" rx="3"/>`, labelW, y+(rowH-barH)/2, span, barH)
		if r.Value > 0 && peak > 0 {
			w := max(span*float64(r.Value)/float64(peak), 2)
			fmt.Fprintf(&b, `<rect class="c-%s" x="%d" y="%d" width="%.1f" height="%d" rx="3"><title>%s: %s</title></rect>`,
				template.HTMLEscapeString(r.Key), labelW, y+(rowH-barH)/2, w, barH, template.HTMLEscapeString(r.Label), num(r.Value))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" dominant-baseline="middle">%s</text>`, width, y+rowH/2, num(r.Value))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from escaped text and numbers
}

// minuteBars draws one column per minute, to scale with the largest value
// or the limit (limit <= 0: none), with the limit as a dashed line. label
// names the series for the <title>s; format writes a value with its unit.
func minuteBars(values []float64, limit float64, key, label string, format func(float64) string) template.HTML {
	const (
		width  = 300.0
		height = 72.0
		top    = 12.0 // room for the limit's label
	)
	peak := limit
	for _, v := range values {
		peak = max(peak, v)
	}
	var b strings.Builder
	summary := label + ": no calls"
	if peak > 0 {
		summary = fmt.Sprintf("%s per minute, peak %s", label, format(slicesMax(values)))
		if limit > 0 {
			summary += ", limit " + format(limit)
		}
	}
	fmt.Fprintf(&b, `<svg class="chart minutes" viewBox="0 0 %d %d" role="img" aria-label="%s">`, int(width), int(height),
		template.HTMLEscapeString(summary))
	fmt.Fprintf(&b, `<rect class="c-track" x="0" y="%.0f" width="%.0f" height="%.0f"/>`, top, width, height-top)
	if len(values) > 0 && peak > 0 {
		step := width / float64(len(values))
		scale := (height - top) / peak
		for i, v := range values {
			if v <= 0 {
				continue
			}
			h := max(v*scale, 1)
			fmt.Fprintf(&b, `<rect class="c-%s" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s</title></rect>`,
				template.HTMLEscapeString(key), float64(i)*step, height-h, max(step-1, 0.5), h,
				template.HTMLEscapeString(fmt.Sprintf("%s: %s", minutesAgo(len(values)-1-i), format(v))))
		}
		if limit > 0 {
			y := height - limit*scale
			fmt.Fprintf(&b, `<line class="limit" x1="0" y1="%.2f" x2="%.0f" y2="%.2f"/>`, y, width, y)
			fmt.Fprintf(&b, `<text class="muted" x="%.0f" y="%.2f" text-anchor="end">limit %s</text>`, width, y-3,
				template.HTMLEscapeString(format(limit)))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from escaped text and numbers
}

func slicesMax(vs []float64) float64 {
	var m float64
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

// minutesAgo names the minute i minutes before the current one.
func minutesAgo(i int) string {
	if i == 0 {
		return "this minute"
	}
	return fmt.Sprintf("%d min ago", i)
}
