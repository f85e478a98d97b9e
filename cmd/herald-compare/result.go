package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is one measured figure set, printed as one element of the --json
// array. Fields that do not apply to a scenario are omitted.
type Result struct {
	System           string         `json:"system"`                       // always "nats" here
	Scenario         string         `json:"scenario"`                     // scenario name
	Params           map[string]any `json:"params"`                       // the parameters it ran with
	RecordsPerSec    float64        `json:"records_per_sec"`              // records published (or consumed) per second
	DeliveriesPerSec float64        `json:"deliveries_per_sec,omitempty"` // records received per second, summed over subscribers
	LatencyMicros    *Latency       `json:"latency_us,omitempty"`         // scheduled send → deliver latency, microseconds
	// LatencyFromSendMicros is the actual send → deliver latency, without the
	// pacer's wake-up lag, in microseconds.
	LatencyFromSendMicros *Latency       `json:"latency_from_send_us,omitempty"`
	Counts                map[string]int `json:"counts,omitempty"` // raw counts behind the rates
	ElapsedMillis         float64        `json:"elapsed_ms"`       // the interval the rates divide by
	// TLS is whether server and clients spoke TLS 1.3 (the scenario's name
	// then ends in -tls); false, or absent in older files, is plaintext TCP.
	TLS bool `json:"tls"`
	// ServerCPUSeconds is the nats-server process's user + system CPU time
	// over the measured window, and ServerCPUMillisPerMillion the same in
	// milliseconds per million of the records params.cpu_records names
	// (read from /proc/<pid>/stat: 10 ms resolution). Absent when the
	// server ran inside this process (--server inproc).
	ServerCPUSeconds          *float64 `json:"server_cpu_seconds,omitempty"`
	ServerCPUMillisPerMillion *float64 `json:"server_cpu_ms_per_million_records,omitempty"`
	// ClientCPUSeconds and ClientCPUMillisPerMillion are the same for this
	// process, which runs every client (and, with --server inproc, the
	// server too).
	ClientCPUSeconds          *float64 `json:"client_cpu_seconds,omitempty"`
	ClientCPUMillisPerMillion *float64 `json:"client_cpu_ms_per_million_records,omitempty"`
}

// Latency is a latency distribution summary in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

// writeTable prints results as a short human-readable table.
func writeTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tparams\trecords/s\tdeliveries/s\tp50 µs\tp99 µs\tsend p50\tsend p99\tserver ms/M\tclient ms/M\t")
	for _, r := range results {
		row := []string{r.Scenario, formatParams(r.Params), formatRate(r.RecordsPerSec), formatRate(r.DeliveriesPerSec)}
		for _, l := range []*Latency{r.LatencyMicros, r.LatencyFromSendMicros} {
			if l != nil {
				row = append(row, fmt.Sprintf("%.0f", l.P50), fmt.Sprintf("%.0f", l.P99))
			} else {
				row = append(row, "-", "-")
			}
		}
		row = append(row, formatOptional(r.ServerCPUMillisPerMillion), formatOptional(r.ClientCPUMillisPerMillion))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

// tableParams are the parameters worth a column's width in the table.
var tableParams = []string{"payload", "batch", "max_pending", "fanout", "connections", "rate", "messages"}

// formatParams renders the interesting parameters as k=v pairs.
func formatParams(p map[string]any) string {
	var parts []string
	for _, k := range tableParams {
		if v, ok := p[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if len(parts) == 0 {
		parts = slices.Sorted(maps.Keys(p))
	}
	return strings.Join(parts, " ")
}

// formatRate renders a rate or a per-million figure, or "-" when it does
// not apply.
func formatRate(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// formatOptional renders a figure that may be absent.
func formatOptional(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f", *v)
}
