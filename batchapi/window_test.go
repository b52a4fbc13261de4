package batchapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWindowContains(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	at := func(loc *time.Location, hh, mm int) time.Time { return time.Date(2026, 6, 15, hh, mm, 0, 0, loc) }
	tests := []struct {
		name, spec, tz string
		t              time.Time
		want           bool
	}{
		{"wrap: late evening", "22:00-06:00", "UTC", at(time.UTC, 23, 30), true},
		{"wrap: start inclusive", "22:00-06:00", "UTC", at(time.UTC, 22, 0), true},
		{"wrap: just before start", "22:00-06:00", "UTC", at(time.UTC, 21, 59), false},
		{"wrap: after midnight", "22:00-06:00", "UTC", at(time.UTC, 3, 0), true},
		{"wrap: end exclusive", "22:00-06:00", "UTC", at(time.UTC, 6, 0), false},
		{"wrap: midday", "22:00-06:00", "UTC", at(time.UTC, 12, 0), false},
		{"plain: inside", "01:00-05:30", "UTC", at(time.UTC, 5, 29), true},
		{"plain: end exclusive", "01:00-05:30", "UTC", at(time.UTC, 5, 30), false},
		{"plain: before", "01:00-05:30", "UTC", at(time.UTC, 0, 59), false},
		// 22:30 Paris (CEST, UTC+2) is 20:30 UTC.
		{"zone: Paris evening seen from UTC", "22:00-06:00", "Europe/Paris", at(time.UTC, 20, 30), true},
		{"zone: UTC evening is Paris night", "22:00-06:00", "Europe/Paris", at(time.UTC, 21, 30), true},
		{"zone: 05:00 UTC is 07:00 Paris", "22:00-06:00", "Europe/Paris", at(time.UTC, 5, 0), false},
		{"zone: local time given", "22:00-06:00", "Europe/Paris", at(paris, 5, 59), true},
		{"off", WindowOff, "UTC", at(time.UTC, 23, 0), false},
		{"empty start == end", "03:00-03:00", "UTC", at(time.UTC, 3, 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := ParseWindow(tt.spec, tt.tz)
			require.NoError(t, err)
			require.Equal(t, tt.want, w.Contains(tt.t))
		})
	}
}

func TestParseWindowErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ spec, tz, want string }{
		{"22:00", "UTC", "want HH:MM-HH:MM"},
		{"24:00-06:00", "UTC", "bad time of day"},
		{"22:00-6:0", "UTC", "bad time of day"},
		{"22:00-06:00", "Mars/Olympus", "time zone"},
	} {
		_, err := ParseWindow(tt.spec, tt.tz)
		require.ErrorContains(t, err, tt.want, tt.spec+" "+tt.tz)
	}
	w, err := ParseWindow("22:00-06:00", "Asia/Tokyo")
	require.NoError(t, err)
	require.Equal(t, "22:00-06:00 Asia/Tokyo", w.String())
}

func TestPolicyDecide(t *testing.T) {
	t.Parallel()
	w, err := ParseWindow("22:00-06:00", "UTC")
	require.NoError(t, err)
	p := Policy{Window: w, DrainThreshold: 30 * time.Minute, MinDeadlineLead: 25 * time.Hour}
	night := time.Date(2026, 6, 15, 23, 0, 0, 0, time.UTC)
	day := time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)
	in := func(t time.Time, d time.Duration) *time.Time { x := t.Add(d); return &x }
	tests := []struct {
		name      string
		now       time.Time
		deadline  *time.Time
		drain     time.Duration
		batch     bool
		reasonHas string
	}{
		{"night, no deadline", night, nil, 0, true, "off-peak window 22:00-06:00 UTC"},
		{"night, far deadline", night, in(night, 48*time.Hour), 0, true, "off-peak"},
		{"night, deadline just past the lead", night, in(night, 25*time.Hour+time.Second), 0, true, "off-peak"},
		{"night, deadline at the lead", night, in(night, 25*time.Hour), 0, false, "deadline in 25h0m0s"},
		{"night, near deadline", night, in(night, time.Hour), time.Hour, false, "batch needs more than 25h0m0s"},
		{"day, short backlog", day, nil, 5 * time.Minute, false, "live lane drains in 5m0s"},
		{"day, backlog at threshold", day, nil, 30 * time.Minute, false, "outside off-peak window"},
		{"day, long backlog", day, nil, 45 * time.Minute, true, "drains in 45m0s, over the 30m0s threshold"},
		{"day, long backlog but near deadline", day, in(day, 2*time.Hour), 45 * time.Minute, false, "deadline in 2h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.now, tt.deadline, tt.drain)
			require.Equal(t, tt.batch, d.Batch, d.Reason)
			require.Contains(t, d.Reason, tt.reasonHas)
		})
	}
	// The drain rule can be off.
	off := p
	off.DrainThreshold = 0
	require.False(t, off.Decide(day, nil, 10*time.Hour).Batch)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	err := Config{MaxLines: 60000, FailedLines: "maybe", Window: "x"}.WithDefaults().validate(true)
	for _, field := range []string{"Config.Store", "Config.Client", "Config.MaxLines", "Config.FailedLines", "Config.Window"} {
		require.ErrorContains(t, err, field)
	}
	err = Config{PullBackBefore: 26 * time.Hour}.WithDefaults().validate(false)
	require.ErrorContains(t, err, "Config.PullBackBefore")
}
