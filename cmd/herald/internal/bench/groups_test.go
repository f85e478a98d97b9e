package bench

import "testing"

// The groups scenario consumes a small preload by push (one window) and by
// pull, and reports a rate and the CPU per million acked records for each;
// the rates are a benchmark's.
func TestBenchGroupsRuns(t *testing.T) {
	var res groupsResult
	runJSON(t, &res, "groups", "--records", "1000", "--window", "100")
	if res.Scenario != "groups" || res.RecordsPerRun != 1000 || len(res.Runs) != 2 {
		t.Fatalf("unexpected result: %+v", res)
	}
	if r := res.Runs[0]; r.Mode != "push" || r.Window != 100 {
		t.Errorf("first run: %+v", r)
	}
	if r := res.Runs[1]; r.Mode != "pull" || r.AcksInflight != 1024 {
		t.Errorf("second run: %+v", r)
	}
	for _, r := range res.Runs {
		if r.Records != 1000 || r.RecordsPerSec <= 0 || r.Seconds <= 0 || r.PreloadRecordsPerSec <= 0 {
			t.Errorf("%s: %+v", r.name(), r)
		}
		checkCPU(t, r.name(), r.CPU, 1000, false)
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchGroupsFlags(t *testing.T) {
	checkUsageErrors(t, "groups", [][]string{{"--window", "1"}, {"--window", "x"}, {"--records", "0"}, {"--acks-inflight", "0"}})
}
