package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/stages"
)

// Defaults of `herald bench latency`.
const (
	// defaultLatencyDuration is how long records are published at each
	// fanout, warm-up included.
	defaultLatencyDuration = 3 * time.Second
	// defaultLatencyRate is the records published per second.
	defaultLatencyRate = 1000
	// defaultLatencyMaxDeliveries caps rate × fanout: above it the rate is
	// lowered so that every fanout stays well below the node's delivery
	// saturation: at fanout 100 on 2 cores, 50,000/s already put p99 past
	// 40 ms, 10,000/s kept it near 10 ms.
	defaultLatencyMaxDeliveries = 20_000
	// defaultLatencyConns is the most client connections the subscribers
	// share; up to it, each subscriber has its own.
	defaultLatencyConns = 20
	// latencyStampBytes is the payload prefix carrying the scheduled and
	// actual send times.
	latencyStampBytes = 16
	// latencyMaxWarmup bounds the warm-up, the first tenth of each run.
	latencyMaxWarmup = 200 * time.Millisecond
)

// latencyResult is the latency scenario's machine-readable result.
type latencyResult struct {
	Scenario string `json:"scenario"`
	// DurationSeconds is how long each fanout publishes, warm-up included.
	DurationSeconds float64 `json:"duration_seconds"`
	PayloadBytes    int     `json:"payload_bytes"`
	// RequestedRate is --rate; MaxDeliveriesPerSec is --max-deliveries,
	// which lowers a run's rate to MaxDeliveriesPerSec / fanout.
	RequestedRate       int `json:"requested_rate"`
	MaxDeliveriesPerSec int `json:"max_deliveries_per_sec"`
	// NodeProcess is true when the node ran as its own process (the
	// default): the runs' node_cpu_* figures are then its own.
	NodeProcess bool `json:"node_process"`
	// Runs has one entry per fanout, in flag order.
	Runs []latencyRun `json:"runs"`
}

// latencyRun is one fanout: single-record publishes at a fixed rate to an
// ephemeral one-shard stream with Fanout subscribers over Connections
// clients.
type latencyRun struct {
	Fanout      int `json:"fanout"`
	Connections int `json:"connections"`
	// Rate is the records per second this run was paced at.
	Rate int `json:"rate"`
	// WarmupSeconds is the start of the run whose records are not sampled.
	WarmupSeconds float64 `json:"warmup_seconds"`
	// Published counts records published (acked); PublishedPerSec divides
	// it by the time from the first scheduled send to the last send.
	Published       int64   `json:"published_records"`
	PublishedPerSec float64 `json:"published_records_per_sec"`
	// Delivered and Expected (Published × Fanout) count deliveries,
	// warm-up included; Missing is the difference. LateRecords came after
	// a second without deliveries (the run then waits up to 10 s more), the
	// last of them LateAfterSeconds after it; they are in the latencies.
	Delivered        int64   `json:"delivered_records"`
	Expected         int64   `json:"expected_records"`
	Missing          int64   `json:"missing_records"`
	LateRecords      int64   `json:"late_records"`
	LateAfterSeconds float64 `json:"late_after_seconds"`
	// Latency is from each record's scheduled send time to a subscriber's
	// Next returning it, so a late publisher counts against it (coordinated
	// omission); LatencyFromSend is from the actual send time.
	Latency         latencySummary `json:"latency"`
	LatencyFromSend latencySummary `json:"latency_from_send"`
	// PacerLag is how late the pacer sent each record after its scheduled
	// time (the Go runtime's sleep wakes late).
	PacerLag latencySummary `json:"pacer_lag"`
	// Stages is the time between the stages of a record's path, in a build
	// with the heraldstages tag and the node in this process (at fan-out
	// above 1, to the last of a record's deliveries); nil otherwise.
	Stages *stages.Report `json:"stages,omitempty"`
	// CPU is the node's and the clients' CPU from the first paced send to
	// the last delivery before a second without any, per million
	// deliveries by then: at a paced rate it is mostly the cost of waking
	// up for each record.
	CPU
}

// latencyConfig is the latency scenario's parameters.
type latencyConfig struct {
	// duration is how long each fanout publishes, warm-up included.
	duration time.Duration
	// rate is the requested records per second; maxDeliveries caps
	// rate × fanout.
	rate, maxDeliveries int
	// size is the payload size, at least latencyStampBytes.
	size int
	// conns is the most client connections the subscribers share.
	conns int
	// trace, when set, receives a Go execution trace of every run's paced
	// phase.
	trace io.Writer
}

// runRate is the rate of a run at fanout: the requested rate, lowered to
// keep rate × fanout within maxDeliveries, at least 1.
func (c latencyConfig) runRate(fanout int) int {
	return max(1, min(c.rate, c.maxDeliveries/fanout))
}

func runLatency(env *Env, args []string) int {
	f := newScenarioFlags("latency")
	fanoutsFlag := f.fs.String("fanouts", "1,10,100,1000", "comma-separated subscriber counts, one run each")
	duration := f.fs.Duration("duration", defaultLatencyDuration, "how long each fanout publishes, warm-up included")
	rate := f.fs.Int("rate", defaultLatencyRate, "records published per second")
	maxDeliveries := f.fs.Int("max-deliveries", defaultLatencyMaxDeliveries, "cap on rate x fanout (deliveries/s): larger fanouts run at a lower rate")
	size := f.fs.Int("size", 128, "payload bytes per record (at least 16: the send times)")
	conns := f.fs.Int("conns", defaultLatencyConns, "most client connections the subscribers share (one each up to it)")
	traceFile := f.fs.String("trace", "", "write a Go execution trace of the paced phases to `file` (go tool trace -pprof=sched shows where deliveries wait; the node's side only with --in-process)")
	if code, ok := env.parse(f.fs, args); !ok {
		return code
	}
	fanouts, err := parseFanouts(*fanoutsFlag)
	if err != nil {
		return env.usageError("latency", fmt.Errorf("--fanouts: %w", err))
	}
	if *duration <= 0 || *rate < 1 || *maxDeliveries < 1 || *conns < 1 {
		return env.usageError("latency", errors.New("--duration, --rate, --max-deliveries and --conns must be positive"))
	}
	if *size < latencyStampBytes {
		return env.usageError("latency", fmt.Errorf("--size must be at least %d bytes (the send times)", latencyStampBytes))
	}
	cfg := latencyConfig{duration: *duration, rate: *rate, maxDeliveries: *maxDeliveries, size: *size, conns: *conns}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return env.fail("latency", err)
		}
		defer f.Close()
		cfg.trace = f
	}
	s, err := env.open(context.Background(), "latency", *f.inProcess)
	if err != nil {
		return env.fail("latency", err)
	}
	defer s.close()
	res := &latencyResult{Scenario: "latency", DurationSeconds: duration.Seconds(), PayloadBytes: cfg.size,
		RequestedRate: cfg.rate, MaxDeliveriesPerSec: cfg.maxDeliveries, NodeProcess: s.nodeProcess()}
	for _, fanout := range fanouts {
		run, err := s.latencyRun(cfg, fanout)
		if err != nil {
			return s.fail(fmt.Errorf("fanout %d: %w", fanout, err))
		}
		res.Runs = append(res.Runs, run)
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "latency: single-record publishes of %s to an ephemeral stream, %s per fanout, rate %d/s capped at %d deliveries/s, %s\n",
			fmtBytes(res.PayloadBytes), *duration, res.RequestedRate, res.MaxDeliveriesPerSec, s.nodeNote())
		if stages.Enabled && res.NodeProcess {
			fmt.Fprintln(w, "  (a heraldstages build: the stage times need the node in this process, --in-process)")
		}
		for _, r := range res.Runs {
			fmt.Fprintf(w, "  fanout %d (%d connections, %d records/s, %d of %d delivered)\n", r.Fanout, r.Connections, r.Rate, r.Delivered, r.Expected)
			fmt.Fprintf(w, "    from schedule: %s\n", r.Latency)
			fmt.Fprintf(w, "    from send:     %s\n", r.LatencyFromSend)
			fmt.Fprintf(w, "    pacer lag:     %s\n", r.PacerLag)
			fmt.Fprintf(w, "    CPU per million deliveries: node %s ms, client %.0f ms\n", r.nodeMs(), r.ClientCPUMsPerMillion)
			if r.LateRecords > 0 {
				fmt.Fprintf(w, "    %d records came after a second without deliveries, the last %.2fs later (late, not lost)\n", r.LateRecords, r.LateAfterSeconds)
			}
			if r.Stages != nil {
				fmt.Fprint(w, indent(r.Stages.String(), "    "))
			}
		}
	})
}

// latencyReader collects what one subscriber sees. Its samples belong to its
// reader goroutine until that goroutine has ended; received is read by the
// scenario meanwhile.
type latencyReader struct {
	// sub is the subscription.
	sub *client.Subscription
	// received counts records, warm-up included.
	received atomic.Int64
	// fromSched and fromSend are the latencies of the records scheduled
	// from sampleFrom on, from their scheduled and actual send times.
	fromSched, fromSend []time.Duration
}

// read receives until ctx ends or the subscription does, timing each record
// against base (the run's clock; the payload holds offsets from it). Records
// scheduled before sampleFrom (nanoseconds from base) are counted, not
// sampled.
func (r *latencyReader) read(ctx context.Context, base time.Time, sampleFrom *atomic.Int64) {
	for {
		ev, err := r.sub.Next(ctx)
		if err != nil {
			return
		}
		stages.Mark(stages.Next, ev.Payload)
		now := time.Since(base)
		r.received.Add(1)
		if len(ev.Payload) < latencyStampBytes {
			continue
		}
		sched := time.Duration(binary.LittleEndian.Uint64(ev.Payload[0:8]))
		sent := time.Duration(binary.LittleEndian.Uint64(ev.Payload[8:16]))
		if int64(sched) < sampleFrom.Load() {
			continue
		}
		r.fromSched = append(r.fromSched, now-sched)
		r.fromSend = append(r.fromSend, now-sent)
	}
}

// benchLatencyRun publishes single records at the run's rate for
// cfg.duration to a fresh ephemeral one-shard stream with fanout
// subscribers, waits for them to drain, and deletes the stream.
//
// Record i is scheduled at start + i/rate; the pacer sleeps until then
// (time.Sleep wakes late, which the pacer lag shows and the latency from
// the schedule includes) and stamps the record with its scheduled and
// actual send times, as offsets from one monotonic base.
func (s *session) latencyRun(cfg latencyConfig, fanout int) (latencyRun, error) {
	rate := cfg.runRate(fanout)
	run := latencyRun{Fanout: fanout, Connections: min(fanout, cfg.conns), Rate: rate}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration+time.Minute)
	defer cancel()
	pub, err := s.node.dial(ctx)
	if err != nil {
		return run, err
	}
	defer pub.Close()
	stream := client.StreamName{Tenant: "bench", Namespace: "latency", Stream: "latency-" + strconv.Itoa(fanout)}
	drop, err := freshStream(ctx, pub, stream, client.StreamConfig{Shards: 1})
	if err != nil {
		return run, err
	}
	defer drop()

	// The subscribers take turns on run.Connections clients.
	clients := make([]*client.Client, run.Connections)
	readers := make([]*latencyReader, fanout)
	var wg sync.WaitGroup
	readCtx, stopReading := context.WithCancel(ctx)
	defer func() {
		stopReading()
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
		wg.Wait()
	}()
	for i := range clients {
		if clients[i], err = s.node.dial(ctx); err != nil {
			return run, err
		}
	}
	base := time.Now()
	// sampleFrom is set once the schedule is known: until then nothing is
	// sampled.
	var sampleFrom atomic.Int64
	sampleFrom.Store(math.MaxInt64)
	warmup := min(cfg.duration/10, latencyMaxWarmup)
	run.WarmupSeconds = warmup.Seconds()
	for i := range readers {
		sub, err := clients[i%len(clients)].Subscribe(ctx, stream, client.WithShard(0), client.WithStartLatest())
		if err != nil {
			return run, err
		}
		r := &latencyReader{sub: sub}
		readers[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.read(readCtx, base, &sampleFrom)
		}()
	}
	received := func() (recs int64) {
		for _, r := range readers {
			recs += r.received.Load()
		}
		return recs
	}

	// Acks are waited for off the pacer's goroutine.
	if stages.Enabled {
		stages.Default.Reset(cfg.size, fanout > 1)
	}
	p := startPipeline(ctx, pub, stream, defaultPublishInflight, nil)
	defer p.finish()

	// One record outside the clock (stamped as scheduled at 0, before
	// sampleFrom), waited for at every subscriber: every subscription is
	// live.
	if err := p.publish(ctx, [][]byte{make([]byte, cfg.size)}); err != nil {
		return run, err
	}
	if got, _ := awaitCount(ctx, int64(fanout), received); got < int64(fanout) {
		return run, fmt.Errorf("first record reached %d of %d subscribers", got, fanout)
	}
	before := received()

	s.progress.phase(fmt.Sprintf("latency fanout %d at %d/s", fanout, rate), "records", &p.acked, cfg.duration)
	m, err := s.startMeter()
	if err != nil {
		return run, err
	}
	interval := time.Second / time.Duration(rate)
	total := int(cfg.duration / interval)
	lag := newLatencyHistogram()
	start := time.Since(base) + time.Millisecond
	sampleFrom.Store(int64(start + warmup))
	var lastSend time.Duration
	if cfg.trace != nil {
		if err := trace.Start(cfg.trace); err != nil {
			return run, err
		}
	}
	for i := range total {
		sched := start + time.Duration(i)*interval
		if wait := sched - time.Since(base); wait > 0 {
			time.Sleep(wait)
		}
		payload := make([]byte, cfg.size)
		lastSend = time.Since(base)
		recordLatency(lag, lastSend-sched)
		binary.LittleEndian.PutUint64(payload[0:8], uint64(sched))
		binary.LittleEndian.PutUint64(payload[8:16], uint64(lastSend))
		if err := p.publish(ctx, [][]byte{payload}); err != nil {
			if cfg.trace != nil {
				trace.Stop()
			}
			return run, err
		}
	}
	if cfg.trace != nil {
		trace.Stop()
	}
	if err := p.finish(); err != nil {
		return run, err
	}
	run.Published = p.acked.Load() - 1
	if run.Published != int64(total) {
		return run, fmt.Errorf("%w: %d of %d published records acked", errLost, run.Published, total)
	}
	run.PublishedPerSec = float64(run.Published) / (lastSend - start + interval).Seconds()
	run.Expected = run.Published * int64(fanout)
	s.progress.phase(fmt.Sprintf("latency fanout %d: draining", fanout), "", nil, 0)
	total64, _ := awaitCount(ctx, before+run.Expected, received)
	run.Delivered = total64 - before
	if run.CPU, err = m.stop(run.Delivered); err != nil {
		return run, err
	}
	if run.Delivered < run.Expected {
		s.progress.phase(fmt.Sprintf("latency fanout %d: waiting for %d late records", fanout, run.Expected-run.Delivered), "", nil, 0)
		all, after := awaitLate(ctx, before+run.Expected, received, lateWait)
		run.LateRecords, run.LateAfterSeconds = all-total64, after.Seconds()
		run.Delivered = all - before
	}
	run.Missing = run.Expected - run.Delivered

	// The readers own their samples until they have ended.
	stopReading()
	for _, c := range clients {
		_ = c.Close()
	}
	wg.Wait()
	fromSched, fromSend := newLatencyHistogram(), newLatencyHistogram()
	for _, r := range readers {
		for _, d := range r.fromSched {
			recordLatency(fromSched, d)
		}
		for _, d := range r.fromSend {
			recordLatency(fromSend, d)
		}
	}
	run.Latency, run.LatencyFromSend, run.PacerLag = summarize(fromSched), summarize(fromSend), summarize(lag)
	if stages.Enabled && !s.nodeProcess() {
		rep := stages.Default.Report()
		run.Stages = &rep
	}
	return run, nil
}

// indent prefixes every line of text with prefix.
func indent(text, prefix string) string {
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
