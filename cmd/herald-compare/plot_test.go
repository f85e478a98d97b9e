package main

import (
	"bytes"
	"errors"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Synthetic inputs in the shapes `herald bench latency|publish --json` and
// `herald-compare --json` write (only the fields the plots read, plus a few
// they must ignore).
const (
	testLatencyJSON = `{
  "scenario": "latency",
  "runs": [
    {"fanout": 1, "connections": 1, "rate": 1000,
     "latency": {"count": 3000, "mean_us": 900, "p50_us": 850, "p90_us": 1680, "p99_us": 4020, "p99_9_us": 5380, "max_us": 6990}},
    {"fanout": 10, "connections": 10, "rate": 1000,
     "latency": {"count": 30000, "mean_us": 1200, "p50_us": 1090, "p90_us": 1910, "p99_us": 3260, "p99_9_us": 7620, "max_us": 9870}},
    {"fanout": 1000, "connections": 20, "rate": 20,
     "latency": {"count": 60000, "mean_us": 16000, "p50_us": 15860, "p90_us": 21660, "p99_us": 31170, "p99_9_us": 38110, "max_us": 38430}}
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
	testNATSJSON = `[
  {"system": "nats", "scenario": "js-publish", "params": {"payload": 128, "batch": 64}, "records_per_sec": 131879, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "core-latency", "params": {"payload": 128, "fanout": 1, "rate": 2000},
   "records_per_sec": 2000, "deliveries_per_sec": 2000,
   "latency_us": {"p50": 171, "p90": 230, "p99": 354, "p99.9": 1384, "max": 2433}, "elapsed_ms": 3000},
  {"system": "nats", "scenario": "core-latency", "params": {"payload": 128, "fanout": 10, "rate": 2000},
   "records_per_sec": 2000, "deliveries_per_sec": 20000,
   "latency_us": {"p50": 268, "p90": 337, "p99": 531, "p99.9": 1879, "max": 3424}, "elapsed_ms": 3000}
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
		name  string
		files map[string]string
	}{
		{"with NATS", map[string]string{
			plotLatencyInput: testLatencyJSON, plotPublishInput: testPublishJSON, plotNATSInput: testNATSJSON,
		}},
		{"without NATS", map[string]string{
			plotLatencyInput: testLatencyJSON, plotPublishInput: testPublishJSON,
		}},
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
				if b := img.Bounds(); b.Dx() == 0 || b.Dy() == 0 {
					t.Errorf("%s: image is %v", name, b)
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
