package bench

import (
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// line is one named series of a plot.
type line struct {
	name   string
	y      []float64
	dashed bool
	color  color.Color
}

// newPlot builds a line plot of series over seconds.
func newPlot(title, ylabel string, lines []line) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since the start"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.X.Tick.Marker = plainTicks{}
	p.Y.Tick.Marker = plainTicks{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	for i, l := range lines {
		xys := make(plotter.XYs, len(l.y))
		for t, v := range l.y {
			xys[t] = plotter.XY{X: float64(t), Y: v}
		}
		ln, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("bench: plot %q: %w", title, err)
		}
		ln.Width = vg.Points(1.6)
		ln.Color = plotutil.Color(i)
		if l.color != nil {
			ln.Color = l.color
		}
		if l.dashed {
			ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(ln)
		p.Legend.Add(l.name, ln)
	}
	return p, nil
}

// plainTicks are plot's default ticks labelled without trailing zeros
// (5000, not 5000.00).
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// grey is the colour of limit lines.
var grey = color.Gray{Y: 90}

// savePlots writes plots stacked vertically as one PNG.
func savePlots(path string, plots ...*plot.Plot) error {
	const width, rowHeight = 20 * vg.Centimeter, 9 * vg.Centimeter
	img := vgimg.New(width, rowHeight*vg.Length(len(plots)))
	dc := draw.New(img)
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

// constant is a series of n copies of v.
func constant(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// field extracts one value per point.
func field(pts []point, f func(point) float64) []float64 {
	out := make([]float64, len(pts))
	for i, p := range pts {
		out[i] = f(p)
	}
	return out
}
