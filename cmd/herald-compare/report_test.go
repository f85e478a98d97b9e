package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeResults writes name.json files holding the given JSON texts.
func writeResults(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReportRatiosFromOneRun(t *testing.T) {
	dir := writeResults(t, map[string]string{
		"fanout": `{"runs":[{"fanout":1,"delivered_records_per_sec":900},{"fanout":10,"delivered_records_per_sec":2000}]}`,
		"latency": `{"runs":[{"fanout":1,"latency_from_send":{"p50_us":150,"p99_us":600}},
			{"fanout":10,"latency_from_send":{"p99_us":450}},{"fanout":1000,"latency_from_send":{"p99_us":9000}}]}`,
		"publish": `{"cells":[{"durable":true,"batch_records":1,"payload_bytes":128,"inflight":256,"records_per_sec":300},
			{"durable":true,"batch_records":1,"payload_bytes":128,"inflight":4000,"records_per_sec":700},
			{"durable":false,"batch_records":1,"payload_bytes":128,"inflight":4000,"records_per_sec":99999},
			{"durable":false,"batch_records":64,"payload_bytes":128,"inflight":256,"records_per_sec":99999},
			{"durable":true,"batch_records":64,"payload_bytes":128,"inflight":256,"records_per_sec":2000}]}`,
		"ceiling":   `{"badger":{"records_per_sec":1000},"herald_publish":{"records_per_sec":790}}`,
		"groups":    `{"runs":[{"mode":"push","window":100,"records_per_sec":1},{"mode":"push","window":1000,"records_per_sec":250},{"mode":"pull","records_per_sec":160}]}`,
		"isolation": `{"ratio":0.96}`,
		"idle":      `{"per_subscription":{"rss_bytes":16384}}`,
		"nats": `[{"scenario":"core-fanout","params":{"fanout":1},"deliveries_per_sec":1000},
			{"scenario":"core-fanout-tls","tls":true,"params":{"fanout":1},"deliveries_per_sec":600},
			{"scenario":"core-fanout","params":{"fanout":10},"deliveries_per_sec":2000},
			{"scenario":"core-latency","params":{"fanout":1},"latency_from_send_us":{"p50":100,"p99":500}},
			{"scenario":"core-latency","params":{"fanout":10},"latency_from_send_us":{"p99":300}},
			{"scenario":"core-latency-tls","params":{"fanout":1000},"latency_from_send_us":{"p99":8000}},
			{"scenario":"js-publish","records_per_sec":100},
			{"scenario":"js-publish","params":{"max_pending":4000},"records_per_sec":400},
			{"scenario":"js-consume","records_per_sec":100}]`,
	})
	var out bytes.Buffer
	jsonOut := filepath.Join(t.TempDir(), "targets.json")
	if err := runReport([]string{"--in", dir, "--json", jsonOut}, &out, &out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var ts []Target
	if err := json.Unmarshal(b, &ts); err != nil {
		t.Fatal(err)
	}
	byID := map[string]Target{}
	for _, tg := range ts {
		byID[tg.ID] = tg
	}
	want := []struct {
		id      string
		ratio   float64
		met     bool
		missing bool
	}{
		{"1a", 0.9, false, false},   // 900 / 1000 < 1.0
		{"1b", 1.5, true, false},    // 900 / 600 >= 1.3
		{"2a", 1.0, true, false},    // 2000 / 2000 >= 0.9
		{"2b", 0, false, true},      // no TLS row at fan-out 10
		{"3a", 1.5, true, false},    // 150 / 100 <= 1.5
		{"3b", 1.2, true, false},    // 600 / 500
		{"4", 1.5, true, false},     // 450 / 300
		{"5a", 9000, true, false},   // absolute, <= 10 ms
		{"5b", 1.125, false, false}, // 9000 / 8000 > 1
		{"6a", 1.75, true, false},   // 700 / 400: the durable single-record cell at 4000 in flight, against JetStream at 4000
		{"6a@256", 3, true, false},  // 300 / 100: both at 256 (a row without max_pending is an older file's, at 256)
		{"7a", 5, true, false},      // 2000 / 400: JetStream at 4000
		{"7c", 0.79, false, false},  // 790 / 1000 < 0.8
		{"8a", 1.6, true, false},    // 160 / 100
		{"9a", 2.5, true, false},    // 250 / 100: window 1000, not 100
		{"10a", 0.96, true, false},  // isolation
		{"10b", 16, false, false},   // 16 KiB > 15
		{"10c", 0, false, true},     // no replay.json
		{"8b", 0, false, true},      // no js-consume-tls
		{"6b", 0, false, true},      // no js-publish-tls
		{"6b@256", 0, false, true},  // no js-publish-tls
		{"3c", 0, false, true},      // no core-latency-tls at fan-out 1
		{"9b", 0, false, true},      // no js-consume-tls
		{"7b", 0, false, true},      // no js-publish-tls
		{"3d", 0, false, true},      // no core-latency-tls at fan-out 1
	}
	for _, w := range want {
		got, ok := byID[w.id]
		if !ok {
			t.Fatalf("target %s missing from the report", w.id)
		}
		if (got.Missing != "") != w.missing {
			t.Errorf("%s: missing %q, want missing=%v", w.id, got.Missing, w.missing)
		}
		if got.Met != w.met {
			t.Errorf("%s: met %v, want %v (ratio %v)", w.id, got.Met, w.met, got.Ratio)
		}
		if !w.missing && (got.Ratio < w.ratio*0.999 || got.Ratio > w.ratio*1.001) {
			t.Errorf("%s: ratio %v, want %v", w.id, got.Ratio, w.ratio)
		}
	}
	if !strings.Contains(out.String(), "missing: replay.json") {
		t.Errorf("the table does not say replay.json is missing:\n%s", out.String())
	}
}

func TestReportNeedsIn(t *testing.T) {
	var out bytes.Buffer
	if err := runReport(nil, &out, &out); err == nil {
		t.Fatal("report without --in succeeded")
	}
}

func TestReportRejectsBadJSON(t *testing.T) {
	dir := writeResults(t, map[string]string{"fanout": `{"runs": [`})
	var out bytes.Buffer
	err := runReport([]string{"--in", dir}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "fanout.json") {
		t.Fatalf("err = %v, want one naming fanout.json", err)
	}
}
