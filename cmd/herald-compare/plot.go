package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The plot subcommand draws the figures of docs/benchmarks.md from the JSON
// that `make bench-report` writes into one directory:
//
//	go run . plot --in ../../bench/results --out ../../docs/img
//
// Inputs, by file name in --in:
//
//   - latency.json: `herald bench latency --json` (required);
//   - publish.json: `herald bench publish --json` (required);
//   - nats.json: `herald-compare --json` (optional: without it the plots
//     carry no NATS reference points).
//
// Outputs, in --out (created if missing): latency-by-fanout.png (two
// panels: latency from the scheduled send, and from the actual send, which
// the issue 16 targets are judged on) and throughput-by-batch.png. NATS is
// drawn with and without TLS, each only where it was measured.

// Input and output file names of the plot subcommand.
const (
	plotLatencyInput     = "latency.json"
	plotPublishInput     = "publish.json"
	plotNATSInput        = "nats.json"
	plotLatencyOutput    = "latency-by-fanout.png"
	plotThroughputOutput = "throughput-by-batch.png"
)

// heraldLatencyResult is the part of `herald bench latency --json` the plots
// read (cmd/herald/cmd_bench_latency.go, latencyResult).
type heraldLatencyResult struct {
	Runs []heraldLatencyRun `json:"runs"` // one per fan-out
}

// heraldLatencyRun is one fan-out of the latency scenario.
type heraldLatencyRun struct {
	Fanout          int                  `json:"fanout"`            // subscribers
	Rate            int                  `json:"rate"`              // records published per second
	Latency         heraldLatencySummary `json:"latency"`           // scheduled send → deliver
	LatencyFromSend heraldLatencySummary `json:"latency_from_send"` // actual send → deliver; zero in files that predate it
}

// heraldLatencySummary is a latency distribution in microseconds
// (cmd/herald/cmd_bench_run.go, latencySummary).
type heraldLatencySummary struct {
	P50  float64 `json:"p50_us"`   // median
	P90  float64 `json:"p90_us"`   // 90th percentile
	P99  float64 `json:"p99_us"`   // 99th percentile
	P999 float64 `json:"p99_9_us"` // 99.9th percentile
	Max  float64 `json:"max_us"`   // largest sample
}

// heraldPublishResult is the part of `herald bench publish --json` the plots
// read (cmd/herald/cmd_bench_publish.go, publishResult).
type heraldPublishResult struct {
	Cells []heraldPublishCell `json:"cells"` // one per durability × batch × payload
}

// heraldPublishCell is one cell of the publish scenario.
type heraldPublishCell struct {
	Durable       bool    `json:"durable"`         // synced before ack
	BatchRecords  int     `json:"batch_records"`   // records per publish
	PayloadBytes  int     `json:"payload_bytes"`   // bytes per record
	Inflight      int     `json:"inflight"`        // most publishes unacked
	RecordsPerSec float64 `json:"records_per_sec"` // acked records per second
}

// plotInputs holds everything the plots draw from.
type plotInputs struct {
	latency heraldLatencyResult // Herald latency by fan-out
	publish heraldPublishResult // Herald publish throughput by cell
	nats    []Result            // NATS results; nil when nats.json is absent
}

// runPlot implements `herald-compare plot`.
func runPlot(args []string, out, log io.Writer) error {
	fset := flag.NewFlagSet("herald-compare plot", flag.ContinueOnError)
	fset.SetOutput(log)
	in := fset.String("in", "../../bench/results", "directory holding latency.json, publish.json and (optionally) nats.json")
	outDir := fset.String("out", "../../docs/img", "directory the PNG files are written to")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("plot: unexpected arguments %q", fset.Args())
	}
	inputs, err := readPlotInputs(*in)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	latencyPath := filepath.Join(*outDir, plotLatencyOutput)
	if err := plotLatencyByFanout(inputs, latencyPath); err != nil {
		return fmt.Errorf("plot %s: %w", plotLatencyOutput, err)
	}
	throughputPath := filepath.Join(*outDir, plotThroughputOutput)
	if err := plotThroughputByBatch(inputs, throughputPath); err != nil {
		return fmt.Errorf("plot %s: %w", plotThroughputOutput, err)
	}
	fmt.Fprintln(out, latencyPath)
	fmt.Fprintln(out, throughputPath)
	return nil
}

// readPlotInputs decodes the JSON files in dir. A missing nats.json is not
// an error; a missing Herald file is (wrapping fs.ErrNotExist).
func readPlotInputs(dir string) (plotInputs, error) {
	var in plotInputs
	if err := readJSONFile(filepath.Join(dir, plotLatencyInput), &in.latency); err != nil {
		return in, err
	}
	if err := readJSONFile(filepath.Join(dir, plotPublishInput), &in.publish); err != nil {
		return in, err
	}
	err := readJSONFile(filepath.Join(dir, plotNATSInput), &in.nats)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return in, err
	}
	return in, nil
}

// readJSONFile decodes the JSON document in path into v.
func readJSONFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
