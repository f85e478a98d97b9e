package bench

import (
	"bytes"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The publish scenario, with its node in its own process (the default),
// runs a small matrix (both durabilities, single-record async at two
// in-flight bounds and a batch) and reports a sane cell for each, with the
// node's CPU apart from the client's; the rates are a benchmark's.
func TestBenchPublishRuns(t *testing.T) {
	var res publishResult
	runJSONNode(t, true, &res, "publish", "--durable", "both", "--batch", "1,64", "--payload", "128", "--single-inflight", "64,300", "--duration", "300ms")
	if res.Scenario != "publish" || len(res.Cells) != 6 || res.Inflight != defaultPublishInflight || !slices.Equal(res.SingleInflight, []int{64, 300}) ||
		res.ClientInflightBytes <= 0 || !res.NodeProcess {
		t.Fatalf("unexpected result: %+v", res)
	}
	for i, c := range res.Cells {
		// Per durability: single-record at 64 and 300 in flight, then a
		// batch of 64.
		batch, mode, inflight := 1, modeSingleAsync, []int{64, 300, 0}[i%3]
		if i%3 == 2 {
			batch, mode, inflight = 64, modeBatch, defaultPublishInflight
		}
		if c.Durable != (i < 3) || c.BatchRecords != batch || c.PayloadBytes != 128 || c.Mode != mode || c.Inflight != inflight {
			t.Errorf("cell %d has the wrong shape: %+v", i, c)
		}
		if c.Records != c.Batches*int64(batch) || c.Records <= 0 || c.RecordsPerSec <= 0 || c.MBPerSec <= 0 || c.Seconds <= 0 {
			t.Errorf("cell %s: %+v", c.name(), c)
		}
		checkLatency(t, c.name(), c.AckLatency)
		if c.AckLatency.Count != c.Batches {
			t.Errorf("cell %s: %d latency samples for %d batches", c.name(), c.AckLatency.Count, c.Batches)
		}
		checkCPU(t, c.name(), c.CPU, c.Records, true)
		// The node's commits are read from its /metrics.
		if c.Durable && (c.Commits <= 0 || c.BatchesPerCommit <= 0) {
			t.Errorf("cell %s: no storage commits: %+v", c.name(), c)
		}
	}
}

// The summary names each row's mode: single-record async or batches.
func TestBenchPublishSummary(t *testing.T) {
	out := runText(t, "publish", "--in-process", "--durable", "false", "--batch", "1,8", "--payload", "16", "--duration", "100ms")
	for _, want := range []string{"ephemeral 1x16B", "single-record async, 256 in flight", "single-record async, 4000 in flight",
		"ephemeral 8x16B", "batches of 8, 256 in flight", "node ms/M", "node in this process"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// Bad matrix flags are usage errors, before any node starts.
func TestBenchPublishFlags(t *testing.T) {
	checkUsageErrors(t, "publish", [][]string{
		{"--durable", "maybe"},
		{"--batch", "0"},
		{"--payload", "12q"},
		{"--inflight", "0"},
		{"--single-inflight", "256,0"},
		{"--nope"},
	})
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"128", []int{128}},
		{"128,1k,16KiB", []int{128, 1024, 16384}},
		{" 1m , 64B", []int{1 << 20, 64}},
	} {
		got, err := parseSizes(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "k", "-1", "1,,2", "1.5k"} {
		if _, err := parseSizes(in); err == nil {
			t.Errorf("parseSizes(%q) accepted", in)
		}
	}
}

// recordLatency clamps out-of-range durations instead of dropping them.
func TestRecordLatencyClamps(t *testing.T) {
	h := newLatencyHistogram()
	for _, d := range []time.Duration{0, 500 * time.Microsecond, time.Hour} {
		recordLatency(h, d)
	}
	s := summarize(h)
	if s.Count != 3 || s.Max < float64(latencyMaxMicros)*0.99 {
		t.Fatalf("summary %+v", s)
	}
	checkLatency(t, "clamped", s)
}

// The progress line shows the phase, its length and its counter's rate.
func TestProgressLine(t *testing.T) {
	var n atomic.Int64
	n.Store(500)
	ph := progressPhase{label: "publish durable 64x128B", unit: "records", count: &n, length: 2 * time.Second, start: time.Unix(0, 0)}
	got := ph.line(time.Unix(1, 0))
	want := "publish durable 64x128B  1s/2s  500 records (500/s)"
	if got != want {
		t.Fatalf("line = %q, want %q", got, want)
	}
	// Not a terminal: nothing drawn, close returns at once and twice.
	var buf bytes.Buffer
	p := newBenchProgress(&buf, false)
	p.phase("x", "y", nil, 0)
	p.close()
	p.close()
	if buf.Len() != 0 {
		t.Fatalf("drew %q on a non-terminal", buf.String())
	}
}
