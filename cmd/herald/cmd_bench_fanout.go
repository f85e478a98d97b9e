package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
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
	// fanoutDrainQuiet is how long the scenario waits, after the publisher
	// stops, without any new delivery before it counts the rest as lost.
	fanoutDrainQuiet = time.Second
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
	// (waiting up to a second of silence); Expected is Published × Fanout.
	Delivered int64 `json:"delivered_records"`
	Expected  int64 `json:"expected_records"`
	// ToLastSeconds is from the first publish to the last delivery, and
	// DeliveredPerSecToLast is Delivered over it (how the NATS side counts).
	ToLastSeconds         float64 `json:"to_last_delivery_seconds"`
	DeliveredPerSecToLast float64 `json:"delivered_records_per_sec_to_last"`
	// Missing is Expected − Delivered; GapRecords the offsets the
	// subscribers saw skipped; DroppedBatches the node's
	// herald_subscriber_drops_total over the run.
	Missing        int64   `json:"missing_records"`
	GapRecords     int64   `json:"gap_records"`
	DroppedBatches float64 `json:"dropped_batches"`
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

func runBenchFanout(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("herald bench fanout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fanoutsFlag := fs.String("fanouts", "1,10", "comma-separated subscriber counts, one run each")
	duration := fs.Duration("duration", defaultFanoutDuration, "how long the publisher runs at each fanout")
	batch := fs.Int("batch", 64, "records per publish")
	size := fs.Int("size", 128, "payload bytes per record")
	inflight := fs.Int("inflight", defaultPublishInflight, "most publishes unacked at once")
	queue := fs.Uint("queue", defaultFanoutQueue, "subscription queue each subscriber asks for, in batches (the node clamps it)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if code, ok := parseStdFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	fanouts, err := parseFanouts(*fanoutsFlag)
	if err != nil {
		fmt.Fprintln(stderr, "herald bench fanout: --fanouts:", err)
		return 2
	}
	if *duration <= 0 || *batch < 1 || *size < 1 || *inflight < 1 || *queue < 1 {
		fmt.Fprintln(stderr, "herald bench fanout: --duration, --batch, --size, --inflight and --queue must be positive")
		return 2
	}
	cfg := fanoutConfig{duration: *duration, batch: *batch, size: *size, inflight: *inflight, queue: uint32(*queue)}
	n, err := startBenchNode()
	if err != nil {
		fmt.Fprintln(stderr, "herald bench:", err)
		return 1
	}
	defer n.close()
	progress := newBenchProgress(stderr)
	defer progress.close()
	res := &fanoutResult{Scenario: "fanout", DurationSeconds: duration.Seconds(), BatchRecords: cfg.batch,
		PayloadBytes: cfg.size, Inflight: cfg.inflight}
	for _, fanout := range fanouts {
		run, granted, err := benchFanoutRun(n, progress, cfg, fanout)
		if err != nil {
			progress.close()
			fmt.Fprintf(stderr, "herald bench fanout: fanout %d: %v\n", fanout, err)
			return 1
		}
		res.QueueCapacity = granted
		res.Runs = append(res.Runs, run)
	}
	progress.close()
	if *asJSON {
		return writeBenchJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "fanout: ephemeral stream (at most once), one publisher of %d x %s, up to %d in flight, %s per fanout, queue %d batches\n",
		res.BatchRecords, fmtBytes(res.PayloadBytes), res.Inflight, *duration, res.QueueCapacity)
	fmt.Fprintf(stdout, "  %6s %14s %16s %14s %18s %10s %8s %8s\n", "fanout", "published/s", "delivered/s", "per sub/s", "to last delivery/s", "missing", "gaps", "drops")
	for _, r := range res.Runs {
		fmt.Fprintf(stdout, "  %6d %14.0f %16.0f %14.0f %18.0f %10d %8d %8.0f\n", r.Fanout, r.PublishedPerSec, r.DeliveredPerSec,
			r.DeliveredPerSecPerSubscriber, r.DeliveredPerSecToLast, r.Missing, r.GapRecords, r.DroppedBatches)
	}
	return 0
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

// benchFanoutRun publishes to a fresh ephemeral one-shard stream with fanout
// subscribers, each on its own client, for cfg.duration, then waits for the
// subscribers to drain and deletes the stream. It returns the run and the
// queue capacity the node granted.
func benchFanoutRun(n *benchNode, progress *benchProgress, cfg fanoutConfig, fanout int) (fanoutRun, uint32, error) {
	run := fanoutRun{Fanout: fanout}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration+time.Minute)
	defer cancel()
	pub, err := n.dial(ctx)
	if err != nil {
		return run, 0, err
	}
	defer pub.Close()
	stream := client.StreamName{Tenant: "bench", Namespace: "fanout", Stream: "fanout-" + strconv.Itoa(fanout)}
	if _, err := pub.CreateStream(ctx, stream, client.StreamConfig{Shards: 1}); err != nil {
		return run, 0, err
	}
	defer func() { _ = pub.DeleteStream(context.Background(), stream) }()

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
		c, err := n.dial(ctx)
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
	delivered := func() (recs, gaps int64) {
		for _, r := range readers {
			recs += r.received.Load()
			gaps += r.gaps.Load()
		}
		return recs, gaps
	}

	payloads := make([][]byte, cfg.batch)
	for i := range payloads {
		payloads[i] = make([]byte, cfg.size)
		_, _ = rand.Read(payloads[i])
	}
	// One batch outside the clock, waited for at every subscriber: the
	// publisher's stream is open and every subscription is live.
	if _, err := pub.PublishBatch(ctx, stream, payloads); err != nil {
		return run, 0, err
	}
	if got, _ := waitFanoutDelivered(ctx, int64(fanout*cfg.batch), delivered); got < int64(fanout*cfg.batch) {
		return run, 0, fmt.Errorf("warm-up batch reached %d of %d records at the subscribers", got, fanout*cfg.batch)
	}
	before, _ := delivered()
	dropsBefore := n.node.Metric("herald_subscriber_drops_total")

	var acked atomic.Int64
	progress.phase(fmt.Sprintf("fanout %d", fanout), "records published", &acked, cfg.duration)
	slots := make(chan struct{}, cfg.inflight)
	queue := make(chan *client.PublishFuture, cfg.inflight)
	waitErr := make(chan error, 1)
	go func() {
		var first error
		for f := range queue {
			_, err := f.Wait(ctx)
			<-slots
			if err != nil {
				first = cmp.Or(first, err)
				continue
			}
			acked.Add(int64(cfg.batch))
		}
		waitErr <- first
	}()
	start := time.Now()
	for time.Since(start) < cfg.duration {
		slots <- struct{}{}
		f, err := pub.PublishAsync(ctx, stream, payloads, client.WithAck(client.AckPerBatch))
		if err != nil {
			close(queue)
			<-waitErr
			return run, 0, err
		}
		queue <- f
	}
	close(queue)
	if err := <-waitErr; err != nil {
		return run, 0, err
	}
	elapsed := time.Since(start)
	inWindow, _ := delivered()

	run.Published = acked.Load()
	run.Seconds = elapsed.Seconds()
	run.PublishedPerSec = float64(run.Published) / run.Seconds
	run.PublishedMBPerSec = float64(run.Published) * float64(cfg.size) / 1e6 / run.Seconds
	run.DeliveredInWindow = inWindow - before
	run.DeliveredPerSec = float64(run.DeliveredInWindow) / run.Seconds
	run.DeliveredPerSecPerSubscriber = run.DeliveredPerSec / float64(fanout)
	run.Expected = run.Published * int64(fanout)
	progress.phase(fmt.Sprintf("fanout %d: draining", fanout), "", nil, 0)
	total, last := waitFanoutDelivered(ctx, before+run.Expected, delivered)
	run.Delivered = total - before
	run.ToLastSeconds = max(last.Sub(start), elapsed).Seconds()
	run.DeliveredPerSecToLast = float64(run.Delivered) / run.ToLastSeconds
	run.Missing = run.Expected - run.Delivered
	_, run.GapRecords = delivered()
	run.DroppedBatches = n.node.Metric("herald_subscriber_drops_total") - dropsBefore
	return run, granted, nil
}

// waitFanoutDelivered polls count until its records reach want, stop growing
// for fanoutDrainQuiet, or ctx ends, and returns the last count and when
// it was first seen (to within the 1 ms poll).
func waitFanoutDelivered(ctx context.Context, want int64, count func() (recs, gaps int64)) (int64, time.Time) {
	n, _ := count()
	lastGrowth := time.Now()
	for n < want && time.Since(lastGrowth) < fanoutDrainQuiet && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
		if m, _ := count(); m > n {
			n, lastGrowth = m, time.Now()
		}
	}
	return n, lastGrowth
}

// parseFanouts parses --fanouts: a comma-separated list of positive
// subscriber counts.
func parseFanouts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid count %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}
