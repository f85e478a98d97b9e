package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gonum.org/v1/plot/plotter"
)

// Synthetic inputs in the shapes `herald bench latency|publish --json` and
// `herald-compare --json` write (only the fields the plots read, plus a few
// they must ignore).
const (
	testLatencyJSON = `{
  "scenario": "latency",
  "runs": [
    {"fanout": 1, "connections": 1, "rate": 1000,
     "latency": {"count": 3000, "mean_us": 900, "p50_us": 850, "p90_us": 1680, "p99_us": 4020, "p99_9_us": 5380, "max_us": 6990},
     "latency_from_send": {"count": 3000, "mean_us": 300, "p50_us": 297, "p90_us": 410, "p99_us": 643, "p99_9_us": 990, "max_us": 1500}},
    {"fanout": 10, "connections": 10, "rate": 1000,
     "latency": {"count": 30000, "mean_us": 1200, "p50_us": 1090, "p90_us": 1910, "p99_us": 3260, "p99_9_us": 7620, "max_us": 9870},
     "latency_from_send": {"count": 30000, "mean_us": 700, "p50_us": 712, "p90_us": 1200, "p99_us": 3170, "p99_9_us": 5000, "max_us": 8000}},
    {"fanout": 1000, "connections": 20, "rate": 20,
     "latency": {"count": 60000, "mean_us": 16000, "p50_us": 15860, "p90_us": 21660, "p99_us": 31170, "p99_9_us": 38110, "max_us": 38430},
     "latency_from_send": {"count": 60000, "mean_us": 15000, "p50_us": 15000, "p90_us": 21000, "p99_us": 30000, "p99_9_us": 37000, "max_us": 38000}}
  ]
}`
	// testOldLatencyJSON predates latency_from_send.
	testOldLatencyJSON = `{
  "scenario": "latency",
  "runs": [
    {"fanout": 1, "connections": 1, "rate": 1000,
     "latency": {"count": 3000, "mean_us": 900, "p50_us": 850, "p90_us": 1680, "p99_us": 4020, "p99_9_us": 5380, "max_us": 6990}},
    {"fanout": 10, "connections": 10, "rate": 1000,
     "latency": {"count": 30000, "mean_us": 1200, "p50_us": 1090, "p90_us": 1910, "p99_us": 3260, "p99_9_us": 7620, "max_us": 9870}}
  ]
}`
	testPublishJSON = `{
  "scenario": "publish",
  "cells": [
    {"durable": true,  "batch_records": 1,  "payload_bytes": 128,  "records_per_sec": 77082},
    {"durable": true,  "batch_records": 64, "payload_bytes": 128,  "records_per_sec": 777523},
    {"durable": false, "batch_records": 1,  "payload_bytes": 128,  "records_per_sec": 209878},
    {"durable": false, "batch_records": 64, "payload_bytes": 128,  "records_per_sec": 1867555},
    {"durable": true,  "batch_records": 64, "payload_bytes": 1024, "records_per_sec": 132094}
  ]
}`
	// testNATSJSON has plaintext and TLS rows; TLS latency at fan-out 1000
	// only, plaintext at 1 and 10 (NATS is drawn where it was measured).
	testNATSJSON = `[
  {"system": "nats", "scenario": "js-publish", "tls": false, "params": {"payload": 128, "batch": 64, "records_per_publish": 1}, "records_per_sec": 131879, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "js-publish-tls", "tls": true, "params": {"payload": 128, "batch": 64, "records_per_publish": 1}, "records_per_sec": 101879, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "js-publish-sync-tls", "tls": true, "params": {"payload": 128, "batch": 64, "records_per_publish": 1}, "records_per_sec": 3100, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "core-latency", "tls": false, "params": {"payload": 128, "fanout": 1, "rate": 1000},
   "records_per_sec": 1000, "deliveries_per_sec": 1000,
   "latency_us": {"p50": 171, "p90": 230, "p99": 354, "p99.9": 1384, "max": 2433},
   "latency_from_send_us": {"p50": 91, "p90": 130, "p99": 215, "p99.9": 900, "max": 2000}, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "core-latency", "tls": false, "params": {"payload": 128, "fanout": 10, "rate": 1000},
   "records_per_sec": 1000, "deliveries_per_sec": 10000,
   "latency_us": {"p50": 268, "p90": 337, "p99": 531, "p99.9": 1879, "max": 3424},
   "latency_from_send_us": {"p50": 181, "p90": 250, "p99": 347, "p99.9": 1200, "max": 3000}, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "core-latency-tls", "tls": true, "params": {"payload": 128, "fanout": 1000, "rate": 20},
   "records_per_sec": 20, "deliveries_per_sec": 20000,
   "latency_us": {"p50": 2000, "p90": 3000, "p99": 5000, "p99.9": 7000, "max": 9000},
   "latency_from_send_us": {"p50": 1900, "p90": 2900, "p99": 4900, "p99.9": 6900, "max": 8900}, "elapsed_ms": 3000}
]`
	// testOldNATSJSON predates the tls field, the TLS rows and
	// latency_from_send_us.
	testOldNATSJSON = `[
  {"system": "nats", "scenario": "js-publish", "params": {"payload": 128, "batch": 64}, "records_per_sec": 131879, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "core-latency", "params": {"payload": 128, "fanout": 1, "rate": 2000},
   "records_per_sec": 2000, "deliveries_per_sec": 2000,
   "latency_us": {"p50": 171, "p90": 230, "p99": 354, "p99.9": 1384, "max": 2433}, "elapsed_ms": 3000}
]`
)

// writeInputs writes the named files into a new temporary directory.
func writeInputs(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPlot(t *testing.T) {
	tests := []struct {
		name          string
		files         map[string]string
		latencyPanels int // panels of the latency plot
	}{
		{"with NATS", map[string]string{
			plotLatencyInput: testLatencyJSON, plotPublishInput: testPublishJSON, plotNATSInput: testNATSJSON,
		}, 2},
		{"without NATS", map[string]string{
			plotLatencyInput: testLatencyJSON, plotPublishInput: testPublishJSON,
		}, 2},
		{"older files", map[string]string{
			plotLatencyInput: testOldLatencyJSON, plotPublishInput: testPublishJSON, plotNATSInput: testOldNATSJSON,
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := writeInputs(t, tt.files)
			out := filepath.Join(t.TempDir(), "img") // created by the command
			var stdout bytes.Buffer
			if err := run(t.Context(), []string{"plot", "--in", in, "--out", out}, &stdout, io.Discard); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{plotLatencyOutput, plotThroughputOutput} {
				path := filepath.Join(out, name)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(data) == 0 {
					t.Fatalf("%s is empty", name)
				}
				img, err := png.Decode(bytes.NewReader(data))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				b := img.Bounds()
				if b.Dx() == 0 || b.Dy() == 0 {
					t.Errorf("%s: image is %v", name, b)
				}
				panels := 1
				if name == plotLatencyOutput {
					panels = tt.latencyPanels
				}
				if b.Dy() != panels*b.Dx()*5/8 { // each panel is 8 × 5 inches
					t.Errorf("%s: image is %v, want %d panels of 8 × 5", name, b, panels)
				}
				if !bytes.Contains(stdout.Bytes(), []byte(path)) {
					t.Errorf("stdout %q does not name %s", stdout.String(), path)
				}
			}
		})
	}
}

func TestPlotErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  error
	}{
		{"no latency input", map[string]string{plotPublishInput: testPublishJSON}, fs.ErrNotExist},
		{"no publish input", map[string]string{plotLatencyInput: testLatencyJSON}, fs.ErrNotExist},
		{"no 128 B publish cells", map[string]string{
			plotLatencyInput: testLatencyJSON,
			plotPublishInput: `{"cells": [{"durable": true, "batch_records": 64, "payload_bytes": 1024, "records_per_sec": 132094}]}`,
		}, errNoPoints},
		{"no latency runs", map[string]string{plotLatencyInput: `{"runs": []}`, plotPublishInput: testPublishJSON}, errNoPoints},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := writeInputs(t, tt.files)
			err := run(t.Context(), []string{"plot", "--in", in, "--out", t.TempDir()}, io.Discard, io.Discard)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestNATSLatencyMarkers checks each NATS series draws only its transport's
// results, at the fan-outs they were measured at, in both panels.
func TestNATSLatencyMarkers(t *testing.T) {
	var nats []Result
	if err := json.Unmarshal([]byte(testNATSJSON), &nats); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		marker string
		panel  int
		want   plotter.XYs
	}{
		{"NATS core (plaintext) p50", 0, plotter.XYs{{X: 1, Y: 171}, {X: 10, Y: 268}}},
		{"NATS core (plaintext) p99", 1, plotter.XYs{{X: 1, Y: 215}, {X: 10, Y: 347}}},
		{"NATS core (TLS) p50", 0, plotter.XYs{{X: 1000, Y: 2000}}},
		{"NATS core (TLS) p99", 1, plotter.XYs{{X: 1000, Y: 4900}}},
	}
	for _, tt := range tests {
		i := slices.IndexFunc(natsLatencyMarkers, func(m natsLatencyMarker) bool { return m.name == tt.marker })
		if i < 0 {
			t.Fatalf("no marker %q", tt.marker)
		}
		got := natsLatencyXYs(latencyPanels[tt.panel], natsLatencyMarkers[i], nats)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s, panel %d: %v, want %v", tt.marker, tt.panel, got, tt.want)
		}
	}

	// A file without the tls field: -tls in the name still says TLS.
	old := []Result{{Scenario: "core-latency-tls", Params: map[string]any{"fanout": 100.0}, LatencyMicros: &Latency{P50: 1}}}
	if got := natsLatencyXYs(latencyPanels[0], natsLatencyMarkers[2], old); len(got) != 1 {
		t.Errorf("TLS marker of an old -tls row: %v", got)
	}
	if got := natsLatencyXYs(latencyPanels[0], natsLatencyMarkers[0], old); len(got) != 0 {
		t.Errorf("plaintext marker drew a -tls row: %v", got)
	}
}

func TestJetStreamLegend(t *testing.T) {
	for _, tt := range []struct {
		sync, tls bool
		want      string
	}{
		{false, false, "NATS JetStream async publish (plaintext), acked before fsync"},
		{false, true, "NATS JetStream async publish (TLS), acked before fsync"},
		{true, true, "NATS JetStream async publish (TLS), fsync before ack"},
	} {
		if got := jetStreamLegend(tt.sync, tt.tls); got != tt.want {
			t.Errorf("jetStreamLegend(%v, %v) = %q, want %q", tt.sync, tt.tls, got, tt.want)
		}
	}
}
