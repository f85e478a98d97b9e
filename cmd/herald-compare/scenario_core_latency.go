package main

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
)

// maxLatency is the largest latency the histograms record; larger samples
// are clamped to it.
const maxLatency = time.Minute

// latencySubscriber records the publish → deliver latency one subscriber sees.
type latencySubscriber struct {
	nc *nats.Conn // its own connection

	mu struct {
		sync.Mutex
		hist     *hdrhistogram.Histogram // latency from the scheduled send, ns, warm-up excluded
		fromSend *hdrhistogram.Histogram // latency from the actual send, ns, warm-up excluded
		received int                     // records received, warm-up included
	}
}

// runCoreLatency runs the core latency scenario once per configured fanout.
func runCoreLatency(ctx context.Context, cfg config) ([]Result, error) {
	var results []Result
	for _, fanout := range cfg.fanouts {
		r, err := coreLatency(ctx, cfg, fanout)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

// coreLatency publishes single records at cfg.rate for cfg.duration to fanout
// subscribers, each on its own connection. Record i is scheduled at
// start + i/rate and carries that scheduled time and its actual send time; a
// subscriber's latency sample is receipt time minus scheduled time, so time
// the publisher spends behind schedule counts too (coordinated omission).
// Latency from the actual send is reported beside it, so the pacer's own
// wake-up lag can be told apart from the broker's. The first tenth of the
// run, at most 200 ms, is a warm-up and is not recorded.
func coreLatency(ctx context.Context, cfg config, fanout int) (Result, error) {
	srv, err := startServer()
	if err != nil {
		return Result{}, err
	}
	defer srv.Close()

	const subject = "bench.latency"
	base := time.Now() // every timestamp is nanoseconds since base (monotonic)
	warmup := min(cfg.duration/10, 200*time.Millisecond)
	subs := make([]*latencySubscriber, fanout)
	defer func() {
		for _, s := range subs {
			if s != nil {
				s.nc.Close()
			}
		}
	}()
	for i := range subs {
		s := &latencySubscriber{}
		s.mu.hist = hdrhistogram.New(1, int64(maxLatency), 3)
		s.mu.fromSend = hdrhistogram.New(1, int64(maxLatency), 3)
		if s.nc, err = srv.connect("core-latency-sub"); err != nil {
			return Result{}, err
		}
		subs[i] = s
		_, err = s.nc.Subscribe(subject, func(m *nats.Msg) {
			now := int64(time.Since(base))
			sched := int64(binary.LittleEndian.Uint64(m.Data[0:8]))
			sent := int64(binary.LittleEndian.Uint64(m.Data[8:16]))
			s.mu.Lock()
			defer s.mu.Unlock()
			s.mu.received++
			if sched >= int64(warmup) {
				s.mu.hist.RecordValue(min(now-sched, int64(maxLatency)))
				s.mu.fromSend.RecordValue(min(now-sent, int64(maxLatency)))
			}
		})
		if err != nil {
			return Result{}, err
		}
		if err := s.nc.Flush(); err != nil {
			return Result{}, err
		}
	}
	pub, err := srv.connect("core-latency-pub")
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()

	interval := time.Second / time.Duration(cfg.rate)
	total := int(cfg.duration / interval)
	payload := make([]byte, cfg.payload)
	unlock := lockPacer()
	start := time.Since(base)
	sent := 0
	for i := 0; i < total && ctx.Err() == nil; i++ {
		sched := start + time.Duration(i)*interval
		now := time.Since(base)
		if wait := sched - now; wait > 0 {
			sleepFor(wait)
			now = time.Since(base)
		}
		binary.LittleEndian.PutUint64(payload[0:8], uint64(sched))
		binary.LittleEndian.PutUint64(payload[8:16], uint64(now))
		if err := pub.Publish(subject, payload); err != nil {
			unlock()
			return Result{}, err
		}
		sent++
	}
	unlock()
	if err := pub.Flush(); err != nil {
		return Result{}, err
	}
	sendElapsed := time.Since(base) - start

	received := func() int {
		n := 0
		for _, s := range subs {
			s.mu.Lock()
			n += s.mu.received
			s.mu.Unlock()
		}
		return n
	}
	expected := sent * fanout
	delivered := waitDelivered(ctx, expected, received)
	elapsed := time.Since(base) - start

	merged := hdrhistogram.New(1, int64(maxLatency), 3)
	fromSend := hdrhistogram.New(1, int64(maxLatency), 3)
	for _, s := range subs {
		s.mu.Lock()
		merged.Merge(s.mu.hist)
		fromSend.Merge(s.mu.fromSend)
		s.mu.Unlock()
	}
	return Result{
		System:   "nats",
		Scenario: "core-latency",
		Params: map[string]any{
			"payload":     cfg.payload,
			"fanout":      fanout,
			"rate":        cfg.rate,
			"delivery":    "at most once",
			"duration_ms": cfg.duration.Milliseconds(),
			"warmup_ms":   warmup.Milliseconds(),
		},
		RecordsPerSec:         float64(sent) / sendElapsed.Seconds(),
		DeliveriesPerSec:      float64(delivered) / elapsed.Seconds(),
		LatencyMicros:         summarize(merged),
		LatencyFromSendMicros: summarize(fromSend),
		Counts: map[string]int{
			"published":           sent,
			"deliveries":          delivered,
			"deliveries_expected": expected,
			"samples":             int(merged.TotalCount()),
		},
		ElapsedMillis: millis(elapsed),
	}, nil
}

// summarize reports a nanosecond histogram's percentiles in microseconds.
func summarize(h *hdrhistogram.Histogram) *Latency {
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return &Latency{
		P50:  us(h.ValueAtQuantile(50)),
		P90:  us(h.ValueAtQuantile(90)),
		P99:  us(h.ValueAtQuantile(99)),
		P999: us(h.ValueAtQuantile(99.9)),
		Max:  us(h.Max()),
	}
}
