package main

import "testing"

// The groups scenario consumes a small preload by push (one window) and by
// pull, and reports a rate for each; the rates are a benchmark's.
func TestBenchGroupsRuns(t *testing.T) {
	var res groupsResult
	runBenchJSON(t, &res, "groups", "--records", "1000", "--window", "100")
	if res.Scenario != "groups" || res.RecordsPerRun != 1000 || len(res.Runs) != 2 {
		t.Fatalf("unexpected result: %+v", res)
	}
	if r := res.Runs[0]; r.Mode != "push" || r.Window != 100 {
		t.Errorf("first run: %+v", r)
	}
	if r := res.Runs[1]; r.Mode != "pull" || r.AcksInflight != 64 {
		t.Errorf("second run: %+v", r)
	}
	for _, r := range res.Runs {
		if r.Records != 1000 || r.RecordsPerSec <= 0 || r.Seconds <= 0 || r.PreloadRecordsPerSec <= 0 {
			t.Errorf("%s: %+v", r.name(), r)
		}
	}
}
