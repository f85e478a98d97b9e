package bench

import "testing"

// The latency scenario runs two short fanouts and reports, for each, every
// record delivered to every subscriber with ordered latency percentiles;
// the figures themselves are a benchmark's.
func TestBenchLatencyRuns(t *testing.T) {
	var res latencyResult
	runJSON(t, &res, "latency", "--fanouts", "1,2", "--duration", "200ms", "--rate", "500", "--conns", "1")
	if res.Scenario != "latency" || res.RequestedRate != 500 || res.PayloadBytes != 128 || len(res.Runs) != 2 {
		t.Fatalf("unexpected result: %+v", res)
	}
	for i, r := range res.Runs {
		if r.Fanout != i+1 || r.Connections != 1 || r.Rate != 500 || r.WarmupSeconds <= 0 {
			t.Errorf("run %d has the wrong shape: %+v", i, r)
		}
		// 200 ms at 500/s: 100 records.
		if r.Published != 100 || r.PublishedPerSec <= 0 || r.Expected != r.Published*int64(r.Fanout) {
			t.Errorf("fanout %d: published %d (%.0f/s), expected %d", r.Fanout, r.Published, r.PublishedPerSec, r.Expected)
		}
		if r.Missing != r.Expected-r.Delivered || r.Delivered <= 0 {
			t.Errorf("fanout %d: delivered %d of %d, missing %d", r.Fanout, r.Delivered, r.Expected, r.Missing)
		}
		checkLatency(t, "from schedule", r.Latency)
		checkLatency(t, "from send", r.LatencyFromSend)
		if r.PacerLag.Count != r.Published {
			t.Errorf("fanout %d: %d pacer samples for %d records", r.Fanout, r.PacerLag.Count, r.Published)
		}
		// The warm-up's records are delivered but not sampled.
		if r.Latency.Count != r.LatencyFromSend.Count || r.Latency.Count >= r.Delivered {
			t.Errorf("fanout %d: %d samples for %d deliveries", r.Fanout, r.Latency.Count, r.Delivered)
		}
		checkCPU(t, "latency", r.CPU, r.Delivered-r.LateRecords, false) // the CPU window ends before late records
	}
}

// A run's rate is lowered to keep rate × fanout within the delivery cap.
func TestLatencyRunRate(t *testing.T) {
	cfg := latencyConfig{rate: 1000, maxDeliveries: 20_000}
	for _, tc := range []struct{ fanout, want int }{{1, 1000}, {10, 1000}, {100, 200}, {1000, 20}, {100_000, 1}} {
		if got := cfg.runRate(tc.fanout); got != tc.want {
			t.Errorf("runRate(%d) = %d, want %d", tc.fanout, got, tc.want)
		}
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchLatencyFlags(t *testing.T) {
	checkUsageErrors(t, "latency", [][]string{
		{"--fanouts", ""},
		{"--rate", "0"},
		{"--size", "15"},
		{"--conns", "0"},
		{"--max-deliveries", "-1"},
	})
}
