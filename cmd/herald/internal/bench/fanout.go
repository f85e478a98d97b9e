package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
)

// Defaults of `herald bench fanout`.
const (
	// defaultFanoutDuration is how long the publisher runs at each fanout.
	defaultFanoutDuration = 3 * time.Second
	// defaultFanoutQueue is the subscription queue, in batches, each
	// subscriber asks for: the node's default clamp (4096).
	defaultFanoutQueue = 4096
)

// fanoutResult is the fanout scenario's machine-readable result.
type fanoutResult struct {
	Scenario string `json:"scenario"`
	// DurationSeconds is how long the publisher ran at each fanout.
	DurationSeconds float64 `json:"duration_seconds"`
	BatchRecords    int     `json:"batch_records"`
	PayloadBytes    int     `json:"payload_bytes"`
	// Inflight is the most publishes the publisher keeps unacked.
	Inflight int `json:"inflight"`
	// QueueCapacity is the subscription queue, in batches, the node granted.
	QueueCapacity uint32 `json:"queue_capacity_batches"`
	// NodeProcess is true when the node ran as its own process (the
	// default): the runs' node_cpu_* figures are then its own.
	NodeProcess bool `json:"node_process"`
	// Runs has one entry per fanout, in flag order.
	Runs []fanoutRun `json:"runs"`
}

// fanoutRun is one fanout: one publisher, Fanout subscribers each on its own
// connection, an ephemeral (at-most-once) one-shard stream.
type fanoutRun struct {
	Fanout int `json:"fanout"`
	// Published is the records published and acked within the window;
	// Seconds is the window, from the first publish to the last ack.
	Published         int64   `json:"published_records"`
	Seconds           float64 `json:"seconds"`
	PublishedPerSec   float64 `json:"published_records_per_sec"`
	PublishedMBPerSec float64 `json:"published_mb_per_sec"`
	// DeliveredInWindow is the records the subscribers received, summed
	// over them, within the same window; DeliveredPerSec divides it by
	// Seconds.
	DeliveredInWindow int64   `json:"delivered_in_window"`
	DeliveredPerSec   float64 `json:"delivered_records_per_sec"`
	// DeliveredPerSecPerSubscriber is DeliveredPerSec / Fanout.
	DeliveredPerSecPerSubscriber float64 `json:"delivered_records_per_sec_per_subscriber"`
	// Delivered is every record received once the subscribers drained
	// (waiting up to a second of silence, then, when the node dropped
	// nothing, up to 10 s more for the rest); Expected is Published ×
	// Fanout.
	Delivered int64 `json:"delivered_records"`
	Expected  int64 `json:"expected_records"`
	// ToLastSeconds is from the first publish to the last delivery before
	// the second of silence, and DeliveredPerSecToLast is what had arrived
	// then over it (how the NATS side counts).
	ToLastSeconds         float64 `json:"to_last_delivery_seconds"`
	DeliveredPerSecToLast float64 `json:"delivered_records_per_sec_to_last"`
	// LateRecords arrived after the second of silence, the last of them
	// LateAfterSeconds after it: late, not lost.
	LateRecords      int64   `json:"late_records"`
	LateAfterSeconds float64 `json:"late_after_seconds"`
	// Missing is Expected − Delivered; GapRecords the offsets the
	// subscribers saw skipped; DroppedBatches the node's
	// herald_subscriber_drops_total over the run.
	Missing        int64   `json:"missing_records"`
	GapRecords     int64   `json:"gap_records"`
	DroppedBatches float64 `json:"dropped_batches"`
	// CPU is the node's and the clients' CPU from the first publish to the
	// last delivery before the second of silence, per million records
	// delivered by then.
	CPU
}

// fanoutConfig is the fanout scenario's parameters.
type fanoutConfig struct {
	// duration is how long the publisher runs at each fanout.
	duration time.Duration
	// batch and size are the shape of each publish.
	batch, size int
	// inflight bounds unacked publishes.
	inflight int
	// queue is the subscription queue each subscriber asks for, in batches.
	queue uint32
}

func runFanout(env *Env, args []string) int {
	f := newScenarioFlags("fanout")
	fanoutsFlag := f.fs.String("fanouts", "1,10,100,1000", "comma-separated subscriber counts, one run each (each subscriber on its own client and connection)")
	duration := f.fs.Duration("duration", defaultFanoutDuration, "how long the publisher runs at each fanout")
	batch := f.fs.Int("batch", 64, "records per publish")
	size := f.fs.Int("size", 128, "payload bytes per record")
	inflight := f.fs.Int("inflight", defaultPublishInflight, "most publishes unacked at once")
	queue := f.fs.Uint("queue", defaultFanoutQueue, "subscription queue each subscriber asks for, in batches (the node clamps it)")
	if code, ok := env.parse(f.fs, args); !ok {
		return code
	}
	fanouts, err := parseFanouts(*fanoutsFlag)
	if err != nil {
		return env.usageError("fanout", fmt.Errorf("--fanouts: %w", err))
	}
	if *duration <= 0 || *batch < 1 || *size < 1 || *inflight < 1 || *queue < 1 {
		return env.usageError("fanout", errors.New("--duration, --batch, --size, --inflight and --queue must be positive"))
	}
	cfg := fanoutConfig{duration: *duration, batch: *batch, size: *size, inflight: *inflight, queue: uint32(*queue)}
	s, err := env.open(context.Background(), "fanout", *f.inProcess)
	if err != nil {
		return env.fail("fanout", err)
	}
	defer s.close()
	res := &fanoutResult{Scenario: "fanout", DurationSeconds: duration.Seconds(), BatchRecords: cfg.batch,
		PayloadBytes: cfg.size, Inflight: cfg.inflight, NodeProcess: s.nodeProcess()}
	for _, fanout := range fanouts {
		run, granted, err := s.fanoutRun(cfg, fanout)
		if err != nil {
			return s.fail(fmt.Errorf("fanout %d: %w", fanout, err))
		}
		res.QueueCapacity = granted
		res.Runs = append(res.Runs, run)
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "fanout: ephemeral stream (at most once), one publisher of %d x %s, up to %d in flight, %s per fanout, queue %d batches, %s\n",
			res.BatchRecords, fmtBytes(res.PayloadBytes), res.Inflight, *duration, res.QueueCapacity, s.nodeNote())
		fmt.Fprintf(w, "  %6s %14s %16s %14s %18s %10s %8s %8s %s\n", "fanout", "published/s", "delivered/s", "per sub/s", "to last delivery/s", "missing", "gaps", "drops", cpuHeader)
		for _, r := range res.Runs {
			fmt.Fprintf(w, "  %6d %14.0f %16.0f %14.0f %18.0f %10d %8d %8.0f %s\n", r.Fanout, r.PublishedPerSec, r.DeliveredPerSec,
				r.DeliveredPerSecPerSubscriber, r.DeliveredPerSecToLast, r.Missing, r.GapRecords, r.DroppedBatches, r.columns())
		}
		for _, r := range res.Runs {
			if r.LateRecords > 0 {
				fmt.Fprintf(w, "  fanout %d: %d records came after a second of silence, the last %.2fs later (late, not lost)\n",
					r.Fanout, r.LateRecords, r.LateAfterSeconds)
			}
		}
	})
}

// fanoutReader counts what one subscriber receives. Its counters are
// written by its reader goroutine and read by the scenario.
type fanoutReader struct {
	// sub is the subscription, on its own client.
	sub *client.Subscription
	// received counts records.
	received atomic.Int64
	// gaps counts offsets skipped between consecutive records.
	gaps atomic.Int64
}

// read receives until ctx ends or the subscription does. Only its goroutine
// calls it.
func (r *fanoutReader) read(ctx context.Context) {
	next := r.sub.StartOffset()
	for {
		ev, err := r.sub.Next(ctx)
		if err != nil {
			return
		}
		if ev.Offset > next {
			r.gaps.Add(int64(ev.Offset - next))
		}
		next = ev.Offset + 1
		r.received.Add(1)
	}
}

// fanoutRun publishes to a fresh ephemeral one-shard stream with fanout
// subscribers, each on its own client, for cfg.duration, then waits for the
// subscribers to drain and deletes the stream. It returns the run and the
// queue capacity the node granted.
func (s *session) fanoutRun(cfg fanoutConfig, fanout int) (fanoutRun, uint32, error) {
	run := fanoutRun{Fanout: fanout}
	// The setup dials a client per subscriber: at fan-out 1000 that alone
	// took most of a minute on a busy 2-core machine, and the run failed
	// on its deadline before it had measured anything.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration+time.Minute+time.Duration(fanout)*100*time.Millisecond)
	defer cancel()
	pub, err := s.node.dial(ctx)
	if err != nil {
		return run, 0, err
	}
	defer pub.Close()
	stream := client.StreamName{Tenant: "bench", Namespace: "fanout", Stream: "fanout-" + strconv.Itoa(fanout)}
	drop, err := freshStream(ctx, pub, stream, client.StreamConfig{Shards: 1})
	if err != nil {
		return run, 0, err
	}
	defer drop()

	// Subscribers, each on its own client; closing the clients ends the
	// readers, which the deferred waits then collect.
	readers := make([]*fanoutReader, 0, fanout)
	var clients []*client.Client
	var wg sync.WaitGroup
	readCtx, stopReading := context.WithCancel(ctx)
	defer func() {
		stopReading()
		for _, c := range clients {
			_ = c.Close()
		}
		wg.Wait()
	}()
	var granted uint32
	for range fanout {
		c, err := s.node.dial(ctx)
		if err != nil {
			return run, 0, err
		}
		clients = append(clients, c)
		sub, err := c.Subscribe(ctx, stream, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(cfg.queue))
		if err != nil {
			return run, 0, err
		}
		granted = sub.QueueCapacity()
		r := &fanoutReader{sub: sub}
		readers = append(readers, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.read(readCtx)
		}()
	}
	delivered := func() (recs int64) {
		for _, r := range readers {
			recs += r.received.Load()
		}
		return recs
	}

	payloads := randomPayloads(cfg.batch, cfg.size)
	// One batch outside the clock, waited for at every subscriber: the
	// publisher's stream is open and every subscription is live.
	if _, err := pub.PublishBatch(ctx, stream, payloads); err != nil {
		return run, 0, err
	}
	if got, _ := awaitCount(ctx, int64(fanout*cfg.batch), delivered); got < int64(fanout*cfg.batch) {
		return run, 0, fmt.Errorf("warm-up batch reached %d of %d records at the subscribers", got, fanout*cfg.batch)
	}
	before := delivered()
	dropsBefore, err := s.metric(ctx, "herald_subscriber_drops_total")
	if err != nil {
		return run, 0, err
	}

	p := startPipeline(ctx, pub, stream, cfg.inflight, nil)
	defer p.finish()
	s.progress.phase(fmt.Sprintf("fanout %d", fanout), "records published", &p.acked, cfg.duration)
	m, err := s.startMeter()
	if err != nil {
		return run, 0, err
	}
	start := time.Now()
	for time.Since(start) < cfg.duration {
		if err := p.publish(ctx, payloads); err != nil {
			return run, 0, err
		}
	}
	if err := p.finish(); err != nil {
		return run, 0, err
	}
	elapsed := time.Since(start)
	inWindow := delivered()

	run.Published = p.acked.Load()
	if run.Published != p.sent {
		return run, 0, fmt.Errorf("%w: %d of %d published records acked", errLost, run.Published, p.sent)
	}
	run.Seconds = elapsed.Seconds()
	run.PublishedPerSec = float64(run.Published) / run.Seconds
	run.PublishedMBPerSec = float64(run.Published) * float64(cfg.size) / 1e6 / run.Seconds
	run.DeliveredInWindow = inWindow - before
	run.DeliveredPerSec = float64(run.DeliveredInWindow) / run.Seconds
	run.DeliveredPerSecPerSubscriber = run.DeliveredPerSec / float64(fanout)
	run.Expected = run.Published * int64(fanout)
	s.progress.phase(fmt.Sprintf("fanout %d: draining", fanout), "", nil, 0)
	total, last := awaitCount(ctx, before+run.Expected, delivered)
	run.Delivered = total - before
	if run.CPU, err = m.stop(run.Delivered); err != nil {
		return run, 0, err
	}
	run.ToLastSeconds = max(last.Sub(start), elapsed).Seconds()
	run.DeliveredPerSecToLast = float64(run.Delivered) / run.ToLastSeconds
	// Its own deadline: a drain that waited out ctx must still report
	// what arrived rather than fail on the read.
	mctx, mcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer mcancel()
	drops, err := s.metric(mctx, "herald_subscriber_drops_total")
	if err != nil {
		return run, 0, err
	}
	run.DroppedBatches = drops - dropsBefore
	if run.Delivered < run.Expected && run.DroppedBatches == 0 {
		// Nothing was dropped, so what is missing is still on its way or
		// lost: wait for it.
		s.progress.phase(fmt.Sprintf("fanout %d: waiting for %d late records", fanout, run.Expected-run.Delivered), "", nil, 0)
		all, after := awaitLate(mctx, before+run.Expected, delivered, lateWait)
		run.LateRecords, run.LateAfterSeconds = all-total, after.Seconds()
		run.Delivered = all - before
	}
	run.Missing = run.Expected - run.Delivered
	for _, r := range readers {
		run.GapRecords += r.gaps.Load()
	}
	return run, granted, nil
}
