package bench

import (
	"math"
	"testing"
)

// The isolation scenario runs end to end and reports every field (its
// numbers are a benchmark's, not asserted here).
func TestBenchIsolationRuns(t *testing.T) {
	var res isolationResult
	runJSONNode(t, false, &res, "isolation", "--fast", "2", "--duration", "300ms", "--rounds", "2")
	if res.Scenario != "isolation" || res.FastSubscribers != 2 || res.Baseline <= 0 || res.WithStalled <= 0 || res.RSSBytes <= 0 ||
		res.RSSBaseline <= 0 || res.HeapBaseline <= 0 || res.HeapWithStalled <= 0 || res.Note == "" || res.Rounds != 2 {
		t.Fatalf("incomplete result: %+v", res)
	}
	// A B B A, and the figures are the means of each kind's phases.
	if len(res.Phases) != 4 {
		t.Fatalf("%d phases, want 4: %+v", len(res.Phases), res.Phases)
	}
	var base, stalled float64
	for i, ph := range res.Phases {
		if want := i == 1 || i == 2; ph.Stalled != want {
			t.Errorf("phase %d stalled=%v, want %v", i+1, ph.Stalled, want)
		}
		if ph.Stalled {
			stalled += ph.DeliveriesPerSec / 2
		} else {
			base += ph.DeliveriesPerSec / 2
		}
	}
	if math.Abs(base-res.Baseline) > 1e-6*base || math.Abs(stalled-res.WithStalled) > 1e-6*stalled || math.Abs(res.Ratio-stalled/base) > 1e-9 {
		t.Errorf("baseline %v / stalled %v / ratio %v are not the phases' means (%v, %v)", res.Baseline, res.WithStalled, res.Ratio, base, stalled)
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchIsolationFlags(t *testing.T) {
	checkUsageErrors(t, "isolation", [][]string{{"--fast", "0"}, {"--duration", "0s"}, {"--rounds", "0"}, {"--in-process=false"}, {"--nope"}})
}
