package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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

// latencyPanel is one panel of the latency plot: which latency it draws.
type latencyPanel struct {
	title  string                                      // the panel's title
	herald func(heraldLatencyRun) heraldLatencySummary // Herald's summary of a run
	nats   func(Result) *Latency                       // NATS's summary of a result, or nil
}

// latencyPanels are the panels of the latency plot, top to bottom.
var latencyPanels = []latencyPanel{
	{
		"Publish → deliver latency by fan-out, from the scheduled send (single records, fixed rate)",
		func(r heraldLatencyRun) heraldLatencySummary { return r.Latency },
		func(r Result) *Latency { return r.LatencyMicros },
	},
	{
		"Same, from the actual send (without the publisher's wake-up lag)",
		func(r heraldLatencyRun) heraldLatencySummary { return r.LatencyFromSend },
		func(r Result) *Latency { return r.LatencyFromSendMicros },
	},
}

// natsLatencyMarker is one NATS series of the latency plot.
type natsLatencyMarker struct {
	pc    int                    // index into latencyPercentiles, for the colour
	tls   bool                   // draws the TLS results, or the plaintext ones
	name  string                 // legend entry
	get   func(*Latency) float64 // the percentile drawn
	shape draw.GlyphDrawer       // marker shape
}

// natsLatencyMarkers are NATS core's p50 and p99, plaintext and TLS, each
// coloured as the Herald percentile it compares with; hollow shapes are
// plaintext, filled ones TLS.
var natsLatencyMarkers = []natsLatencyMarker{
	{0, false, "NATS core (plaintext) p50", func(l *Latency) float64 { return l.P50 }, draw.RingGlyph{}},
	{2, false, "NATS core (plaintext) p99", func(l *Latency) float64 { return l.P99 }, draw.SquareGlyph{}},
	{0, true, "NATS core (TLS) p50", func(l *Latency) float64 { return l.P50 }, draw.TriangleGlyph{}},
	{2, true, "NATS core (TLS) p99", func(l *Latency) float64 { return l.P99 }, draw.BoxGlyph{}},
}

// isTLSResult reports whether a NATS result ran over TLS: its tls field, or
// for files that may predate the field, a -tls suffix.
func isTLSResult(r Result) bool {
	return r.TLS || strings.HasSuffix(r.Scenario, "-tls")
}

// plotLatencyByFanout draws Herald's publish → deliver latency percentiles
// by fan-out, both axes logarithmic, in two panels: from the scheduled send
// and from the actual send. NATS core's p50 and p99, plaintext and TLS, are
// markers at the fan-outs where they were measured. The from-send panel is
// left out when neither side has from-send figures (older files).
func plotLatencyByFanout(in plotInputs, path string) error {
	runs := slices.SortedFunc(slices.Values(in.latency.Runs), func(a, b heraldLatencyRun) int {
		return cmp.Compare(a.Fanout, b.Fanout)
	})
	var panels []*plot.Plot
	for i, lp := range latencyPanels {
		p, points, err := latencyPanelPlot(lp, runs, in.nats)
		if err != nil {
			return err
		}
		if points == 0 {
			if i == 0 {
				return fmt.Errorf("%s: %w", plotLatencyInput, errNoPoints)
			}
			continue
		}
		panels = append(panels, p)
	}
	return savePanels(panels, path)
}

// latencyPanelPlot draws one panel and says how many Herald points it has.
func latencyPanelPlot(lp latencyPanel, runs []heraldLatencyRun, nats []Result) (*plot.Plot, int, error) {
	p := plot.New()
	p.Title.Text = lp.title
	p.X.Label.Text = "fan-out (subscribers)"
	p.Y.Label.Text = "latency"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())

	var fanouts, ys []float64
	heraldPoints := 0
	for i, pc := range latencyPercentiles {
		var xys plotter.XYs
		for _, r := range runs {
			if v := pc.get(lp.herald(r)); r.Fanout > 0 && v > 0 {
				xys = append(xys, plotter.XY{X: float64(r.Fanout), Y: v})
				fanouts = append(fanouts, float64(r.Fanout))
				ys = append(ys, v)
			}
		}
		if len(xys) == 0 {
			continue
		}
		heraldPoints += len(xys)
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, 0, err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(i)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add("Herald "+pc.name, line, points)
	}
	if heraldPoints == 0 {
		return p, 0, nil
	}

	for _, m := range natsLatencyMarkers {
		xys := natsLatencyXYs(lp, m, nats)
		if len(xys) == 0 {
			continue
		}
		for _, xy := range xys {
			fanouts, ys = append(fanouts, xy.X), append(ys, xy.Y)
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, 0, err
		}
		s.Color = plotutil.Color(m.pc)
		s.Shape = m.shape
		s.Radius = vg.Points(5)
		p.Add(s)
		p.Legend.Add(m.name, s)
	}

	fanouts = uniqueSorted(fanouts)
	setLogAxis(&p.X, fanouts, constantTicks(fanouts, func(v float64) string { return strconv.Itoa(int(v)) }))
	setLogAxis(&p.Y, ys, logTicks{format: formatMicros})
	addLegendHeadroom(&p.Y)
	return p, heraldPoints, nil
}

// natsLatencyXYs are the points of marker m in panel lp: one per NATS
// core-latency result of m's transport, at its fan-out, so NATS appears
// only where it was measured.
func natsLatencyXYs(lp latencyPanel, m natsLatencyMarker, nats []Result) plotter.XYs {
	var xys plotter.XYs
	for _, r := range nats {
		fanout, ok := paramInt(r.Params, "fanout")
		if strings.TrimSuffix(r.Scenario, "-tls") != "core-latency" || isTLSResult(r) != m.tls || !ok || fanout <= 0 {
			continue
		}
		if l := lp.nats(r); l != nil && m.get(l) > 0 {
			xys = append(xys, plotter.XY{X: float64(fanout), Y: m.get(l)})
		}
	}
	return xys
}

// savePanels writes panels stacked top to bottom, each plotWidth ×
// plotHeight, as one PNG.
func savePanels(panels []*plot.Plot, path string) error {
	img := vgimg.New(plotWidth, plotHeight*vg.Length(len(panels)))
	dc := draw.New(img)
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Points(12)}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotThroughputByBatch draws Herald's publish records/s by batch size for
// 128 B records, one line for durable and one for ephemeral, with each NATS
// JetStream publish row (plaintext and TLS; acked before fsync, and synced
// always) as a marker at one record per publish and a dashed reference
// line. Single records are drawn at the run's largest bound on unacked
// publishes on both sides (nats.go's default, 4000, in make bench).
func plotThroughputByBatch(in plotInputs, path string) error {
	cells := slices.SortedFunc(slices.Values(in.publish.Cells), func(a, b heraldPublishCell) int {
		return cmp.Compare(a.BatchRecords, b.BatchRecords)
	})
	singleInflight := 0
	for _, c := range cells {
		if c.BatchRecords == 1 {
			singleInflight = max(singleInflight, c.Inflight)
		}
	}
	natsPending := 0
	for _, r := range in.nats {
		if strings.HasPrefix(r.Scenario, "js-publish") {
			natsPending = max(natsPending, jsMaxPending(r))
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Publish throughput by batch size (%d B records; NATS publishes one record at a time)", plotPayloadBytes)
	if singleInflight > 0 && natsPending > 0 {
		p.Title.Text += fmt.Sprintf("\nsingle records: Herald at most %d unacked, NATS %d", singleInflight, natsPending)
	}
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
			if c.Durable != sr.durable || c.PayloadBytes != plotPayloadBytes || c.BatchRecords <= 0 || c.RecordsPerSec <= 0 ||
				(c.BatchRecords == 1 && c.Inflight != singleInflight) {
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

	// NATS JetStream: one message per PublishAsync, so each row is a
	// marker at its records per publish (1; files that predate the
	// parameter published single messages too) and a dashed line across.
	nextColor := len(series)
	for _, r := range in.nats {
		base := strings.TrimSuffix(r.Scenario, "-tls")
		payload, okPayload := paramInt(r.Params, "payload")
		if (base != "js-publish" && base != "js-publish-sync") || !okPayload || payload != plotPayloadBytes || r.RecordsPerSec <= 0 ||
			jsMaxPending(r) != natsPending {
			continue
		}
		perPublish, ok := paramInt(r.Params, "records_per_publish")
		if !ok || perPublish <= 0 {
			perPublish = 1
		}
		x := float64(perPublish)
		clr := plotutil.Color(nextColor)
		nextColor++
		ref, err := plotter.NewLine(plotter.XYs{
			{X: min(batches[0], x), Y: r.RecordsPerSec},
			{X: max(batches[len(batches)-1], x), Y: r.RecordsPerSec},
		})
		if err != nil {
			return err
		}
		ref.Color = clr
		ref.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
		marker, err := plotter.NewScatter(plotter.XYs{{X: x, Y: r.RecordsPerSec}})
		if err != nil {
			return err
		}
		marker.Color = clr
		marker.Shape = draw.PyramidGlyph{}
		marker.Radius = vg.Points(5)
		p.Add(ref, marker)
		p.Legend.Add(jetStreamLegend(base == "js-publish-sync", isTLSResult(r)), ref, marker)
		batches = uniqueSorted(append(batches, x))
		ys = append(ys, r.RecordsPerSec)
	}

	setLogAxis(&p.X, batches, constantTicks(batches, func(v float64) string { return strconv.Itoa(int(v)) }))
	setLogAxis(&p.Y, ys, logTicks{format: formatRecordsPerSec})
	addLegendHeadroom(&p.Y)
	return p.Save(plotWidth, plotHeight, path)
}

// jsMaxPending is a js-publish row's bound on unacked publishes; a row
// without it is an older file's, published at 256.
func jsMaxPending(r Result) int {
	if n, ok := paramInt(r.Params, "max_pending"); ok {
		return n
	}
	return 256
}

// jetStreamLegend names a JetStream publish row in the legend.
func jetStreamLegend(syncAlways, tls bool) string {
	transport := "plaintext"
	if tls {
		transport = "TLS"
	}
	if syncAlways {
		return fmt.Sprintf("NATS JetStream async publish (%s), fsync before ack", transport)
	}
	return fmt.Sprintf("NATS JetStream async publish (%s), acked before fsync", transport)
}

// setLogAxis makes a logarithmic axis marked by ticker, spanning values
// (all > 0) with some room on either side.
func setLogAxis(a *plot.Axis, values []float64, ticker plot.Ticker) {
	lo, hi := slices.Min(values), slices.Max(values)
	a.Scale = plot.LogScale{}
	a.Tick.Marker = ticker
	a.Min, a.Max = lo/1.6, hi*1.6
}

// legendHeadroom is the share of a y axis left empty above the data, so
// that the legend (top left) covers no point.
const legendHeadroom = 0.3

// addLegendHeadroom raises a logarithmic axis's maximum so that the top
// legendHeadroom of it is empty, and leaves that part without ticks.
func addLegendHeadroom(a *plot.Axis) {
	top := a.Max
	a.Max *= math.Pow(a.Max/a.Min, legendHeadroom/(1-legendHeadroom))
	if t, ok := a.Tick.Marker.(logTicks); ok {
		t.max = top
		a.Tick.Marker = t
	}
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
	max    float64              // no ticks above it, when positive
}

// Ticks implements plot.Ticker.
func (t logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		decade := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * decade
			if v < lo || v > hi || (t.max > 0 && v > t.max) {
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
