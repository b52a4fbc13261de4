package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress reports produce's advance on stderr: on a terminal one line
// redrawn at most every 100 ms, elsewhere a plain line every 10 s (no
// carriage return in a log file). Its figures are the summary's: lines
// read, jobs published and rejected, and the publish rate once a second
// has passed (a rate over a few milliseconds means nothing).
type progress struct {
	w     io.Writer
	tty   bool
	total int64 // lines of the input; -1 when unknown (stdin)
	now   func() time.Time
	start time.Time
	last  time.Time
	drawn bool
}

// progressEvery is the least time between two reports.
func (p *progress) every() time.Duration {
	if p.tty {
		return 100 * time.Millisecond
	}
	return 10 * time.Second
}

func newProgress(w io.Writer, total int64, now func() time.Time) *progress {
	p := &progress{w: w, total: total, now: now}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			p.tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	p.start = now()
	p.last = p.start
	return p
}

// update reports lines read and s, unless the last report is too recent.
func (p *progress) update(lines int, s *produceSummary) {
	t := p.now()
	if t.Sub(p.last) < p.every() {
		return
	}
	p.last = t
	text := p.text(lines, s, t)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", text)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.w, text)
}

func (p *progress) text(lines int, s *produceSummary, t time.Time) string {
	read := fmt.Sprintf("line %d", lines)
	if p.total > 0 {
		read = fmt.Sprintf("line %d/%d (%d%%)", lines, p.total, int64(lines)*100/p.total)
	}
	text := fmt.Sprintf("%s: published %d, rejected %d", read, s.published, s.rejected)
	if el := t.Sub(p.start); el >= time.Second {
		text += fmt.Sprintf(", %.0f jobs/s", float64(s.published)/el.Seconds())
	}
	return text
}

// done clears the terminal line, before the summary.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
