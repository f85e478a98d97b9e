package bench

import (
	"slices"
	"testing"
)

// The fanout scenario runs two short fanouts and reports, for each, records
// published and delivered to every subscriber, with the CPU per million
// deliveries; its rates are a benchmark's.
func TestBenchFanoutRuns(t *testing.T) {
	var res fanoutResult
	runJSON(t, &res, "fanout", "--fanouts", "1,2", "--duration", "200ms")
	if res.Scenario != "fanout" || res.BatchRecords != 64 || res.PayloadBytes != 128 || res.Inflight != defaultPublishInflight ||
		res.QueueCapacity == 0 || len(res.Runs) != 2 || res.NodeProcess {
		t.Fatalf("unexpected result: %+v", res)
	}
	for i, r := range res.Runs {
		if r.Fanout != i+1 {
			t.Errorf("run %d has fanout %d", i, r.Fanout)
		}
		if r.Published <= 0 || r.Published%64 != 0 || r.PublishedPerSec <= 0 || r.Seconds <= 0 {
			t.Errorf("fanout %d: nothing published: %+v", r.Fanout, r)
		}
		if r.Expected != r.Published*int64(r.Fanout) || r.Delivered <= 0 || r.Delivered > r.Expected ||
			r.DeliveredInWindow > r.Delivered || r.DeliveredPerSec <= 0 {
			t.Errorf("fanout %d: inconsistent deliveries: %+v", r.Fanout, r)
		}
		if r.Missing != r.Expected-r.Delivered || r.Missing < 0 || r.LateRecords < 0 || r.GapRecords < 0 || r.DroppedBatches < 0 {
			t.Errorf("fanout %d: inconsistent losses: %+v", r.Fanout, r)
		}
		checkCPU(t, "fanout", r.CPU, r.Delivered-r.LateRecords, false) // the CPU window ends before late records
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchFanoutFlags(t *testing.T) {
	checkUsageErrors(t, "fanout", [][]string{
		{"--fanouts", "1,x"},
		{"--fanouts", "0"},
		{"--batch", "0"},
		{"--duration", "0s"},
	})
}

func TestParseFanouts(t *testing.T) {
	got, err := parseFanouts(" 1, 10,1000")
	if err != nil || !slices.Equal(got, []int{1, 10, 1000}) {
		t.Fatalf("parseFanouts = %v, %v", got, err)
	}
	for _, in := range []string{"", "1,", "-1", "a"} {
		if _, err := parseFanouts(in); err == nil {
			t.Errorf("parseFanouts(%q) accepted", in)
		}
	}
}
