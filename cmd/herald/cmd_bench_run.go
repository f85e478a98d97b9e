package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

// What the scenarios other than isolation share: an in-process node on a
// temporary data dir, latency summaries from HDR histograms, JSON output and
// a one-line progress display.

// benchNode is a node started in this process on a temporary data dir for
// one bench run. close shuts it down and removes the directory.
type benchNode struct {
	// node is the running node.
	node *supervisors.Node
	// dir is the temporary data dir, removed by close.
	dir string
}

// startBenchNode starts a node with the default configuration on a fresh
// temporary data dir, listening on loopback ports chosen by the kernel.
func startBenchNode() (*benchNode, error) {
	dir, err := os.MkdirTemp("", "herald-bench-")
	if err != nil {
		return nil, err
	}
	cfg := supervisors.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = dir, "127.0.0.1:0", "127.0.0.1:0"
	node, err := supervisors.Start(cfg, supervisors.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &benchNode{node: node, dir: dir}, nil
}

// dial connects a new client to the node.
func (n *benchNode) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	return client.Dial(ctx, n.node.Addr(), append([]client.Option{client.WithCAFile(n.node.CAFile())}, opts...)...)
}

// close shuts the node down and removes its data dir.
func (n *benchNode) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.node.Shutdown(ctx)
	_ = os.RemoveAll(n.dir)
}

// latencySummary is a latency distribution as reported, in microseconds.
type latencySummary struct {
	// Count is the number of samples.
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p99_9_us"`
	Max   float64 `json:"max_us"`
}

// String formats s on one line for the human summaries.
func (s latencySummary) String() string {
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s",
		fmtMicros(s.P50), fmtMicros(s.P90), fmtMicros(s.P99), fmtMicros(s.P999), fmtMicros(s.Max))
}

// fmtMicros formats a duration given in microseconds with a fitting unit.
func fmtMicros(us float64) string {
	if us >= 1000 {
		return strconv.FormatFloat(us/1000, 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(us, 'f', 0, 64) + "µs"
}

// Bounds of the latency histograms: 1 µs to one minute, three significant
// digits.
const (
	latencyMinMicros = 1
	latencyMaxMicros = int64(time.Minute / time.Microsecond)
	latencySigFigs   = 3
)

// newLatencyHistogram returns an HDR histogram of microseconds. It is not
// safe for concurrent use: each belongs to one recording goroutine.
func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(latencyMinMicros, latencyMaxMicros, latencySigFigs)
}

// recordLatency records d in h, clamped to the histogram's range.
func recordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	us = max(us, latencyMinMicros)
	us = min(us, latencyMaxMicros)
	_ = h.RecordValue(us) // in range by construction
}

// summarize returns h's percentiles.
func summarize(h *hdrhistogram.Histogram) latencySummary {
	return latencySummary{
		Count: h.TotalCount(),
		Mean:  h.Mean(),
		P50:   float64(h.ValueAtQuantile(50)),
		P90:   float64(h.ValueAtQuantile(90)),
		P99:   float64(h.ValueAtQuantile(99)),
		P999:  float64(h.ValueAtQuantile(99.9)),
		Max:   float64(h.Max()),
	}
}

// writeBenchJSON prints v indented on w.
func writeBenchJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

// parseSizes parses a comma-separated list of byte sizes; each is a number
// with an optional k/KiB or m/MiB suffix (powers of 1024).
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		lower := strings.ToLower(f)
		for _, suf := range []struct {
			s string
			m int
		}{{"kib", 1 << 10}, {"k", 1 << 10}, {"mib", 1 << 20}, {"m", 1 << 20}, {"b", 1}} {
			if strings.HasSuffix(lower, suf.s) {
				lower, mult = strings.TrimSpace(strings.TrimSuffix(lower, suf.s)), suf.m
				break
			}
		}
		n, err := strconv.Atoi(lower)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid size %q", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// parseDurability parses --durable: true, false or both.
func parseDurability(s string) ([]bool, error) {
	switch strings.ToLower(s) {
	case "both":
		return []bool{true, false}, nil
	case "true", "durable":
		return []bool{true}, nil
	case "false", "ephemeral":
		return []bool{false}, nil
	}
	return nil, fmt.Errorf("invalid --durable %q (want true, false or both)", s)
}

// progressInterval is how often the progress line is redrawn.
const progressInterval = 250 * time.Millisecond

// benchProgress draws one line on a terminal: the current phase, its
// elapsed time and the rate of its counter. On anything else it draws
// nothing. Its goroutine is started by newBenchProgress and stopped by
// close, which waits for it.
type benchProgress struct {
	// w is the terminal; nil disables the display.
	w io.Writer
	// stop ends the goroutine; done is closed when it has ended.
	stop, done chan struct{}
	// closeOnce makes close idempotent.
	closeOnce sync.Once
	// mu protects phase.
	mu struct {
		sync.Mutex
		// phase is what is drawn; nil between phases.
		phase *progressPhase
	}
}

// progressPhase is one measured step shown by benchProgress.
type progressPhase struct {
	// label names the step.
	label string
	// unit names what count counts.
	unit string
	// count is advanced by the scenario; nil shows only the time.
	count *atomic.Int64
	// length is the step's planned length; 0 when it runs to a count.
	length time.Duration
	// start is when the step began.
	start time.Time
}

// newBenchProgress returns a progress display on stderr, which draws only
// when stderr is a terminal.
func newBenchProgress(stderr io.Writer) *benchProgress {
	p := &benchProgress{stop: make(chan struct{}), done: make(chan struct{})}
	if !isTerminal(stderr) {
		close(p.done)
		return p
	}
	p.w = stderr
	go p.run()
	return p
}

// phase starts showing a new step. count may be nil; length may be 0.
func (p *benchProgress) phase(label, unit string, count *atomic.Int64, length time.Duration) {
	p.mu.Lock()
	p.mu.phase = &progressPhase{label: label, unit: unit, count: count, length: length, start: time.Now()}
	p.mu.Unlock()
}

func (p *benchProgress) run() {
	defer close(p.done)
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-t.C:
			p.mu.Lock()
			ph := p.mu.phase
			p.mu.Unlock()
			if ph != nil {
				fmt.Fprint(p.w, "\r\033[K"+ph.line(time.Now()))
			}
		}
	}
}

// line renders the phase at now.
func (ph *progressPhase) line(now time.Time) string {
	el := now.Sub(ph.start)
	s := ph.label + "  " + el.Truncate(100*time.Millisecond).String()
	if ph.length > 0 {
		s += "/" + ph.length.String()
	}
	if ph.count != nil {
		n := ph.count.Load()
		s += fmt.Sprintf("  %d %s", n, ph.unit)
		if secs := el.Seconds(); secs > 0 {
			s += fmt.Sprintf(" (%.0f/s)", float64(n)/secs)
		}
	}
	return s
}

// close stops the display, clears its line and waits for its goroutine.
func (p *benchProgress) close() {
	p.closeOnce.Do(func() { close(p.stop) })
	<-p.done
}
