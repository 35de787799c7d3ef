package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colorRate      = color.RGBA{R: 0x9e, G: 0xb9, B: 0xd4, A: 0xff}
	colorRateMine  = color.RGBA{R: 0x1f, G: 0x5f, B: 0x9f, A: 0xff}
	colorReqs      = color.RGBA{R: 0xf2, G: 0xc0, B: 0x94, A: 0xff}
	colorReqsMine  = color.RGBA{R: 0xc4, G: 0x5a, B: 0x10, A: 0xff}
	chartPanelW    = 5.5 * vg.Inch
	chartPanelH    = 2.4 * vg.Inch
	chartBarHeight = vg.Points(9)
)

// writeChart draws, for every point, the median acquisitions per second and
// requests per acquisition of each contender as horizontal bars, rlock.Mutex
// in a darker shade, into a PNG.
func (r *Report) writeChart(path string) error {
	var plots [][]*plot.Plot
	for _, p := range r.Points {
		if len(p.Summary) == 0 || p.Scenario == "blocked" {
			continue
		}
		rate, err := r.barPlot(p, "acquisitions/s", func(s Result) float64 { return s.PerSecond }, "%.0f", colorRate, colorRateMine)
		if err != nil {
			return err
		}
		reqs, err := r.barPlot(p, "requests sent per acquisition", func(s Result) float64 { return s.RequestsPerAcq }, "%.1f", colorReqs, colorReqsMine)
		if err != nil {
			return err
		}
		plots = append(plots, []*plot.Plot{rate, reqs})
	}
	if len(plots) == 0 {
		return nil
	}
	img := vgimg.NewWith(vgimg.UseWH(2*chartPanelW, vg.Length(len(plots))*chartPanelH), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{
		Rows: len(plots), Cols: 2,
		PadX: 8 * vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter,
		PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter,
	}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func (r *Report) barPlot(p PointReport, metric string, value func(Result) float64, format string, peer, mine color.Color) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Label + ": " + metric
	pl.Title.TextStyle.Font.Size = vg.Points(10)
	n := len(p.Summary)
	// NominalY puts the first name at the bottom: reverse, so that the
	// registry order reads top down.
	names := make([]string, n)
	others := make(plotter.Values, n)
	ours := make(plotter.Values, n)
	labels := plotter.XYLabels{XYs: make(plotter.XYs, n), Labels: make([]string, n)}
	top := 0.0
	for i, s := range p.Summary {
		k := n - 1 - i
		v := value(s)
		names[k] = r.name(s.Contender)
		if s.failed() {
			names[k] += " (!)"
		}
		if s.Contender == "rlock" {
			ours[k] = v
		} else {
			others[k] = v
		}
		labels.XYs[k] = plotter.XY{X: v, Y: float64(k)}
		labels.Labels[k] = fmt.Sprintf(format, v)
		top = max(top, v)
	}
	for _, vs := range []struct {
		v plotter.Values
		c color.Color
	}{{others, peer}, {ours, mine}} {
		bc, err := plotter.NewBarChart(vs.v, chartBarHeight)
		if err != nil {
			return nil, err
		}
		bc.Horizontal = true
		bc.Color = vs.c
		bc.LineStyle.Width = 0
		pl.Add(bc)
	}
	ls, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range ls.TextStyle {
		ls.TextStyle[i].Font.Size = vg.Points(8)
		ls.TextStyle[i].YAlign = draw.YCenter
	}
	ls.Offset = vg.Point{X: vg.Points(3)}
	pl.Add(ls)
	pl.NominalY(names...)
	pl.X.Min = 0
	pl.X.Max = max(top*1.22, 1)
	pl.X.Tick.Label.Font.Size = vg.Points(8)
	pl.Y.Tick.Label.Font.Size = vg.Points(8)
	return pl, nil
}
