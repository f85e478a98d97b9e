package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs the serve subcommand when a scenario starts this test
// binary as its nats-server child, and otherwise the tests, checking that
// none leaves a goroutine behind.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serveCommand {
		os.Exit(serveMain(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

// testConfig is a brief run: each scenario takes a fraction of a second.
func testConfig() config {
	cfg := defaultConfig()
	cfg.duration = 300 * time.Millisecond
	cfg.messages = 3000
	cfg.fanouts = []int{1, 3}
	return cfg
}

// testEnv is an env for cfg, closed when the test ends.
func testEnv(t *testing.T, cfg config) *env {
	t.Helper()
	e, err := newEnv(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

func TestScenarios(t *testing.T) {
	for _, mode := range []serverMode{serverChild, serverInProcess} {
		cfg := testConfig()
		cfg.server = mode
		e := testEnv(t, cfg)
		for _, sc := range scenarios {
			t.Run(string(mode)+"/"+sc.name, func(t *testing.T) {
				results, err := sc.run(t.Context(), e, sc)
				if err != nil {
					t.Fatal(err)
				}
				if len(results) == 0 {
					t.Fatal("no results")
				}
				for _, r := range results {
					checkResult(t, mode, sc, r)
				}
			})
		}
	}
}

// checkResult checks what every result of sc must hold.
func checkResult(t *testing.T, mode serverMode, sc scenario, r Result) {
	t.Helper()
	if r.System != "nats" || r.Scenario != sc.name {
		t.Errorf("result labelled %s/%s, want nats/%s", r.System, r.Scenario, sc.name)
	}
	if r.TLS != strings.HasSuffix(sc.name, "-tls") {
		t.Errorf("%s: tls = %v", sc.name, r.TLS)
	}
	wantTransport := map[bool]string{false: "tcp", true: "tls1.3"}[r.TLS]
	if r.Params["transport"] != wantTransport || r.Params["server"] != string(mode) {
		t.Errorf("%s: params %v, want transport %s and server %s", sc.name, r.Params, wantTransport, mode)
	}
	if !(r.RecordsPerSec > 0) {
		t.Errorf("%v: records_per_sec = %v, want > 0", r.Params, r.RecordsPerSec)
	}
	base := strings.TrimSuffix(sc.name, "-tls")
	if !strings.HasPrefix(base, "js-publish") && !(r.DeliveriesPerSec > 0) {
		t.Errorf("%v: deliveries_per_sec = %v, want > 0", r.Params, r.DeliveriesPerSec)
	}
	if base == "core-latency" {
		for _, l := range []*Latency{r.LatencyMicros, r.LatencyFromSendMicros} {
			if l == nil || !(l.P50 > 0) || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.P999 || l.P999 > l.Max {
				t.Errorf("%v: latency = %+v, want positive and ordered", r.Params, l)
			}
		}
	}
	if r.ClientCPUSeconds == nil || !(*r.ClientCPUSeconds > 0) || r.ClientCPUMillisPerMillion == nil {
		t.Errorf("%v: client CPU %v, %v ms/M: want measured", r.Params, r.ClientCPUSeconds, r.ClientCPUMillisPerMillion)
	}
	switch {
	case mode == serverInProcess && (r.ServerCPUSeconds != nil || r.ServerCPUMillisPerMillion != nil):
		t.Errorf("%v: server CPU reported for a server inside the process", r.Params)
	case mode == serverChild && (r.ServerCPUSeconds == nil || r.ServerCPUMillisPerMillion == nil):
		t.Errorf("%v: server CPU not reported for a child server", r.Params)
	case mode == serverChild && base == "core-fanout" && !(*r.ServerCPUSeconds > 0):
		// 300 ms of saturated fan-out costs the server far more than
		// the 10 ms resolution of /proc.
		t.Errorf("%v: server_cpu_seconds = %v, want > 0", r.Params, *r.ServerCPUSeconds)
	}
}

func TestRunJSON(t *testing.T) {
	var out, log bytes.Buffer
	args := []string{"--json", "--duration", "200ms", "--scenarios", "core-fanout,core-fanout-tls", "--fanouts", "2"}
	if err := run(context.Background(), args, &out, &log); err != nil {
		t.Fatal(err)
	}
	var results []map[string]any
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out.String())
	}
	if len(results) != 2 {
		t.Fatalf("got %d results, want 2", len(results))
	}
	for i, want := range []struct {
		scenario string
		tls      bool
	}{{"core-fanout", false}, {"core-fanout-tls", true}} {
		r := results[i]
		for _, key := range []string{"system", "scenario", "params", "records_per_sec", "deliveries_per_sec", "tls",
			"server_cpu_seconds", "server_cpu_ms_per_million_records", "client_cpu_seconds", "client_cpu_ms_per_million_records"} {
			if _, ok := r[key]; !ok {
				t.Errorf("result has no %q: %v", key, r)
			}
		}
		if r["scenario"] != want.scenario || r["tls"] != want.tls {
			t.Errorf("result %d is %v tls=%v, want %s tls=%v", i, r["scenario"], r["tls"], want.scenario, want.tls)
		}
	}
}

func TestRunTable(t *testing.T) {
	var out bytes.Buffer
	args := []string{"--duration", "200ms", "--scenarios", "core-latency-tls", "--fanouts", "2", "--server", "inproc"}
	if err := run(context.Background(), args, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "core-latency-tls") || !strings.Contains(lines[1], "connections=2") {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenarios", "nope"},
		{"--payload", "4"},
		{"--fanouts", "1,x"},
		{"--fanouts", "0"},
		{"--batch", "512"}, // above --max-pending
		{"--server", "elsewhere"},
		{"--conns", "0"},
		{"--max-deliveries", "0"},
		{"--max-lead", "0"},
		{"stray"},
	} {
		var out, log bytes.Buffer
		if err := run(context.Background(), args, &out, &log); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}

// TestLatencyShapeMatchesHerald pins core-latency's default rates and
// connections to those of `herald bench latency` (1,000 records/s capped at
// 20,000 deliveries/s, at most 20 connections).
func TestLatencyShapeMatchesHerald(t *testing.T) {
	cfg := defaultConfig()
	for _, tt := range []struct{ fanout, rate, conns int }{
		{1, 1000, 1},
		{10, 1000, 10},
		{100, 200, 20},
		{1000, 20, 20},
		{50_000, 1, 20},
	} {
		if rate, conns := cfg.runRate(tt.fanout), cfg.runConns(tt.fanout); rate != tt.rate || conns != tt.conns {
			t.Errorf("fanout %d: rate %d over %d connections, want %d over %d", tt.fanout, rate, conns, tt.rate, tt.conns)
		}
	}
	if got := defaultConfig().fanouts; len(got) != 4 || got[2] != 100 || got[3] != 1000 {
		t.Errorf("default fanouts %v, want 1, 10, 100, 1000", got)
	}
}

func TestScenarioNames(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range scenarios {
		if seen[sc.name] {
			t.Errorf("scenario %s twice", sc.name)
		}
		seen[sc.name] = true
		if sc.opts.tls != strings.HasSuffix(sc.name, "-tls") {
			t.Errorf("%s: tls = %v", sc.name, sc.opts.tls)
		}
		if sc.opts.syncAlways != strings.HasPrefix(sc.name, "js-publish-sync") {
			t.Errorf("%s: syncAlways = %v", sc.name, sc.opts.syncAlways)
		}
	}
	for _, name := range []string{"js-publish", "js-publish-tls", "js-publish-sync", "js-publish-sync-tls",
		"core-fanout", "core-fanout-tls", "core-latency", "core-latency-tls", "js-consume", "js-consume-tls"} {
		if !seen[name] {
			t.Errorf("no scenario %s", name)
		}
	}
}

// --append adds a run's results to the file's array, making the file the
// first time: make bench runs each Herald scenario's NATS peers right after
// it, into one nats.json. A file that is not an array is refused and left
// as it was.
func TestRunAppends(t *testing.T) {
	path := t.TempDir() + "/nats.json"
	for _, sc := range []string{"core-fanout", "core-fanout-tls"} {
		var out bytes.Buffer
		args := []string{"--duration", "200ms", "--scenarios", sc, "--fanouts", "2", "--server", "inproc", "--append", path}
		if err := run(context.Background(), args, &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if out.Len() != 0 {
			t.Fatalf("--append printed %q", out.String())
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var results []Result
	if err := json.Unmarshal(data, &results); err != nil {
		t.Fatalf("%s is not an array of results: %v", path, err)
	}
	if len(results) != 2 || results[0].Scenario != "core-fanout" || results[1].Scenario != "core-fanout-tls" || !results[1].TLS {
		t.Fatalf("appended results: %+v", results)
	}
	bad := t.TempDir() + "/bad.json"
	if err := os.WriteFile(bad, []byte(`{"not": "an array"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := appendResults(bad, results); err == nil {
		t.Fatal("appended to a file that holds no array")
	}
	if got, _ := os.ReadFile(bad); string(got) != `{"not": "an array"}` {
		t.Fatalf("refused file changed to %q", got)
	}
}
