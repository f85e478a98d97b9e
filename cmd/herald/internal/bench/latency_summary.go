package bench

import (
	"fmt"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

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
