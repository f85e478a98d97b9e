package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Size of every PNG the plot subcommand writes.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// plotPayloadBytes is the record size the throughput plot draws (the
// issue's 64 × 128 B shape and its batch-of-1 counterpart).
const plotPayloadBytes = 128

// errNoPoints is returned when an input holds nothing the plot can draw.
var errNoPoints = errors.New("no data points to plot")

// percentileSeries names one latency percentile and how to read it.
type percentileSeries struct {
	name string
	get  func(heraldLatencySummary) float64
}

// latencyPercentiles are the lines of the latency plot, in legend order.
var latencyPercentiles = []percentileSeries{
	{"p50", func(s heraldLatencySummary) float64 { return s.P50 }},
	{"p90", func(s heraldLatencySummary) float64 { return s.P90 }},
	{"p99", func(s heraldLatencySummary) float64 { return s.P99 }},
	{"p99.9", func(s heraldLatencySummary) float64 { return s.P999 }},
}

// plotLatencyByFanout draws Herald's publish → deliver latency percentiles
// (from the scheduled send) by fan-out, both axes logarithmic, with NATS
// core's p50 and p99 at the fan-outs it ran as separate markers.
func plotLatencyByFanout(in plotInputs, path string) error {
	runs := slices.SortedFunc(slices.Values(in.latency.Runs), func(a, b heraldLatencyRun) int {
		return cmp.Compare(a.Fanout, b.Fanout)
	})
	p := plot.New()
	p.Title.Text = "Publish → deliver latency by fan-out (single records, fixed rate, from scheduled send)"
	p.X.Label.Text = "fan-out (subscribers)"
	p.Y.Label.Text = "latency"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())

	var ys []float64
	for i, pc := range latencyPercentiles {
		var xys plotter.XYs
		for _, r := range runs {
			if v := pc.get(r.Latency); r.Fanout > 0 && v > 0 {
				xys = append(xys, plotter.XY{X: float64(r.Fanout), Y: v})
				ys = append(ys, v)
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(i)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add("Herald "+pc.name, line, points)
	}
	if len(ys) == 0 {
		return fmt.Errorf("%s: %w", plotLatencyInput, errNoPoints)
	}

	// NATS core latency markers, coloured as the Herald percentile they
	// compare with.
	natsMarkers := []struct {
		pc    int // index into latencyPercentiles, for the colour
		name  string
		get   func(*Latency) float64
		shape draw.GlyphDrawer
	}{
		{0, "NATS core p50", func(l *Latency) float64 { return l.P50 }, draw.RingGlyph{}},
		{2, "NATS core p99", func(l *Latency) float64 { return l.P99 }, draw.SquareGlyph{}},
	}
	for _, m := range natsMarkers {
		var xys plotter.XYs
		for _, r := range in.nats {
			fanout, ok := paramInt(r.Params, "fanout")
			if r.Scenario != "core-latency" || !ok || fanout <= 0 || r.LatencyMicros == nil {
				continue
			}
			if v := m.get(r.LatencyMicros); v > 0 {
				xys = append(xys, plotter.XY{X: float64(fanout), Y: v})
				ys = append(ys, v)
			}
		}
		if len(xys) == 0 {
			continue
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		s.Color = plotutil.Color(m.pc)
		s.Shape = m.shape
		s.Radius = vg.Points(5)
		p.Add(s)
		p.Legend.Add(m.name, s)
	}

	fanouts := make([]float64, 0, len(runs))
	for _, r := range runs {
		if r.Fanout > 0 {
			fanouts = append(fanouts, float64(r.Fanout))
		}
	}
	setLogAxis(&p.X, fanouts, constantTicks(fanouts, func(v float64) string { return strconv.Itoa(int(v)) }))
	setLogAxis(&p.Y, ys, logTicks{format: formatMicros})
	return p.Save(plotWidth, plotHeight, path)
}

// plotThroughputByBatch draws Herald's publish records/s by batch size for
// 128 B records, one line for durable and one for ephemeral, with NATS
// JetStream async publish as a marker at its batch size and a dashed
// reference line.
func plotThroughputByBatch(in plotInputs, path string) error {
	cells := slices.SortedFunc(slices.Values(in.publish.Cells), func(a, b heraldPublishCell) int {
		return cmp.Compare(a.BatchRecords, b.BatchRecords)
	})
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Publish throughput by batch size (%d B records, acked per batch)", plotPayloadBytes)
	p.X.Label.Text = "records per batch"
	p.Y.Label.Text = "records/s"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())

	var batches, ys []float64
	series := []struct {
		durable bool
		name    string
	}{
		{true, "Herald durable (synced before ack)"},
		{false, "Herald ephemeral"},
	}
	for i, sr := range series {
		var xys plotter.XYs
		for _, c := range cells {
			if c.Durable != sr.durable || c.PayloadBytes != plotPayloadBytes || c.BatchRecords <= 0 || c.RecordsPerSec <= 0 {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(c.BatchRecords), Y: c.RecordsPerSec})
			batches = append(batches, float64(c.BatchRecords))
			ys = append(ys, c.RecordsPerSec)
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(i)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(sr.name, line, points)
	}
	if len(ys) == 0 {
		return fmt.Errorf("%s: %d B cells: %w", plotPublishInput, plotPayloadBytes, errNoPoints)
	}
	batches = uniqueSorted(batches)

	for _, r := range in.nats {
		batch, okBatch := paramInt(r.Params, "batch")
		payload, okPayload := paramInt(r.Params, "payload")
		if r.Scenario != "js-publish" || !okBatch || !okPayload || payload != plotPayloadBytes || batch <= 0 || r.RecordsPerSec <= 0 {
			continue
		}
		clr := plotutil.Color(len(series))
		ref, err := plotter.NewLine(plotter.XYs{
			{X: min(batches[0], float64(batch)), Y: r.RecordsPerSec},
			{X: max(batches[len(batches)-1], float64(batch)), Y: r.RecordsPerSec},
		})
		if err != nil {
			return err
		}
		ref.Color = clr
		ref.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
		marker, err := plotter.NewScatter(plotter.XYs{{X: float64(batch), Y: r.RecordsPerSec}})
		if err != nil {
			return err
		}
		marker.Color = clr
		marker.Shape = draw.PyramidGlyph{}
		marker.Radius = vg.Points(5)
		p.Add(ref, marker)
		p.Legend.Add(fmt.Sprintf("NATS JetStream async publish, batch %d (no sync before ack)", batch), ref, marker)
		batches = uniqueSorted(append(batches, float64(batch)))
		ys = append(ys, r.RecordsPerSec)
	}

	setLogAxis(&p.X, batches, constantTicks(batches, func(v float64) string { return strconv.Itoa(int(v)) }))
	setLogAxis(&p.Y, ys, logTicks{format: formatRecordsPerSec})
	return p.Save(plotWidth, plotHeight, path)
}

// setLogAxis makes a logarithmic axis marked by ticker, spanning values
// (all > 0) with some room on either side.
func setLogAxis(a *plot.Axis, values []float64, ticker plot.Ticker) {
	lo, hi := slices.Min(values), slices.Max(values)
	a.Scale = plot.LogScale{}
	a.Tick.Marker = ticker
	a.Min, a.Max = lo/1.6, hi*1.6
}

// constantTicks returns labelled ticks at values.
func constantTicks(values []float64, format func(float64) string) plot.ConstantTicks {
	ticks := make(plot.ConstantTicks, 0, len(values))
	for _, v := range values {
		ticks = append(ticks, plot.Tick{Value: v, Label: format(v)})
	}
	return ticks
}

// logTicks puts major, labelled ticks at 1, 2 and 5 × 10^k and minor ticks at
// the other integer multiples, so a range inside one decade still gets labels.
type logTicks struct {
	format func(float64) string // renders a major tick's label
}

// Ticks implements plot.Ticker.
func (t logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		decade := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * decade
			if v < lo || v > hi {
				continue
			}
			tick := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				tick.Label = t.format(v)
			}
			ticks = append(ticks, tick)
		}
	}
	return ticks
}

// formatMicros renders a duration in microseconds with a fitting unit.
func formatMicros(us float64) string {
	if us >= 1000 {
		return strconv.FormatFloat(us/1000, 'g', 3, 64) + " ms"
	}
	return strconv.FormatFloat(us, 'g', 3, 64) + " µs"
}

// formatRecordsPerSec renders a rate with a k or M suffix.
func formatRecordsPerSec(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// paramInt reads an integer parameter of a Result, whether it holds an int
// (a Result built in this process) or a float64 (one decoded from JSON).
func paramInt(params map[string]any, key string) (int, bool) {
	switch v := params[key].(type) {
	case int:
		return v, true
	case float64:
		return int(v), v == math.Trunc(v)
	}
	return 0, false
}

// uniqueSorted returns values sorted, without duplicates.
func uniqueSorted(values []float64) []float64 {
	slices.Sort(values)
	return slices.Compact(values)
}
