package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The isolation scenario runs end to end and reports every field (its
// numbers are a benchmark's, not asserted here).
func TestBenchIsolationRuns(t *testing.T) {
	var out, errOut bytes.Buffer
	code := runBench([]string{"isolation", "--fast", "2", "--duration", "300ms", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res isolationResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.Scenario != "isolation" || res.FastSubscribers != 2 || res.Baseline <= 0 || res.WithStalled <= 0 || res.RSSBytes <= 0 {
		t.Fatalf("incomplete result: %+v", res)
	}
	if runBench([]string{"nope"}, &out, &errOut) != 2 {
		t.Fatal("an unknown scenario must be a usage error")
	}
}
