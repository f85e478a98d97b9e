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
	fmt.Fprintln(tw, "scenario\tparams\trecords/s\tdeliveries/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\tmax µs\t")
	for _, r := range results {
		row := []string{r.Scenario, formatParams(r.Params), formatRate(r.RecordsPerSec), formatRate(r.DeliveriesPerSec)}
		if l := r.LatencyMicros; l != nil {
			for _, v := range []float64{l.P50, l.P90, l.P99, l.P999, l.Max} {
				row = append(row, fmt.Sprintf("%.0f", v))
			}
		} else {
			row = append(row, "-", "-", "-", "-", "-")
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

// tableParams are the parameters worth a column's width in the table.
var tableParams = []string{"payload", "batch", "fanout", "rate", "messages"}

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

// formatRate renders a per-second rate, or "-" when it does not apply.
func formatRate(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}
