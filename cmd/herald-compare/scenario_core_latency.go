package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
)

// maxLatency is the largest latency the histograms record; larger samples
// are clamped to it.
const maxLatency = time.Minute

// stampBytes is the payload prefix that carries a record's scheduled and
// actual send times.
const stampBytes = 16

// latencySubscriber records the publish → deliver latency one subscriber sees.
type latencySubscriber struct {
	mu struct {
		sync.Mutex
		hist     *hdrhistogram.Histogram // latency from the scheduled send, ns, warm-up excluded
		fromSend *hdrhistogram.Histogram // latency from the actual send, ns, warm-up excluded
		received int                     // records received, warm-up included
	}
}

// runCoreLatency runs the core latency scenario once per configured fanout.
func runCoreLatency(ctx context.Context, e *env, sc scenario) ([]Result, error) {
	var results []Result
	for _, fanout := range e.cfg.fanouts {
		r, err := coreLatency(ctx, e, sc, fanout)
		if err != nil {
			return nil, fmt.Errorf("fanout %d: %w", fanout, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// coreLatency publishes single records for cfg.duration to fanout
// subscribers that take turns on cfg.runConns(fanout) connections, at
// cfg.runRate(fanout) records/s: the rates and connections of `herald bench
// latency`. Record i is scheduled at start + i/rate and carries that
// scheduled time and its actual send time; a subscriber's latency sample is
// receipt time minus scheduled time, so time the publisher spends behind
// schedule counts too (coordinated omission). Latency from the actual send
// is reported beside it, so the pacer's own wake-up lag can be told apart
// from the broker's. The first tenth of the run, at most 200 ms, is a
// warm-up and is not recorded.
func coreLatency(ctx context.Context, e *env, sc scenario, fanout int) (Result, error) {
	cfg := e.cfg
	srv, err := e.startServer(ctx, sc.opts)
	if err != nil {
		return Result{}, err
	}
	defer srv.Close()

	const subject = "bench.latency"
	rate, nconns := cfg.runRate(fanout), cfg.runConns(fanout)
	base := time.Now() // every timestamp is nanoseconds since base (monotonic)
	warmup := min(cfg.duration/10, 200*time.Millisecond)
	conns := make([]*nats.Conn, nconns)
	defer func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	}()
	for i := range conns {
		if conns[i], err = srv.connect("core-latency-sub"); err != nil {
			return Result{}, err
		}
	}
	subs := make([]*latencySubscriber, fanout)
	for i := range subs {
		s := &latencySubscriber{}
		s.mu.hist = hdrhistogram.New(1, int64(maxLatency), 3)
		s.mu.fromSend = hdrhistogram.New(1, int64(maxLatency), 3)
		subs[i] = s
		_, err = conns[i%nconns].Subscribe(subject, func(m *nats.Msg) {
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
	}
	for _, nc := range conns {
		if err := nc.Flush(); err != nil { // the server has the interest before we publish
			return Result{}, err
		}
	}
	pub, err := srv.connect("core-latency-pub")
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()

	interval := time.Second / time.Duration(rate)
	total := int(cfg.duration / interval)
	payload := make([]byte, cfg.payload)
	cpuStart, err := srv.sampleCPU()
	if err != nil {
		return Result{}, err
	}
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
	cpuEnd, err := srv.sampleCPU()
	if err != nil {
		return Result{}, err
	}

	merged := hdrhistogram.New(1, int64(maxLatency), 3)
	fromSend := hdrhistogram.New(1, int64(maxLatency), 3)
	for _, s := range subs {
		s.mu.Lock()
		merged.Merge(s.mu.hist)
		fromSend.Merge(s.mu.fromSend)
		s.mu.Unlock()
	}
	r := sc.result(e)
	maps.Copy(r.Params, map[string]any{
		"fanout":         fanout,
		"connections":    nconns,
		"rate":           rate,
		"requested_rate": cfg.rate,
		"max_deliveries": cfg.maxDeliveries,
		"delivery":       "at most once",
		"duration_ms":    cfg.duration.Milliseconds(),
		"warmup_ms":      warmup.Milliseconds(),
		"cpu_records":    "deliveries",
	})
	r.RecordsPerSec = float64(sent) / sendElapsed.Seconds()
	r.DeliveriesPerSec = float64(delivered) / elapsed.Seconds()
	r.LatencyMicros = summarize(merged)
	r.LatencyFromSendMicros = summarize(fromSend)
	r.Counts = map[string]int{
		"published":           sent,
		"deliveries":          delivered,
		"deliveries_expected": expected,
		"samples":             int(merged.TotalCount()),
	}
	r.ElapsedMillis = millis(elapsed)
	setCPU(&r, cpuStart, cpuEnd, delivered)
	return r, nil
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
