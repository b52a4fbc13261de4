package batchapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// WindowOff disables the off-peak window (only the drain rule routes jobs).
const WindowOff = "off"

// Window is a daily time-of-day window in a time zone, e.g. 22:00-06:00
// Europe/Paris. A window whose end is before its start wraps midnight. The
// zero Window contains no instant. A Window is immutable and safe for
// concurrent use.
type Window struct {
	start, end int // minutes after midnight; start == end: empty
	loc        *time.Location
	spec       string
}

// ParseWindow parses "HH:MM-HH:MM" (or WindowOff, or "" for none) in the
// IANA zone tz ("" = UTC).
func ParseWindow(spec, tz string) (Window, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return Window{}, fmt.Errorf("batchapi: time zone %q: %w", tz, err)
		}
		loc = l
	}
	if spec == "" || spec == WindowOff {
		return Window{loc: loc}, nil
	}
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return Window{}, fmt.Errorf("batchapi: window %q: want HH:MM-HH:MM", spec)
	}
	start, err := parseClock(a)
	if err != nil {
		return Window{}, fmt.Errorf("batchapi: window %q: %w", spec, err)
	}
	end, err := parseClock(b)
	if err != nil {
		return Window{}, fmt.Errorf("batchapi: window %q: %w", spec, err)
	}
	return Window{start: start, end: end, loc: loc, spec: spec}, nil
}

func parseClock(s string) (int, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("bad time of day %q (want HH:MM, 00:00-23:59)", s)
	}
	return hh*60 + mm, nil
}

// Contains reports whether t falls inside the window: start inclusive,
// end exclusive, in the window's zone.
func (w Window) Contains(t time.Time) bool {
	if w.start == w.end || w.loc == nil {
		return false
	}
	lt := t.In(w.loc)
	m := lt.Hour()*60 + lt.Minute()
	if w.start < w.end {
		return m >= w.start && m < w.end
	}
	return m >= w.start || m < w.end
}

// String is the spec and zone, e.g. "22:00-06:00 Europe/Paris", or "off".
func (w Window) String() string {
	if w.start == w.end {
		return WindowOff
	}
	return w.spec + " " + w.loc.String()
}
