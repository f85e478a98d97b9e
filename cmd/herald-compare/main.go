// Command herald-compare runs the NATS side of Herald's benchmark comparison
// (issues 7 and 16): nats-server on loopback with JetStream file storage, and
// the nats.go client driving it. By default each scenario's server runs in a
// process of its own (this executable re-run with a hidden serve
// subcommand), so that its CPU time is measured apart from the clients', as
// Herald's bench runs its node; --server inproc embeds it in this process
// instead.
//
// It lives in its own Go module so that nats-server never becomes a dependency
// of Herald itself. Run it from the repository root with `make bench-compare`,
// or directly:
//
//	cd cmd/herald-compare && go run . --json
//
// `make bench` runs each Herald scenario's peers right after it, with
// --scenarios and --append bench/results/nats.json.tmp (a JSON array that
// each run adds to), so that the two sides of each comparison run within a
// minute of each other.
//
// Every scenario runs twice: over plaintext TCP under its plain name, then
// over TLS 1.3 under the same name with a -tls suffix (core-fanout-tls, ...).
// The TLS certificate is generated when the command starts (a throwaway
// P-256 CA and a certificate for 127.0.0.1 signed by it); server and
// clients accept TLS 1.3 only, and every connection checks it negotiated
// it. Scenarios (--scenarios, comma separated, default all):
//
//   - js-publish, js-publish-tls: JetStream async publish, one record per
//     PublishAsync (what a NATS user does; the peer of Herald's
//     single-record async publish), into one file-backed stream, a row for
//     each of --max-pending (256, and 4000: nats.go's PublishAsync
//     default), with at most that many acks outstanding (checked every
//     --batch publishes); records/s counts acked records. The server's storage
//     config is the default: JetStream acks a record once written to the
//     OS, before its fsync (sync_interval 2 minutes).
//   - js-publish-sync, js-publish-sync-tls: the same with the server's
//     sync_interval: always (SyncAlways): every write fsynced before its
//     ack, as Herald's durable publish does.
//   - core-fanout, core-fanout-tls: core NATS publish to each of --fanouts
//     subscriber counts (default 1, 10, 100, 1000), one connection each, at
//     most once, the publisher at most --max-lead deliveries ahead of the
//     subscribers; records/s at the publisher, deliveries/s at the
//     subscribers.
//   - core-latency, core-latency-tls: single-record publish at a fixed rate
//     to each of --fanouts, with the shape of `herald bench latency`: --rate
//     (1,000/s) lowered to keep rate × fanout within --max-deliveries
//     (20,000/s), the subscribers taking turns on at most --conns (20)
//     connections: fan-out 1 and 10 at 1,000/s on one connection each, 100
//     at 200/s and 1000 at 20/s on 20. Latency is measured from each
//     record's scheduled send time (latency_us: a stalled publisher counts
//     against the result, coordinated omission) and from its actual send
//     time (latency_from_send_us).
//   - js-consume, js-consume-tls: a durable pull consumer with explicit ack
//     per record over --messages pre-published records; records/s counts
//     records consumed and acked (the ack floor reaching the last record
//     ends the clock).
//
// The output (--json) is an array with one object per scenario and fan-out
// (see Result):
//
//   - system ("nats"), scenario (the name above), tls (true for the -tls
//     rows; false, or absent in older files, for plaintext);
//   - params: what it ran with: payload, transport ("tcp" or "tls1.3"),
//     server ("child" or "inproc"), and per scenario fanout, connections,
//     rate (the rate it ran at), requested_rate, max_deliveries, max_lead,
//     batch, max_pending, records_per_publish, storage, sync, messages,
//     pull, cpu_records (which records the per-million CPU figures divide
//     by: deliveries for core-fanout and core-latency, acked for the
//     publishes, consumed for js-consume);
//   - records_per_sec, deliveries_per_sec, elapsed_ms (the window the rates
//     divide by), counts (the raw counts);
//   - latency_us and latency_from_send_us (core-latency): p50, p90, p99,
//     p99.9, max in microseconds;
//   - server_cpu_seconds, server_cpu_ms_per_million_records: the server
//     process's user + system CPU over the measured window (from
//     /proc/<pid>/stat, 10 ms resolution), and per million cpu_records;
//     absent with --server inproc;
//   - client_cpu_seconds, client_cpu_ms_per_million_records: the same for
//     this process, which runs every client (and with --server inproc the
//     server too), from getrusage(2).
//
// Every scenario starts its own server in a fresh temporary directory, so no
// scenario sees another's state.
//
// The plot subcommand draws the PNG figures of docs/benchmarks.md from the
// JSON written by `make bench-report` (Herald's `herald bench ... --json` and
// this command's --json); see plot.go:
//
//	cd cmd/herald-compare && go run . plot --in ../../bench/results --out ../../docs/img
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config holds the parameters shared by every scenario.
type config struct {
	duration      time.Duration // how long each duration-based scenario runs
	payload       int           // record payload size in bytes
	batch         int           // js-publish: records published between waits for the oldest batch's acks
	maxPending    []int         // js-publish: most acks outstanding at once, a row each (js-consume fills with the first)
	fanouts       []int         // core-fanout, core-latency: subscriber counts
	maxLead       int           // core-fanout: most deliveries outstanding before the publisher waits
	rate          int           // core-latency: records per second asked for
	maxDeliveries int           // core-latency: cap on rate × fanout; larger fan-outs run slower
	conns         int           // core-latency: most subscriber connections (one each up to it)
	messages      int           // js-consume: records pre-published then consumed
	pull          int           // js-consume: records requested per pull
	server        serverMode    // where each scenario's nats-server runs
}

// defaultConfig is the short default run (about a minute and a half in
// all). The core-latency defaults are those of `herald bench latency`
// (cmd/herald/cmd_bench_latency.go), so that the rows compare like with
// like: 1,000 records/s capped at 20,000 deliveries/s, the subscribers
// sharing at most 20 connections.
func defaultConfig() config {
	return config{
		duration:      2 * time.Second,
		payload:       128,
		batch:         64,
		maxPending:    []int{256, 4000},
		fanouts:       []int{1, 10, 100, 1000},
		maxLead:       defaultFanoutMaxLead,
		rate:          1000,
		maxDeliveries: 20_000,
		conns:         20,
		messages:      300_000,
		pull:          500,
		server:        serverChild,
	}
}

// runRate is the rate core-latency runs at for fanout: the requested rate,
// lowered to keep rate × fanout within maxDeliveries, at least 1 (the rule
// of `herald bench latency`).
func (c config) runRate(fanout int) int {
	return max(1, min(c.rate, c.maxDeliveries/fanout))
}

// runConns is the number of connections core-latency's fanout subscribers
// take turns on.
func (c config) runConns(fanout int) int {
	return min(fanout, c.conns)
}

// scenario is one named benchmark on one transport; run may return several
// results (one per fanout, for example).
type scenario struct {
	name string        // as --scenarios and the JSON's scenario field spell it
	opts serverOptions // the server (and clients) it runs with
	run  func(ctx context.Context, e *env, sc scenario) ([]Result, error)
}

// result starts a Result labelled with the scenario and its transport, and
// the parameters every scenario reports.
func (sc scenario) result(e *env) Result {
	transport := "tcp"
	if sc.opts.tls {
		transport = "tls1.3"
	}
	return Result{
		System:   "nats",
		Scenario: sc.name,
		TLS:      sc.opts.tls,
		Params: map[string]any{
			"payload":   e.cfg.payload,
			"transport": transport,
			"server":    string(e.cfg.server),
		},
	}
}

// scenarios lists every scenario in the order they run by default: each
// plaintext one, then its TLS twin (named with a -tls suffix).
var scenarios = withTLSTwins([]scenario{
	{name: "js-publish", run: runJSPublish},
	{name: "js-publish-sync", opts: serverOptions{syncAlways: true}, run: runJSPublish},
	{name: "core-fanout", run: runCoreFanout},
	{name: "core-latency", run: runCoreLatency},
	{name: "js-consume", run: runJSConsume},
})

// withTLSTwins follows each plaintext scenario with the same over TLS.
func withTLSTwins(plain []scenario) []scenario {
	var all []scenario
	for _, sc := range plain {
		twin := sc
		twin.name += "-tls"
		twin.opts.tls = true
		all = append(all, sc, twin)
	}
	return all
}

// env is what every scenario of one run shares.
type env struct {
	cfg config       // the parameters
	exe string       // this executable, started as the serve child
	tls *tlsMaterial // the throwaway CA and the server's certificate
}

// newEnv prepares a run: the TLS certificate and the executable the server
// children run. The caller must Close it.
func newEnv(cfg config) (*env, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	m, err := newTLSMaterial()
	if err != nil {
		return nil, err
	}
	return &env{cfg: cfg, exe: exe, tls: m}, nil
}

// Close removes the TLS files.
func (e *env) Close() error {
	return e.tls.Close()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == serveCommand {
		os.Exit(serveMain(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "herald-compare:", err)
		}
		os.Exit(2)
	}
}

// run parses args, runs the selected scenarios in order and writes the results
// to out (a table, or a JSON array with --json). Progress goes to log. With
// "plot" as the first argument it draws the benchmark figures instead, with
// "report" it sets issue 16's targets beside the figures of one run.
func run(ctx context.Context, args []string, out, log io.Writer) error {
	if len(args) > 0 && args[0] == "plot" {
		return runPlot(args[1:], out, log)
	}
	if len(args) > 0 && args[0] == "report" {
		return runReport(args[1:], out, log)
	}
	cfg := defaultConfig()
	fs := flag.NewFlagSet("herald-compare", flag.ContinueOnError)
	fs.SetOutput(log)
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "how long each duration-based scenario runs")
	fs.IntVar(&cfg.payload, "payload", cfg.payload, "record payload size in bytes")
	fs.IntVar(&cfg.batch, "batch", cfg.batch, "js-publish: records published between waits for the oldest batch's acks")
	maxPending := fs.String("max-pending", "256,4000", "js-publish: comma-separated most acks outstanding at once, a row each (4000 is nats.go's PublishAsync default)")
	fs.IntVar(&cfg.maxLead, "max-lead", cfg.maxLead, "core-fanout: most deliveries outstanding (published x fanout - received) before the publisher waits")
	fs.IntVar(&cfg.rate, "rate", cfg.rate, "core-latency: records per second")
	fs.IntVar(&cfg.maxDeliveries, "max-deliveries", cfg.maxDeliveries, "core-latency: cap on rate x fanout (deliveries/s): larger fanouts run at a lower rate")
	fs.IntVar(&cfg.conns, "conns", cfg.conns, "core-latency: most connections the subscribers share (one each up to it)")
	fs.IntVar(&cfg.messages, "messages", cfg.messages, "js-consume: records pre-published then consumed")
	fs.IntVar(&cfg.pull, "pull", cfg.pull, "js-consume: records requested per pull")
	fanouts := fs.String("fanouts", "1,10,100,1000", "core-fanout, core-latency: comma-separated subscriber counts")
	server := fs.String("server", string(cfg.server), "where nats-server runs: child (its own process, CPU measured apart) or inproc")
	names := fs.String("scenarios", "all", "comma-separated scenarios ("+scenarioNames()+"), or all")
	asJSON := fs.Bool("json", false, "print a JSON array of results instead of a table")
	appendTo := fs.String("append", "", "add the results to the JSON array in `file` (made if missing) instead of printing them: make bench runs each Herald scenario's peers right after it, into one file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.maxPending, err = parseInts(*maxPending); err != nil {
		return fmt.Errorf("--max-pending: %w", err)
	}
	if cfg.fanouts, err = parseInts(*fanouts); err != nil {
		return fmt.Errorf("--fanouts: %w", err)
	}
	if cfg.server, err = parseServerMode(*server); err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	selected, err := selectScenarios(*names)
	if err != nil {
		return err
	}
	e, err := newEnv(cfg)
	if err != nil {
		return err
	}
	defer e.Close()

	var results []Result
	began := time.Now()
	for _, sc := range selected {
		fmt.Fprintf(log, "running %s...", sc.name)
		t0 := time.Now()
		rs, err := sc.run(ctx, e, sc)
		if err != nil {
			fmt.Fprintln(log)
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		fmt.Fprintf(log, " %.1fs\n", time.Since(t0).Seconds())
		results = append(results, rs...)
	}
	fmt.Fprintf(log, "all scenarios: %.1fs\n", time.Since(began).Seconds())
	if *appendTo != "" {
		return appendResults(*appendTo, results)
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return writeTable(out, results)
}

// scenarioNames lists the scenario names for the usage text.
func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return strings.Join(names, ", ")
}

// validate rejects parameters no scenario can run with.
func (c config) validate() error {
	switch {
	case c.duration <= 0:
		return errors.New("--duration must be positive")
	case c.payload < stampBytes:
		return errors.New("--payload must be at least 16 bytes (core-latency carries two timestamps)")
	case c.batch <= 0:
		return errors.New("--batch must be positive")
	case len(c.maxPending) == 0 || slices.Min(c.maxPending) < c.batch:
		return errors.New("--max-pending must be at least --batch")
	case c.maxLead <= 0:
		return errors.New("--max-lead must be positive")
	case c.rate <= 0:
		return errors.New("--rate must be positive")
	case c.maxDeliveries <= 0:
		return errors.New("--max-deliveries must be positive")
	case c.conns <= 0:
		return errors.New("--conns must be positive")
	case c.messages <= 0:
		return errors.New("--messages must be positive")
	case c.pull <= 0:
		return errors.New("--pull must be positive")
	}
	for _, f := range c.fanouts {
		if f <= 0 {
			return errors.New("--fanouts must be positive")
		}
	}
	return nil
}

// selectScenarios resolves a comma-separated list of scenario names.
func selectScenarios(names string) ([]scenario, error) {
	if names == "" || names == "all" {
		return scenarios, nil
	}
	var selected []scenario
	for name := range strings.SplitSeq(names, ",") {
		name = strings.TrimSpace(name)
		i := indexScenario(name)
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q", name)
		}
		selected = append(selected, scenarios[i])
	}
	return selected, nil
}

// indexScenario returns the index of the named scenario, or -1.
func indexScenario(name string) int {
	for i, sc := range scenarios {
		if sc.name == name {
			return i
		}
	}
	return -1
}

// parseInts parses a comma-separated list of integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for field := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// appendResults adds rs to the JSON array of results in path, making the
// file if it does not exist. The file is replaced whole (written beside it,
// then renamed), so a run that fails leaves it as it was.
func appendResults(path string, rs []Result) error {
	var all []json.RawMessage
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(data, &all); err != nil {
			return fmt.Errorf("--append %s: %w", path, err)
		}
	}
	for _, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		all = append(all, b)
	}
	out, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".part"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
