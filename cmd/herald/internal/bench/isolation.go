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
	// Rounds is how many phases of each kind ran, in the order baseline,
	// stalled, stalled, baseline, ... (ABBA), so that a machine that slows
	// down or speeds up during the run weighs on both kinds alike.
	Rounds int `json:"rounds"`
	// Phases are the phases in the order they ran.
	Phases []isolationPhaseResult `json:"phases"`
	// Baseline and WithStalled are deliveries (records) per second per fast
	// subscriber, averaged over them and over the phases of their kind,
	// without and with the stalled one.
	Baseline    float64 `json:"baseline_deliveries_per_sec"`
	WithStalled float64 `json:"with_stalled_deliveries_per_sec"`
	// Ratio is WithStalled / Baseline (issue 16 keeps it at ≥ 0.95).
	Ratio float64 `json:"ratio"`
	// PublishedBaseline and PublishedWithStalled are the publisher's records
	// per second, averaged over the phases of each kind.
	PublishedBaseline    float64 `json:"published_per_sec_baseline"`
	PublishedWithStalled float64 `json:"published_per_sec_with_stalled"`
	// RSSBaseline and RSSBytes are this process's resident memory (node and
	// clients) at the end of the first baseline phase and of the last stalled
	// one; BoundBytes is what the stalled subscriber may hold by
	// configuration (queue bytes + its egress share).
	RSSBaseline int64 `json:"rss_bytes_baseline"`
	RSSBytes    int64 `json:"rss_bytes"`
	// HeapBaseline and HeapWithStalled are the live Go heap after a
	// collection at the end of the first baseline phase and the largest at
	// the end of a stalled one, before its clients close: the difference is
	// what the stalled subscriber holds.
	HeapBaseline    int64 `json:"live_heap_bytes_baseline"`
	HeapWithStalled int64 `json:"live_heap_bytes_with_stalled"`
	BoundBytes      int64 `json:"configured_stalled_bound_bytes"`
	// StalledDrops counts the batches dropped and subscriptions lagged over
	// the run: the stalled subscribers' (the fast ones keep up).
	StalledDrops float64 `json:"stalled_subscriber_drops"`
	// Note says where the node ran: always in this process, whose memory
	// the scenario measures.
	Note string `json:"note"`
}

// Defaults of `herald bench isolation`. Before the round of 2026-12-03
// afternoon it ran one baseline and one stalled phase of 5 s, and the ratio
// moved between 0.89 and 1.10 from run to run; adjacent phases of the same
// kind differed by up to a fifth on this shared machine. Eight phases of
// 2.5 s, ABBA, average that out over twice the time.
const (
	defaultIsolationPhase  = 2500 * time.Millisecond
	defaultIsolationRounds = 4
)

// isolationPhaseResult is one phase of the isolation scenario.
type isolationPhaseResult struct {
	// Stalled is true for a phase with the subscriber that never reads.
	Stalled bool `json:"stalled"`
	// DeliveriesPerSec is per fast subscriber; PublishedPerSec the
	// publisher's records per second.
	DeliveriesPerSec float64 `json:"deliveries_per_sec"`
	PublishedPerSec  float64 `json:"published_per_sec"`
}

// isolationNote is the isolation result's note.
const isolationNote = "node and clients share this process (the scenario measures its live heap): " +
	"the memory figures include the clients"

func runIsolation(env *Env, args []string) int {
	f := newScenarioFlags("isolation")
	f.nodeInProcessByDefault("the node runs in this process, whose live heap the scenario measures (false is refused)")
	fs := f.fs
	fast := fs.Int("fast", 9, "subscribers that read as fast as they can")
	duration := fs.Duration("duration", defaultIsolationPhase, "length of each phase")
	rounds := fs.Int("rounds", defaultIsolationRounds, "phases of each kind, run baseline, stalled, stalled, baseline, ... (ABBA)")
	batch := fs.Int("batch", 64, "records per publish")
	size := fs.Int("size", 128, "payload bytes per record")
	durable := fs.Bool("durable", false, "use a durable stream (synced publishes)")
	queueBytes := fs.Int64("queue-max-bytes", 8<<20, "subscriber_queue_max_bytes for the run")
	egress := fs.Int64("egress-max-bytes", 8<<20, "subscriber_egress_max_bytes for the run")
	memProfile := fs.String("memprofile", "", "write a heap profile at the end of the stalled phase to `file`")
	if code, ok := env.parse(fs, args); !ok {
		return code
	}
	if *fast < 1 || *duration <= 0 || *rounds < 1 || *batch < 1 || *size < 1 {
		return env.usageError("isolation", errors.New("--fast, --duration, --rounds, --batch and --size must be positive"))
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
	res, err := s.isolation(*fast, *duration, *rounds, *batch, *size, *durable, *queueBytes+*egress, *memProfile)
	if err != nil {
		return s.fail(err)
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "isolation: %d fast subscribers, %d phases of %s (ABBA), %d x %d B per publish, durable=%t\n",
			res.FastSubscribers, len(res.Phases), *duration, res.BatchRecords, res.PayloadBytes, res.Durable)
		fmt.Fprintf(w, "  baseline:      %12.0f deliveries/s per fast subscriber (publisher %.0f records/s)\n", res.Baseline, res.PublishedBaseline)
		fmt.Fprintf(w, "  with stalled:  %12.0f deliveries/s per fast subscriber (publisher %.0f records/s)\n", res.WithStalled, res.PublishedWithStalled)
		for i, ph := range res.Phases {
			kind := "baseline"
			if ph.Stalled {
				kind = "stalled"
			}
			fmt.Fprintf(w, "    phase %d %-8s %12.0f deliveries/s per fast subscriber\n", i+1, kind, ph.DeliveriesPerSec)
		}
		fmt.Fprintf(w, "  ratio:         %12.3f (target >= 0.95)\n", res.Ratio)
		fmt.Fprintf(w, "  stalled subscriber: %.0f batches dropped; configured bound %d MiB\n", res.StalledDrops, res.BoundBytes>>20)
		fmt.Fprintf(w, "  live heap: %d MiB at the end of the baseline, %d MiB with the stalled subscriber\n", res.HeapBaseline>>20, res.HeapWithStalled>>20)
		fmt.Fprintf(w, "  process RSS: %d MiB after baseline, %d MiB after the stalled phase\n", res.RSSBaseline>>20, res.RSSBytes>>20)
	})
}

// isolation runs 2 × rounds phases on fresh streams, baseline (fast
// subscribers alone) and stalled (the same with one subscriber that never
// reads) in the order A B B A A B B A ...
func (s *session) isolation(fast int, d time.Duration, rounds, batch, size int, durable bool, bound int64, memProfile string) (*isolationResult, error) {
	res := &isolationResult{Scenario: "isolation", FastSubscribers: fast, DurationSeconds: d.Seconds(), Rounds: rounds,
		BatchRecords: batch, PayloadBytes: size, Durable: durable, BoundBytes: bound, Note: isolationNote}
	ctx := context.Background()
	dropsBefore, err := s.metrics(ctx, "herald_subscriber_drops_total", "herald_subscriptions_lagged_total")
	if err != nil {
		return nil, err
	}
	for i := range 2 * rounds {
		stalled := i%4 == 1 || i%4 == 2
		name, kind := fmt.Sprintf("baseline-%d", i+1), "baseline"
		if stalled {
			name, kind = fmt.Sprintf("stalled-%d", i+1), "stalled"
		}
		var heap int64
		profile := ""
		if stalled && res.HeapWithStalled == 0 {
			profile = memProfile // the first stalled phase's
		}
		perSub, published, err := s.isolationPhase(name, fast, d, batch, size, durable, stalled, &heap, profile)
		if err != nil {
			return nil, fmt.Errorf("%s phase %d: %w", kind, i+1, err)
		}
		res.Phases = append(res.Phases, isolationPhaseResult{Stalled: stalled, DeliveriesPerSec: perSub, PublishedPerSec: published})
		switch {
		case stalled:
			res.WithStalled += perSub / float64(rounds)
			res.PublishedWithStalled += published / float64(rounds)
			res.HeapWithStalled = max(res.HeapWithStalled, heap)
			res.RSSBytes = processRSS()
		default:
			res.Baseline += perSub / float64(rounds)
			res.PublishedBaseline += published / float64(rounds)
			if i == 0 {
				res.HeapBaseline, res.RSSBaseline = heap, processRSS()
			}
		}
	}
	after, err := s.metrics(ctx, "herald_subscriber_drops_total", "herald_subscriptions_lagged_total")
	if err != nil {
		return nil, err
	}
	res.StalledDrops = after[0] - dropsBefore[0] + after[1] - dropsBefore[1]
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
