package main

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"testing"
)

// runBenchScenarioJSON runs one scenario's entry point with --json and
// decodes its result.
func runBenchScenarioJSON(t *testing.T, run func(args []string, stdout, stderr io.Writer) int, res any, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(append(args, "--json"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
}

// The fanout scenario runs two short fanouts and reports, for each, records
// published and delivered to every subscriber; its rates are a benchmark's.
func TestBenchFanoutRuns(t *testing.T) {
	var res fanoutResult
	runBenchScenarioJSON(t, runBenchFanout, &res, "--fanouts", "1,2", "--duration", "200ms")
	if res.Scenario != "fanout" || res.BatchRecords != 64 || res.PayloadBytes != 128 || res.Inflight != defaultPublishInflight ||
		res.QueueCapacity == 0 || len(res.Runs) != 2 {
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
		if r.Missing != r.Expected-r.Delivered || r.Missing < 0 || r.GapRecords < 0 || r.DroppedBatches < 0 {
			t.Errorf("fanout %d: inconsistent losses: %+v", r.Fanout, r)
		}
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchFanoutFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--fanouts", "1,x"},
		{"--fanouts", "0"},
		{"--batch", "0"},
		{"--duration", "0s"},
	} {
		var out, errOut bytes.Buffer
		if code := runBenchFanout(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
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
