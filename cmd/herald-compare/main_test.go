package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"
)

// testConfig is a brief run: each scenario takes a fraction of a second.
func testConfig() config {
	cfg := defaultConfig()
	cfg.duration = 300 * time.Millisecond
	cfg.messages = 3000
	return cfg
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			results, err := sc.run(t.Context(), testConfig())
			if err != nil {
				t.Fatal(err)
			}
			if len(results) == 0 {
				t.Fatal("no results")
			}
			for _, r := range results {
				if r.System != "nats" || r.Scenario != sc.name {
					t.Errorf("result labelled %s/%s, want nats/%s", r.System, r.Scenario, sc.name)
				}
				if !(r.RecordsPerSec > 0) {
					t.Errorf("%v: records_per_sec = %v, want > 0", r.Params, r.RecordsPerSec)
				}
				if sc.name != "js-publish" && !(r.DeliveriesPerSec > 0) {
					t.Errorf("%v: deliveries_per_sec = %v, want > 0", r.Params, r.DeliveriesPerSec)
				}
				if sc.name == "core-latency" {
					l := r.LatencyMicros
					if l == nil || !(l.P50 > 0) || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.P999 || l.P999 > l.Max {
						t.Errorf("%v: latency_us = %+v, want positive and ordered", r.Params, l)
					}
				}
			}
		})
	}
}

func TestRunJSON(t *testing.T) {
	var out, log bytes.Buffer
	args := []string{"--json", "--duration", "200ms", "--scenarios", "core-fanout", "--fanouts", "2"}
	if err := run(context.Background(), args, &out, &log); err != nil {
		t.Fatal(err)
	}
	var results []map[string]any
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out.String())
	}
	if len(results) != 1 {
		t.Fatalf("got %d results, want 1", len(results))
	}
	for _, key := range []string{"system", "scenario", "params", "records_per_sec", "deliveries_per_sec"} {
		if _, ok := results[0][key]; !ok {
			t.Errorf("result has no %q: %v", key, results[0])
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenarios", "nope"},
		{"--payload", "4"},
		{"--fanouts", "1,x"},
		{"--batch", "512"}, // above --max-pending
	} {
		var out, log bytes.Buffer
		if err := run(context.Background(), args, &out, &log); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}
