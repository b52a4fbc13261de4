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
