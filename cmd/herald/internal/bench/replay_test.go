package bench

import (
	"strings"
	"testing"
)

// The replay scenario fills a small shard, with a last batch shorter than
// the rest, and reads every record back in order; the rates are a
// benchmark's, not asserted here.
func TestBenchReplayRuns(t *testing.T) {
	var res replayResult
	runJSON(t, &res, "replay", "--records", "5000", "--batch", "64")
	if res.Scenario != "replay" || res.Records != 5000 || res.PayloadBytes != defaultReplayPayload || !res.Durable || !res.Verified {
		t.Fatalf("unexpected result: %+v", res)
	}
	if res.QueueCapacity == 0 || res.FirstRecordMillis <= 0 {
		t.Errorf("subscription not described: %+v", res)
	}
	for name, r := range map[string]replayRate{"fill": res.Fill, "replay": res.Replay} {
		if r.Seconds <= 0 || r.RecordsPerSec <= 0 || r.MBPerSec <= 0 {
			t.Errorf("%s: %+v", name, r)
		}
		checkCPU(t, name, r.CPU, 5000, false)
	}
	if res.FirstRecordMillis > res.Replay.Seconds*1000 {
		t.Errorf("first record after %vms, replay took %vs", res.FirstRecordMillis, res.Replay.Seconds)
	}
}

// The human summary names both phases.
func TestBenchReplaySummary(t *testing.T) {
	out := runText(t, "replay", "--in-process", "--records", "100", "--size", "16")
	for _, want := range []string{"fill:", "replay:", "every offset once, in order: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchReplayFlags(t *testing.T) {
	checkUsageErrors(t, "replay", [][]string{{"--records", "0"}, {"--size", "0"}, {"--batch", "-1"}, {"--inflight", "0"}, {"--nope"}})
}
