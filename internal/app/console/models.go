package console

import (
	"html/template"
	"strconv"
	"time"

	"github.com/llmq/llmq/internal/app/api"
)

// The overview's per-model charts: what GET /v1/stats/models answers, one
// column per minute of the last hour.

// metric is one chart of a model: its headline (the window's figure) and
// its columns.
type metric struct {
	// Key names the figure (data-metric="model-<model>-<key>").
	Key, Title string
	// Value is the headline with Unit after it; Note says more.
	Value, Unit, Note string
	Chart             template.HTML
}

// modelCharts are one model's charts.
type modelCharts struct {
	Model    string
	InFlight int64
	Metrics  []metric
}

// perMinute writes a count per minute.
func perMinute(v float64) string { return num(int64(v)) + "/min" }

// fraction writes a mean: two decimals below 1, one above.
func fraction(v float64) string {
	if v < 1 {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func msText(v float64) string { return dur(time.Duration(v * float64(time.Millisecond))) }

// peakNote says a series' busiest minute against its limit and where
// the limit comes from.
func peakNote(values []float64, limit float64, source string) string {
	s := "peak " + num(int64(slicesMax(values)))
	switch source {
	case api.LimitConfigured:
		return s + " of " + perMinute(limit) + " configured"
	case api.LimitHeaders:
		return s + " of " + perMinute(limit) + " (headers)"
	}
	return s + "/min, no limit known"
}

// chartsOf draws a model's minutes.
func chartsOf(m api.ModelStat) modelCharts {
	n := len(m.Minutes)
	req, tok, limited, conc, wait := make([]float64, n), make([]float64, n), make([]float64, n),
		make([]float64, n), make([]float64, n)
	var totReq, totTok, totLimited int64
	var peakConc, waitSum, peakP95 float64
	for i, mm := range m.Minutes {
		req[i], tok[i], limited[i] = float64(mm.Requests), float64(mm.Tokens), float64(mm.RateLimited)
		conc[i], wait[i] = mm.Concurrency, mm.QuotaWaitMeanMS
		totReq, totTok, totLimited = totReq+mm.Requests, totTok+mm.Tokens, totLimited+mm.RateLimited
		peakConc, peakP95 = max(peakConc, mm.Concurrency), max(peakP95, mm.QuotaWaitP95MS)
		waitSum += mm.QuotaWaitMeanMS * float64(mm.Requests)
	}
	meanWait := 0.0
	if totReq > 0 {
		meanWait = waitSum / float64(totReq)
	}
	c := modelCharts{Model: m.Model, InFlight: m.InFlight}
	concLimit := "busiest minute's mean in flight"
	if m.Limits.Concurrency > 0 {
		concLimit += "; limit " + strconv.Itoa(m.Limits.Concurrency)
	}
	c.Metrics = []metric{
		{Key: "requests", Title: "Requests", Value: num(totReq), Unit: "calls", Note: peakNote(req, m.Limits.RPM, m.Limits.RPMSource),
			Chart: minuteBars(req, m.Limits.RPM, "requests", "requests", perMinute)},
		{Key: "tokens", Title: "Tokens", Value: num(totTok), Unit: "tokens", Note: peakNote(tok, m.Limits.TPM, m.Limits.TPMSource),
			Chart: minuteBars(tok, m.Limits.TPM, "tokens", "tokens", perMinute)},
		{Key: "rate-limited", Title: "429s", Value: num(totLimited), Unit: "429s", Note: pct(totLimited, totReq) + " of the calls",
			Chart: minuteBars(limited, 0, "rate_limited", "429 answers", perMinute)},
		{Key: "concurrency", Title: "Concurrency", Value: fraction(peakConc), Unit: "peak", Note: concLimit,
			Chart: minuteBars(conc, float64(m.Limits.Concurrency), "concurrency", "mean calls in flight", fraction)},
		{Key: "quota-wait", Title: "Waiting for quota", Value: msText(meanWait), Unit: "mean", Note: "p95 up to " + msText(peakP95),
			Chart: minuteBars(wait, 0, "wait", "mean wait for admission", msText)},
	}
	return c
}
