package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

// benchScenarios are the scenarios of `herald bench`, with what each
// measures.
var benchScenarios = []struct{ name, short string }{
	{"isolation", "nine fast subscribers beside one that never reads"},
	{"publish", "the publish matrix: durable and ephemeral, batch sizes, payloads"},
	{"fanout", "delivery rate to 1..N subscribers of one stream"},
	{"latency", "publish-to-delivery latency at a paced rate"},
	{"groups", "consumer groups: push members with credit windows"},
	{"replay", "reading a durable stream back from its start"},
	{"idle", "memory and goroutines of many idle subscriptions"},
	{"ceiling", "the machine's ceilings: Badger synced commits, quic-go streams, against Herald's publish"},
}

func newBenchCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("bench SCENARIO", "Run a benchmark scenario (docs/benchmarks.md)",
		`Run a benchmark scenario. Scenarios start a node on a temporary data dir (so the whole run
is one command: in this process, or for idle a child herald node) and print a human
summary, or JSON with --json. docs/benchmarks.md
describes each and its results. --cpuprofile FILE, before the scenario, profiles the
whole run.`,
		`  herald bench isolation
  herald bench publish --json > publish.json
  herald bench --cpuprofile cpu.out fanout --fanouts 1,10`)
	c.PersistentFlags().String("cpuprofile", "", "write a CPU profile of the scenario's run to `file` (give it before the scenario)")
	for _, sc := range benchScenarios {
		name := sc.name
		s := &cobra.Command{
			Use:                name + " [flags]",
			Short:              sc.short,
			Long:               sc.short + ". herald bench " + name + " --help lists its flags.",
			Example:            stdFlagExamples["herald bench "+name],
			DisableFlagParsing: true,
			RunE: func(_ *cobra.Command, args []string) error {
				// A --cpuprofile FILE given before the scenario arrives first.
				if len(args) >= 2 && (args[0] == "--cpuprofile" || args[0] == "-cpuprofile") {
					args = append([]string{args[0], args[1], name}, args[2:]...)
				} else {
					args = append([]string{name}, args...)
				}
				return exitCode(runBench(args, env.stdout, env.stderr)).asError()
			},
		}
		s.SetHelpFunc(func(c *cobra.Command, _ []string) {
			runBench([]string{name, "--help"}, c.OutOrStdout(), env.stderr)
		})
		c.AddCommand(s)
	}
	return c
}

// runBench runs `herald bench SCENARIO`. Scenarios start a node in this
// process on a temporary data dir (so the whole run is one command) and
// print a human summary, or JSON with --json.
func runBench(args []string, stdout, stderr io.Writer) int {
	// --cpuprofile FILE before the scenario profiles the whole process
	// (node and clients) for the scenario's run.
	var cpuProfile string
	if len(args) > 0 && (args[0] == "--cpuprofile" || args[0] == "-cpuprofile") {
		if len(args) < 2 {
			fmt.Fprintln(stderr, "herald bench: --cpuprofile needs a file")
			return 2
		}
		cpuProfile, args = args[1], args[2:]
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: herald bench [--cpuprofile FILE] isolation|publish|fanout|latency|groups|replay|idle|ceiling [flags]   (see docs/benchmarks.md)")
		return 2
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "herald bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "herald bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	switch args[0] {
	case "isolation":
		return runBenchIsolation(args[1:], stdout, stderr)
	case "publish":
		return runBenchPublish(args[1:], stdout, stderr)
	case "groups":
		return runBenchGroups(args[1:], stdout, stderr)
	case "ceiling":
		return runBenchCeiling(args[1:], stdout, stderr)
	case "fanout":
		return runBenchFanout(args[1:], stdout, stderr)
	case "latency":
		return runBenchLatency(args[1:], stdout, stderr)
	case "replay":
		return runBenchReplay(args[1:], stdout, stderr)
	case "idle":
		return runBenchIdle(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "herald bench: unknown scenario %q (have: isolation, publish, fanout, latency, groups, replay, idle, ceiling)\n", args[0])
		return 2
	}
}

// isolationResult is the isolation scenario's machine-readable result.
type isolationResult struct {
	Scenario string `json:"scenario"`
	// FastSubscribers read as fast as they can; the stalled one never reads.
	FastSubscribers int     `json:"fast_subscribers"`
	DurationSeconds float64 `json:"duration_seconds"`
	BatchRecords    int     `json:"batch_records"`
	PayloadBytes    int     `json:"payload_bytes"`
	Durable         bool    `json:"durable"`
	// Baseline and WithStalled are deliveries (records) per second per fast
	// subscriber, averaged over them, without and with the stalled one.
	Baseline    float64 `json:"baseline_deliveries_per_sec"`
	WithStalled float64 `json:"with_stalled_deliveries_per_sec"`
	// Ratio is WithStalled / Baseline (target ≥ 0.90).
	Ratio float64 `json:"ratio"`
	// PublishedPerSec is the publisher's records per second in each phase.
	PublishedBaseline    float64 `json:"published_per_sec_baseline"`
	PublishedWithStalled float64 `json:"published_per_sec_with_stalled"`
	// RSSBaseline and RSSBytes are this process's resident memory (node and
	// clients) at the end of each phase; BoundBytes is what the stalled
	// subscriber may hold by configuration (queue bytes + its egress share).
	RSSBaseline int64 `json:"rss_bytes_baseline"`
	RSSBytes    int64 `json:"rss_bytes"`
	// HeapBaseline and HeapWithStalled are the live Go heap after a
	// collection at the end of each phase, before its clients close: the
	// difference is what the stalled subscriber holds.
	HeapBaseline    int64 `json:"live_heap_bytes_baseline"`
	HeapWithStalled int64 `json:"live_heap_bytes_with_stalled"`
	BoundBytes      int64 `json:"configured_stalled_bound_bytes"`
	// StalledDrops counts batches the stalled subscriber did not get.
	StalledDrops float64 `json:"stalled_subscriber_drops"`
}

func runBenchIsolation(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("herald bench isolation", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fast := fs.Int("fast", 9, "subscribers that read as fast as they can")
	duration := fs.Duration("duration", 5*time.Second, "length of each phase")
	batch := fs.Int("batch", 64, "records per publish")
	size := fs.Int("size", 128, "payload bytes per record")
	durable := fs.Bool("durable", false, "use a durable stream (synced publishes)")
	queueBytes := fs.Int64("queue-max-bytes", 8<<20, "subscriber_queue_max_bytes for the run")
	egress := fs.Int64("egress-max-bytes", 8<<20, "subscriber_egress_max_bytes for the run")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	memProfile := fs.String("memprofile", "", "write a heap profile at the end of the stalled phase to `file`")
	if code, ok := parseStdFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	dir, err := os.MkdirTemp("", "herald-bench-")
	if err != nil {
		fmt.Fprintln(stderr, "herald bench:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfg := supervisors.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = dir, "127.0.0.1:0", "127.0.0.1:0"
	cfg.SubscriberQueueMaxBytes, cfg.SubscriberEgressMaxBytes = *queueBytes, *egress
	cfg.EphemeralShardMaxBytes = 16 << 20
	node, err := supervisors.Start(cfg, supervisors.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(stderr, "herald bench:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	}()
	res, err := benchIsolation(node, *fast, *duration, *batch, *size, *durable, cfg, *memProfile)
	if err != nil {
		fmt.Fprintln(stderr, "herald bench:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return 0
	}
	fmt.Fprintf(stdout, "isolation: %d fast subscribers, %s per phase, %d x %d B per publish, durable=%t\n",
		res.FastSubscribers, *duration, res.BatchRecords, res.PayloadBytes, res.Durable)
	fmt.Fprintf(stdout, "  baseline:      %12.0f deliveries/s per fast subscriber (publisher %.0f records/s)\n", res.Baseline, res.PublishedBaseline)
	fmt.Fprintf(stdout, "  with stalled:  %12.0f deliveries/s per fast subscriber (publisher %.0f records/s)\n", res.WithStalled, res.PublishedWithStalled)
	fmt.Fprintf(stdout, "  ratio:         %12.3f (target >= 0.90)\n", res.Ratio)
	fmt.Fprintf(stdout, "  stalled subscriber: %.0f batches dropped; configured bound %d MiB\n", res.StalledDrops, res.BoundBytes>>20)
	fmt.Fprintf(stdout, "  live heap: %d MiB at the end of the baseline, %d MiB with the stalled subscriber\n", res.HeapBaseline>>20, res.HeapWithStalled>>20)
	fmt.Fprintf(stdout, "  process RSS: %d MiB after baseline, %d MiB after the stalled phase\n", res.RSSBaseline>>20, res.RSSBytes>>20)
	return 0
}

// benchIsolation runs two phases on fresh streams of node: fast subscribers
// alone, then the same with one subscriber that never reads.
func benchIsolation(node *supervisors.Node, fast int, d time.Duration, batch, size int, durable bool, cfg supervisors.Config, memProfile string) (*isolationResult, error) {
	dial := func(ctx context.Context) (*client.Client, error) {
		return client.Dial(ctx, node.Addr(), client.WithCAFile(node.CAFile()))
	}
	phase := func(name string, stalled bool, heap *int64) (perSub, published float64, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
		defer cancel()
		pub, err := dial(ctx)
		if err != nil {
			return 0, 0, err
		}
		defer pub.Close()
		stream := client.StreamName{Tenant: "bench", Namespace: "isolation", Stream: name}
		if _, err := pub.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: durable}); err != nil {
			return 0, 0, err
		}
		var clients []*client.Client
		defer func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}()
		subscribe := func() (*client.Subscription, error) {
			c, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			clients = append(clients, c)
			return c.Subscribe(ctx, stream, client.WithShard(0), client.WithStartLatest(), client.WithAutoResume())
		}
		if stalled {
			if _, err := subscribe(); err != nil { // never read
				return 0, 0, err
			}
		}
		var delivered atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range fast {
			sub, err := subscribe()
			if err != nil {
				return 0, 0, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if _, err := sub.Next(ctx); err != nil {
						return
					}
					delivered.Add(1)
					select {
					case <-stop:
						return
					default:
					}
				}
			}()
		}
		payloads := make([][]byte, batch)
		for i := range payloads {
			payloads[i] = make([]byte, size)
		}
		inflight := make(chan *client.PublishFuture, 256)
		waitErr := make(chan error, 1)
		go func() {
			var first error
			for f := range inflight {
				if _, err := f.Wait(ctx); err != nil && first == nil {
					first = err
				}
			}
			waitErr <- first
		}()
		start := time.Now()
		var records int64
		for time.Since(start) < d {
			f, err := pub.PublishAsync(ctx, stream, payloads)
			if err != nil {
				close(inflight)
				return 0, 0, err
			}
			inflight <- f
			records += int64(batch)
		}
		close(inflight)
		if err := <-waitErr; err != nil {
			return 0, 0, err
		}
		elapsed := time.Since(start)
		got := delivered.Load()
		*heap = liveHeap()
		if stalled && memProfile != "" {
			if f, err := os.Create(memProfile); err == nil {
				_ = pprof.WriteHeapProfile(f)
				_ = f.Close()
			}
		}
		close(stop)
		// The next phase starts from an empty node: its stream's memory
		// goes with it.
		defer func() { _ = pub.DeleteStream(context.Background(), stream) }()
		for _, c := range clients {
			_ = c.Close() // ends the readers' Next
		}
		clients = nil
		wg.Wait()
		return float64(got) / float64(fast) / elapsed.Seconds(), float64(records) / elapsed.Seconds(), nil
	}
	res := &isolationResult{Scenario: "isolation", FastSubscribers: fast, DurationSeconds: d.Seconds(),
		BatchRecords: batch, PayloadBytes: size, Durable: durable,
		BoundBytes: cfg.SubscriberQueueMaxBytes + cfg.SubscriberEgressMaxBytes}
	var err error
	if res.Baseline, res.PublishedBaseline, err = phase("baseline", false, &res.HeapBaseline); err != nil {
		return nil, fmt.Errorf("baseline phase: %w", err)
	}
	res.RSSBaseline = processRSS()
	dropsBefore := node.Metric("herald_subscriber_drops_total")
	if res.WithStalled, res.PublishedWithStalled, err = phase("stalled", true, &res.HeapWithStalled); err != nil {
		return nil, fmt.Errorf("stalled phase: %w", err)
	}
	res.StalledDrops = node.Metric("herald_subscriber_drops_total") - dropsBefore + node.Metric("herald_subscriptions_lagged_total")
	res.RSSBytes = processRSS()
	if res.Baseline > 0 {
		res.Ratio = res.WithStalled / res.Baseline
	}
	return res, nil
}

// liveHeap returns the Go heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// processRSS reads this process's resident set size from /proc.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
