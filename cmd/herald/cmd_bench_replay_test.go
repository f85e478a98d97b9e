package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The replay scenario fills a small shard, with a last batch shorter than
// the rest, and reads every record back in order; the rates are a
// benchmark's, not asserted here.
func TestBenchReplayRuns(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runBenchReplay([]string{"--records", "5000", "--batch", "64", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res replayResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
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
	}
	if res.FirstRecordMillis > res.Replay.Seconds*1000 {
		t.Errorf("first record after %vms, replay took %vs", res.FirstRecordMillis, res.Replay.Seconds)
	}
}

// The human summary names both phases.
func TestBenchReplaySummary(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runBenchReplay([]string{"--records", "100", "--size", "16"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"fill:", "replay:", "every offset once, in order: true"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchReplayFlags(t *testing.T) {
	for _, args := range [][]string{{"--records", "0"}, {"--size", "0"}, {"--batch", "-1"}, {"--inflight", "0"}, {"--nope"}} {
		var out, errOut bytes.Buffer
		if code := runBenchReplay(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
