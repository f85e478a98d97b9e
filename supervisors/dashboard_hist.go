package supervisors

import (
	"math"
	"sync/atomic"

	"github.com/heraldmq/herald/actors"
)

// The dashboard's latency figures (commit and publish-ack quantiles over
// the last seconds) come from a histogram of its own beside the metrics'
// OpenTelemetry one: quantiles of an interval need bucket counts the
// dashboard can read and subtract, which the OpenTelemetry SDK does not
// hand out. latencyHist is a fixed array of atomic counters, so recording
// costs one logarithm and one atomic add, no lock and no allocation.

// histBucketsPerOctave sets the histogram's resolution: a quantile is
// reported as its bucket's upper bound, at most 2^(1/4)-1 ≈ 19% above
// the true value.
const histBucketsPerOctave = 4

// histBuckets covers 1 ns up to 2^40 ns (about 18 minutes); longer values
// land in the last bucket.
const histBuckets = 40 * histBucketsPerOctave

// latencyHist counts durations in logarithmic buckets. Safe for
// concurrent use: Record from any goroutine, snapshot from another.
type latencyHist struct {
	counts [histBuckets]atomic.Uint64
}

// histCounts is a copy of a latencyHist's counts at one moment.
type histCounts [histBuckets]uint64

// histBucket is the bucket of d nanoseconds.
func histBucket(ns float64) int {
	if ns < 1 || math.IsNaN(ns) {
		return 0
	}
	return min(int(math.Log2(ns)*histBucketsPerOctave), histBuckets-1)
}

// histUpper is the upper bound of bucket i, in seconds.
func histUpper(i int) float64 {
	return math.Exp2(float64(i+1)/histBucketsPerOctave) / 1e9
}

// Record counts a duration of v seconds.
func (h *latencyHist) Record(v float64) {
	h.counts[histBucket(v*1e9)].Add(1)
}

// snapshot copies the counts.
func (h *latencyHist) snapshot() histCounts {
	var c histCounts
	for i := range h.counts {
		c[i] = h.counts[i].Load()
	}
	return c
}

// since returns the counts recorded between earlier and c.
func (c *histCounts) since(earlier *histCounts) histCounts {
	var d histCounts
	for i := range c {
		d[i] = c[i] - earlier[i]
	}
	return d
}

// total is how many durations c holds.
func (c *histCounts) total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

// quantile returns the q-quantile (0 < q ≤ 1) of c in seconds, as the
// upper bound of the bucket it falls in; 0 when c is empty.
func (c *histCounts) quantile(q float64) float64 {
	n := c.total()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i, v := range c {
		seen += v
		if seen >= rank {
			return histUpper(i)
		}
	}
	return histUpper(histBuckets - 1)
}

// teeRecorder records into both recorders (the metrics' histogram and the
// dashboard's).
type teeRecorder struct {
	a, b actors.Recorder
}

// Record implements actors.Recorder.
func (t teeRecorder) Record(v float64) {
	if t.a != nil {
		t.a.Record(v)
	}
	t.b.Record(v)
}
