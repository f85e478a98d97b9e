package bench

import "testing"

// The isolation scenario runs end to end and reports every field (its
// numbers are a benchmark's, not asserted here).
func TestBenchIsolationRuns(t *testing.T) {
	var res isolationResult
	runJSONNode(t, false, &res, "isolation", "--fast", "2", "--duration", "300ms")
	if res.Scenario != "isolation" || res.FastSubscribers != 2 || res.Baseline <= 0 || res.WithStalled <= 0 || res.RSSBytes <= 0 || res.Note == "" {
		t.Fatalf("incomplete result: %+v", res)
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchIsolationFlags(t *testing.T) {
	checkUsageErrors(t, "isolation", [][]string{{"--fast", "0"}, {"--duration", "0s"}, {"--in-process=false"}, {"--nope"}})
}
