package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

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
	// Note says where the node ran: always in this process, whose memory
	// the scenario measures.
	Note string `json:"note"`
}

// isolationNote is the isolation result's note.
const isolationNote = "node and clients share this process (the scenario measures its live heap): " +
	"the memory figures include the clients"

func runIsolation(env *Env, args []string) int {
	f := newScenarioFlags("isolation")
	f.nodeInProcessByDefault("the node runs in this process, whose live heap the scenario measures (false is refused)")
	fs := f.fs
	fast := fs.Int("fast", 9, "subscribers that read as fast as they can")
	duration := fs.Duration("duration", 5*time.Second, "length of each phase")
	batch := fs.Int("batch", 64, "records per publish")
	size := fs.Int("size", 128, "payload bytes per record")
	durable := fs.Bool("durable", false, "use a durable stream (synced publishes)")
	queueBytes := fs.Int64("queue-max-bytes", 8<<20, "subscriber_queue_max_bytes for the run")
	egress := fs.Int64("egress-max-bytes", 8<<20, "subscriber_egress_max_bytes for the run")
	memProfile := fs.String("memprofile", "", "write a heap profile at the end of the stalled phase to `file`")
	if code, ok := env.parse(fs, args); !ok {
		return code
	}
	if *fast < 1 || *duration <= 0 || *batch < 1 || *size < 1 {
		return env.usageError("isolation", errors.New("--fast, --duration, --batch and --size must be positive"))
	}
	if !*f.inProcess {
		return env.usageError("isolation", errors.New("the node runs in this process: it measures the live heap the stalled subscriber holds"))
	}
	// The node is always in this process: the scenario measures the live
	// heap the stalled subscriber holds.
	n, err := startInProcessNode(func(cfg *supervisors.Config) {
		cfg.SubscriberQueueMaxBytes, cfg.SubscriberEgressMaxBytes = *queueBytes, *egress
		cfg.EphemeralShardMaxBytes = 16 << 20
	})
	if err != nil {
		return env.fail("isolation", err)
	}
	s := &session{env: env, scenario: "isolation", node: n, progress: newBenchProgress(env.Stderr, env.Terminal)}
	defer s.close()
	res, err := s.isolation(*fast, *duration, *batch, *size, *durable, *queueBytes+*egress, *memProfile)
	if err != nil {
		return s.fail(err)
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "isolation: %d fast subscribers, %s per phase, %d x %d B per publish, durable=%t\n",
			res.FastSubscribers, *duration, res.BatchRecords, res.PayloadBytes, res.Durable)
		fmt.Fprintf(w, "  baseline:      %12.0f deliveries/s per fast subscriber (publisher %.0f records/s)\n", res.Baseline, res.PublishedBaseline)
		fmt.Fprintf(w, "  with stalled:  %12.0f deliveries/s per fast subscriber (publisher %.0f records/s)\n", res.WithStalled, res.PublishedWithStalled)
		fmt.Fprintf(w, "  ratio:         %12.3f (target >= 0.90)\n", res.Ratio)
		fmt.Fprintf(w, "  stalled subscriber: %.0f batches dropped; configured bound %d MiB\n", res.StalledDrops, res.BoundBytes>>20)
		fmt.Fprintf(w, "  live heap: %d MiB at the end of the baseline, %d MiB with the stalled subscriber\n", res.HeapBaseline>>20, res.HeapWithStalled>>20)
		fmt.Fprintf(w, "  process RSS: %d MiB after baseline, %d MiB after the stalled phase\n", res.RSSBaseline>>20, res.RSSBytes>>20)
	})
}

// isolation runs two phases on fresh streams: fast subscribers alone, then
// the same with one subscriber that never reads.
func (s *session) isolation(fast int, d time.Duration, batch, size int, durable bool, bound int64, memProfile string) (*isolationResult, error) {
	res := &isolationResult{Scenario: "isolation", FastSubscribers: fast, DurationSeconds: d.Seconds(),
		BatchRecords: batch, PayloadBytes: size, Durable: durable, BoundBytes: bound, Note: isolationNote}
	ctx := context.Background()
	var err error
	if res.Baseline, res.PublishedBaseline, err = s.isolationPhase("baseline", fast, d, batch, size, durable, false, &res.HeapBaseline, ""); err != nil {
		return nil, fmt.Errorf("baseline phase: %w", err)
	}
	res.RSSBaseline = processRSS()
	dropsBefore, err := s.metric(ctx, "herald_subscriber_drops_total")
	if err != nil {
		return nil, err
	}
	if res.WithStalled, res.PublishedWithStalled, err = s.isolationPhase("stalled", fast, d, batch, size, durable, true, &res.HeapWithStalled, memProfile); err != nil {
		return nil, fmt.Errorf("stalled phase: %w", err)
	}
	after, err := s.metrics(ctx, "herald_subscriber_drops_total", "herald_subscriptions_lagged_total")
	if err != nil {
		return nil, err
	}
	res.StalledDrops = after[0] - dropsBefore + after[1]
	res.RSSBytes = processRSS()
	if res.Baseline > 0 {
		res.Ratio = res.WithStalled / res.Baseline
	}
	return res, nil
}

// isolationPhase publishes to a fresh one-shard stream read by fast
// subscribers (and, with stalled, one that never reads) for d, and returns
// the deliveries per second per fast subscriber and the records published
// per second. heap receives the live heap at the phase's end.
func (s *session) isolationPhase(name string, fast int, d time.Duration, batch, size int, durable, stalled bool, heap *int64, memProfile string) (perSub, published float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	pub, err := s.node.dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer pub.Close()
	stream := client.StreamName{Tenant: "bench", Namespace: "isolation", Stream: name}
	// The next phase starts from an empty node: its stream's memory goes
	// with it.
	drop, err := freshStream(ctx, pub, stream, client.StreamConfig{Shards: 1, Durable: durable})
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	var clients []*client.Client
	var wg sync.WaitGroup
	closeClients := func() {
		for _, c := range clients {
			_ = c.Close() // ends the readers' Next
		}
		clients = nil
		wg.Wait()
	}
	defer closeClients()
	subscribe := func() (*client.Subscription, error) {
		c, err := s.node.dial(ctx)
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
	defer close(stop)
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
	p := startPipeline(ctx, pub, stream, defaultPublishInflight, nil)
	defer p.finish()
	s.progress.phase("isolation "+name, "records", &p.acked, d)
	start := time.Now()
	for time.Since(start) < d {
		if err := p.publish(ctx, payloads); err != nil {
			return 0, 0, err
		}
	}
	if err := p.finish(); err != nil {
		return 0, 0, err
	}
	if got := p.acked.Load(); got != p.sent {
		return 0, 0, fmt.Errorf("%w: %d of %d published records acked", errLost, got, p.sent)
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
	return float64(got) / float64(fast) / elapsed.Seconds(), float64(p.sent) / elapsed.Seconds(), nil
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
