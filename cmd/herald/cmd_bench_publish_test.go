package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// checkLatency fails t unless s holds samples with ordered percentiles.
func checkLatency(t *testing.T, what string, s latencySummary) {
	t.Helper()
	if s.Count <= 0 || s.P50 <= 0 {
		t.Errorf("%s: no samples: %+v", what, s)
	}
	if !slices.IsSorted([]float64{s.P50, s.P90, s.P99, s.P999, s.Max}) {
		t.Errorf("%s: percentiles out of order: %+v", what, s)
	}
}

// runBenchJSON runs `herald bench args... --json` and decodes the result.
func runBenchJSON(t *testing.T, res any, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := runBench(append(args, "--json"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
}

// The publish scenario runs its smallest matrix (both durabilities, one
// shape) and reports a sane cell for each; the rates are a benchmark's.
func TestBenchPublishRuns(t *testing.T) {
	var res publishResult
	runBenchJSON(t, &res, "publish", "--durable", "both", "--batch", "64", "--payload", "128", "--duration", "200ms")
	if res.Scenario != "publish" || len(res.Cells) != 2 || res.Inflight != defaultPublishInflight || res.ClientInflightBytes <= 0 {
		t.Fatalf("unexpected result: %+v", res)
	}
	for i, c := range res.Cells {
		if c.Durable != (i == 0) || c.BatchRecords != 64 || c.PayloadBytes != 128 {
			t.Errorf("cell %d has the wrong shape: %+v", i, c)
		}
		if c.Records != c.Batches*64 || c.Records <= 0 || c.RecordsPerSec <= 0 || c.MBPerSec <= 0 || c.Seconds <= 0 {
			t.Errorf("cell %s: %+v", c.name(), c)
		}
		checkLatency(t, c.name(), c.AckLatency)
		if c.AckLatency.Count != c.Batches {
			t.Errorf("cell %s: %d latency samples for %d batches", c.name(), c.AckLatency.Count, c.Batches)
		}
	}
}

// Bad matrix flags are usage errors, before any node starts.
func TestBenchPublishFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--durable", "maybe"},
		{"--batch", "0"},
		{"--payload", "12q"},
		{"--inflight", "0"},
	} {
		var out, errOut bytes.Buffer
		if code := runBench(append([]string{"publish"}, args...), &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
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
	p := newBenchProgress(&buf)
	p.phase("x", "y", nil, 0)
	p.close()
	p.close()
	if buf.Len() != 0 {
		t.Fatalf("drew %q on a non-terminal", buf.String())
	}
}
