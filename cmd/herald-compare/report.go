package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// The report subcommand reads the JSON of one `make bench` run and sets
// each of issue 16's targets beside the figures it is judged on, with the
// ratios computed from that one run:
//
//	go run . report --in ../../bench/results [--json targets.json]
//
// It reads publish, fanout, latency, groups, replay, idle, isolation and
// ceiling .json (`herald bench SCENARIO --json`) and nats.json (this
// command's --json). A figure that is missing from the files (a scenario
// not run) is reported as missing, never as met.

// reportFiles are the result files the report reads, by name in --in.
var reportFiles = []string{"publish", "fanout", "latency", "groups", "replay", "idle", "isolation", "ceiling", "nats"}

// Target is one line of the report: a figure of Herald's, the peer figure
// it is set against (0 when the target is absolute), the ratio (Herald
// over peer, or for latencies and the like as the target says), the bound
// and whether it was met.
type Target struct {
	// ID is the target number and a letter for its parts ("1a").
	ID string `json:"id"`
	// What names the figure and the comparison.
	What string `json:"what"`
	// Herald and Peer are the figures compared, in Unit; Peer is 0 for an
	// absolute bound.
	Herald float64 `json:"herald"`
	Peer   float64 `json:"peer,omitempty"`
	Unit   string  `json:"unit"`
	// Ratio is Herald / Peer (or Herald alone for an absolute bound).
	Ratio float64 `json:"ratio"`
	// Bound is the target: Ratio must be >= Bound when AtLeast, <= Bound
	// otherwise.
	Bound   float64 `json:"bound"`
	AtLeast bool    `json:"at_least"`
	Met     bool    `json:"met"`
	// Missing says which figure the files lacked (then Met is false).
	Missing string `json:"missing,omitempty"`
	// Source names the JSON fields the figures come from.
	Source string `json:"source"`
}

// runReport is the report subcommand.
func runReport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("herald-compare report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "directory with the JSON of one make bench run (required)")
	out := fs.String("json", "", "also write the targets as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" {
		return errors.New("report: --in is required")
	}
	files := map[string]any{}
	for _, name := range reportFiles {
		b, err := os.ReadFile(filepath.Join(*in, name+".json"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("report: %s.json: %w", name, err)
		}
		files[name] = v
	}
	targets := buildTargets(files)
	if err := writeTargets(stdout, targets); err != nil {
		return err
	}
	if *out != "" {
		b, err := json.MarshalIndent(targets, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

// figures looks figures up in the decoded result files.
type figures struct {
	files map[string]any
}

// get walks a path of map keys from a file's top level ("" when absent).
func get(v any, path ...string) (any, bool) {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		v, ok = m[k]
		if !ok {
			return nil, false
		}
	}
	return v, true
}

// num is get for a number.
func num(v any, path ...string) (float64, bool) {
	x, ok := get(v, path...)
	if !ok {
		return 0, false
	}
	f, ok := x.(float64)
	return f, ok
}

// list returns the array under key of a file's top level.
func (f figures) list(file, key string) []any {
	v, ok := get(f.files[file], key)
	if !ok {
		return nil
	}
	a, _ := v.([]any)
	return a
}

// find returns the first element of the array under key of file whose
// fields equal match (numbers compared as float64).
func (f figures) find(file, key string, match map[string]any) (any, bool) {
	for _, e := range f.list(file, key) {
		if matches(e, match) {
			return e, true
		}
	}
	return nil, false
}

func matches(e any, match map[string]any) bool {
	for k, want := range match {
		got, ok := get(e, strings.Split(k, ".")...)
		if !ok {
			// A plaintext NATS row of an older file has no tls field.
			if k == "tls" && want == false {
				continue
			}
			return false
		}
		if w, isInt := want.(int); isInt {
			want = float64(w)
		}
		if got != want {
			return false
		}
	}
	return true
}

// nats returns the nats.json row of scenario (and fan-out, when > 0).
func (f figures) nats(scenario string, fanout int) (any, bool) {
	a, _ := f.files["nats"].([]any)
	for _, e := range a {
		if s, _ := get(e, "scenario"); s != scenario {
			continue
		}
		if fanout > 0 {
			if fo, _ := num(e, "params", "fanout"); int(fo) != fanout {
				continue
			}
		}
		return e, true
	}
	return nil, false
}

// jsDefaultMaxPending is nats.go's default bound on unacked async publishes
// (defaultAsyncPubAckInflight): what a NATS user's publisher has.
const jsDefaultMaxPending = 4000

// natsPending returns the nats.json row of scenario published with at most
// maxPending acks outstanding. A row without the parameter (none of an older
// file's rows had another) counts as 256, the old default.
func (f figures) natsPending(scenario string, maxPending int) (any, bool) {
	a, _ := f.files["nats"].([]any)
	for _, e := range a {
		if s, _ := get(e, "scenario"); s != scenario {
			continue
		}
		mp, ok := num(e, "params", "max_pending")
		if !ok {
			mp = 256
		}
		if int(mp) == maxPending {
			return e, true
		}
	}
	return nil, false
}

// buildTargets computes every target from the files.
func buildTargets(files map[string]any) []Target {
	f := figures{files: files}
	var ts []Target
	ratio := func(id, what, unit string, herald, peer float64, hOK, pOK bool, hName, pName string, bound float64, atLeast bool, source string) {
		t := Target{ID: id, What: what, Unit: unit, Herald: herald, Peer: peer, Bound: bound, AtLeast: atLeast, Source: source}
		switch {
		case !hOK:
			t.Missing = hName
		case !pOK:
			t.Missing = pName
		case peer == 0:
			t.Missing = pName + " (zero)"
		default:
			t.Ratio = herald / peer
			t.Met = (atLeast && t.Ratio >= bound) || (!atLeast && t.Ratio <= bound)
		}
		ts = append(ts, t)
	}
	absolute := func(id, what, unit string, herald float64, ok bool, name string, bound float64, atLeast bool, source string) {
		t := Target{ID: id, What: what, Unit: unit, Herald: herald, Ratio: herald, Bound: bound, AtLeast: atLeast, Source: source}
		if !ok {
			t.Missing = name
		} else {
			t.Met = (atLeast && herald >= bound) || (!atLeast && herald <= bound)
		}
		ts = append(ts, t)
	}

	// 1, 2: at-most-once fan-out throughput, deliveries per second.
	for _, c := range []struct {
		id          string
		fanout      int
		plain, tlsB float64
	}{{"1", 1, 1.0, 1.3}, {"2", 10, 0.9, 1.2}} {
		run, hok := f.find("fanout", "runs", map[string]any{"fanout": c.fanout})
		h, hok2 := num(run, "delivered_records_per_sec")
		for _, tr := range []struct {
			suffix, scenario, label string
			bound                   float64
		}{{"a", "core-fanout", "plaintext", c.plain}, {"b", "core-fanout-tls", "TLS", c.tlsB}} {
			row, pok := f.nats(tr.scenario, c.fanout)
			p, pok2 := num(row, "deliveries_per_sec")
			ratio(c.id+tr.suffix, fmt.Sprintf("fan-out %d delivered/s vs NATS core %s", c.fanout, tr.label), "deliveries/s",
				h, p, hok && hok2, pok && pok2, fmt.Sprintf("fanout.json runs[fanout=%d]", c.fanout), tr.scenario, tr.bound, true,
				fmt.Sprintf("fanout.json runs[fanout=%d].delivered_records_per_sec; nats.json %s[fanout=%d].deliveries_per_sec", c.fanout, tr.scenario, c.fanout))
		}
	}

	// 3, 4, 5: latency from the actual send.
	lat := func(fanout int, q string) (float64, bool) {
		run, ok := f.find("latency", "runs", map[string]any{"fanout": fanout})
		if !ok {
			return 0, false
		}
		return num(run, "latency_from_send", q+"_us")
	}
	natsLat := func(scenario string, fanout int, q string) (float64, bool) {
		row, ok := f.nats(scenario, fanout)
		if !ok {
			return 0, false
		}
		return num(row, "latency_from_send_us", q)
	}
	for _, c := range []struct {
		id      string
		fanout  int
		q       string
		bound   float64
		natsRow string
	}{
		{"3a", 1, "p50", 1.5, "core-latency"}, {"3b", 1, "p99", 1.5, "core-latency"},
		{"3c", 1, "p50", 1.0, "core-latency-tls"}, {"3d", 1, "p99", 1.0, "core-latency-tls"},
		{"4", 10, "p99", 1.5, "core-latency"},
		{"5b", 1000, "p99", 1.0, "core-latency-tls"},
	} {
		h, hok := lat(c.fanout, c.q)
		p, pok := natsLat(c.natsRow, c.fanout, c.q)
		ratio(c.id, fmt.Sprintf("latency from send, fan-out %d, %s vs NATS %s", c.fanout, c.q, c.natsRow), "µs",
			h, p, hok, pok, fmt.Sprintf("latency.json runs[fanout=%d]", c.fanout), c.natsRow, c.bound, false,
			fmt.Sprintf("latency.json runs[fanout=%d].latency_from_send.%s_us; nats.json %s[fanout=%d].latency_from_send_us.%s", c.fanout, c.q, c.natsRow, c.fanout, c.q))
	}
	{
		h, ok := lat(1000, "p99")
		absolute("5a", "latency from send, fan-out 1000, p99 at the scenario's rate", "µs", h, ok, "latency.json runs[fanout=1000]", 10_000, false,
			"latency.json runs[fanout=1000].latency_from_send.p99_us")
	}

	// 6, 7: durable publishes against JetStream async publish (which does
	// not sync before its ack) and raw Badger. 6 is judged with both
	// publishers at nats.go's default bound on unacked async publishes
	// (4000); the rows at 256 are reported beside it. 7 takes the JetStream
	// row at 4000 too, its faster one.
	pub := func(batch, inflight int) (float64, bool) {
		match := map[string]any{"durable": true, "batch_records": batch, "payload_bytes": 128}
		if inflight > 0 {
			match["inflight"] = inflight
		}
		cell, ok := f.find("publish", "cells", match)
		if !ok {
			return 0, false
		}
		return num(cell, "records_per_sec")
	}
	for _, c := range []struct {
		id       string
		batch    int
		pending  int
		bound    float64
		scenario string
	}{
		{"6a", 1, jsDefaultMaxPending, 1.5, "js-publish"}, {"6b", 1, jsDefaultMaxPending, 1.5, "js-publish-tls"},
		{"6a@256", 1, 256, 1.5, "js-publish"}, {"6b@256", 1, 256, 1.5, "js-publish-tls"},
		{"7a", 64, jsDefaultMaxPending, 5, "js-publish"}, {"7b", 64, jsDefaultMaxPending, 5, "js-publish-tls"},
	} {
		inflight := c.pending
		if c.batch > 1 {
			inflight = 0 // the batch cells' own bound
		}
		h, hok := pub(c.batch, inflight)
		row, pok := f.natsPending(c.scenario, c.pending)
		p, pok2 := num(row, "records_per_sec")
		what := fmt.Sprintf("durable single-record async publish (synced) vs JetStream async publish (not synced), %s, both at most %d unacked", c.scenario, c.pending)
		source := fmt.Sprintf("publish.json cells[durable,batch_records=1,payload_bytes=128,inflight=%d].records_per_sec; nats.json %s[params.max_pending=%d].records_per_sec", c.pending, c.scenario, c.pending)
		if c.batch > 1 {
			what = fmt.Sprintf("durable %d × 128 B publish vs JetStream async publish at most %d unacked, %s", c.batch, c.pending, c.scenario)
			source = fmt.Sprintf("publish.json cells[durable,batch_records=%d,payload_bytes=128].records_per_sec; nats.json %s[params.max_pending=%d].records_per_sec", c.batch, c.scenario, c.pending)
		}
		ratio(c.id, what, "records/s", h, p, hok, pok && pok2, "publish.json", c.scenario, c.bound, true, source)
	}
	{
		h, hok := num(f.files["ceiling"], "herald_publish", "records_per_sec")
		b, bok := num(f.files["ceiling"], "badger", "records_per_sec")
		ratio("7c", "durable 64 × 128 B publish vs raw Badger, same shape, same run", "records/s", h, b, hok, bok,
			"ceiling.json herald_publish", "ceiling.json badger", 0.8, true,
			"ceiling.json herald_publish.records_per_sec / badger.records_per_sec")
	}

	// 8, 9: consumer groups against a JetStream pull consumer acking each.
	for _, c := range []struct {
		id, scenario string
		match        map[string]any
		bound        float64
		what         string
	}{
		{"8a", "js-consume", map[string]any{"mode": "pull"}, 1.5, "group pull, an ack per record, vs JetStream pull, ack each"},
		{"8b", "js-consume-tls", map[string]any{"mode": "pull"}, 1.5, "group pull, an ack per record, vs JetStream pull, ack each, TLS"},
		{"9a", "js-consume", map[string]any{"mode": "push", "window": 1000}, 2, "group push window 1000 vs JetStream pull, ack each"},
		{"9b", "js-consume-tls", map[string]any{"mode": "push", "window": 1000}, 2, "group push window 1000 vs JetStream pull, ack each, TLS"},
	} {
		run, hok := f.find("groups", "runs", c.match)
		h, hok2 := num(run, "records_per_sec")
		row, pok := f.nats(c.scenario, 0)
		p, pok2 := num(row, "records_per_sec")
		ratio(c.id, c.what, "records/s", h, p, hok && hok2, pok && pok2, "groups.json", c.scenario, c.bound, true,
			fmt.Sprintf("groups.json runs[%v].records_per_sec; nats.json %s.records_per_sec", c.match, c.scenario))
	}

	// 10: kept.
	{
		v, ok := num(f.files["isolation"], "ratio")
		absolute("10a", "isolation: nine fast subscribers beside a stalled one, of their rate without it", "ratio", v, ok, "isolation.json ratio", 0.95, true, "isolation.json ratio")
		rss, ok := num(f.files["idle"], "per_subscription", "rss_bytes")
		absolute("10b", "node RSS per idle subscription, connections included", "KiB", rss/1024, ok, "idle.json per_subscription.rss_bytes", 15, false, "idle.json per_subscription.rss_bytes / 1024")
		r, ok := num(f.files["replay"], "replay", "records_per_sec")
		absolute("10c", "replay of 1,000,000 records from offset 0", "records/s", r, ok, "replay.json replay.records_per_sec", 1_500_000, true, "replay.json replay.records_per_sec")
	}
	return ts
}

// writeTargets prints the targets as a table.
func writeTargets(w io.Writer, ts []Target) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tfigure\tHerald\tpeer\tratio\ttarget\tmet")
	for _, t := range ts {
		op := "≤"
		if t.AtLeast {
			op = "≥"
		}
		met := "no"
		if t.Met {
			met = "yes"
		}
		if t.Missing != "" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t%s %s\tmissing: %s\n", t.ID, t.What, op, fmtNum(t.Bound), t.Missing)
			continue
		}
		peer := ""
		if t.Peer != 0 {
			peer = fmtNum(t.Peer)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s %s\t%s\n", t.ID, t.What, fmtNum(t.Herald), peer, fmtNum(t.Ratio), op, fmtNum(t.Bound), met)
	}
	return tw.Flush()
}

// fmtNum prints a figure with the precision it deserves.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
