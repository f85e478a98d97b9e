package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// drainQuiet is how long the fanout and latency scenarios wait without any
// new delivery before deciding the rest were dropped.
const drainQuiet = time.Second

// fanoutSubscriber counts the records one subscriber receives. Its fields
// are written by the subscription's callback goroutine and read by the
// scenario's goroutine.
type fanoutSubscriber struct {
	nc       *nats.Conn         // its own connection
	sub      *nats.Subscription // its subscription to the bench subject
	received atomic.Int64       // records received
	lastNano atomic.Int64       // nanoseconds from base to the latest receipt
	slow     atomic.Int64       // slow-consumer errors reported on its connection
}

// runCoreFanout runs the core fan-out scenario once per configured fanout.
func runCoreFanout(ctx context.Context, cfg config) ([]Result, error) {
	var results []Result
	for _, fanout := range cfg.fanouts {
		r, err := coreFanout(ctx, cfg, fanout)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

// coreFanout publishes to one subject with fanout subscribers, each on its own
// connection, for cfg.duration. The publisher never flushes per record: the
// client buffers and writes when its buffer fills. Records/s is measured at
// the publisher (up to its final flush); deliveries/s at the subscribers, from
// the start to the last delivery.
func coreFanout(ctx context.Context, cfg config, fanout int) (Result, error) {
	srv, err := startServer()
	if err != nil {
		return Result{}, err
	}
	defer srv.Close()

	const subject = "bench.core"
	base := time.Now() // receipt times are nanoseconds since base (monotonic)
	subs := make([]*fanoutSubscriber, fanout)
	defer func() {
		for _, s := range subs {
			if s != nil {
				s.nc.Close()
			}
		}
	}()
	for i := range subs {
		s := &fanoutSubscriber{}
		s.nc, err = srv.connect("core-fanout-sub", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) { s.slow.Add(1) }))
		if err != nil {
			return Result{}, err
		}
		subs[i] = s
		s.sub, err = s.nc.Subscribe(subject, func(*nats.Msg) {
			s.received.Add(1)
			s.lastNano.Store(int64(time.Since(base)))
		})
		if err != nil {
			return Result{}, err
		}
		if err := s.nc.Flush(); err != nil { // the server has the interest before we publish
			return Result{}, err
		}
	}
	pub, err := srv.connect("core-fanout-pub")
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()

	payload := make([]byte, cfg.payload)
	published := 0
	start := time.Since(base)
	for time.Since(base)-start < cfg.duration && ctx.Err() == nil {
		for range 256 {
			if err := pub.Publish(subject, payload); err != nil {
				return Result{}, err
			}
		}
		published += 256
	}
	if err := pub.Flush(); err != nil {
		return Result{}, err
	}
	pubElapsed := time.Since(base) - start

	expected := published * fanout
	delivered := waitDelivered(ctx, expected, func() int {
		n := 0
		for _, s := range subs {
			n += int(s.received.Load())
		}
		return n
	})
	var last time.Duration
	dropped, slow := 0, 0
	for _, s := range subs {
		last = max(last, time.Duration(s.lastNano.Load())-start)
		d, _ := s.sub.Dropped()
		dropped += d
		slow += int(s.slow.Load())
	}

	return Result{
		System:   "nats",
		Scenario: "core-fanout",
		Params: map[string]any{
			"payload":     cfg.payload,
			"fanout":      fanout,
			"delivery":    "at most once",
			"duration_ms": cfg.duration.Milliseconds(),
		},
		RecordsPerSec:    float64(published) / pubElapsed.Seconds(),
		DeliveriesPerSec: float64(delivered) / last.Seconds(),
		Counts: map[string]int{
			"published":             published,
			"deliveries":            delivered,
			"deliveries_expected":   expected,
			"client_dropped":        dropped,
			"slow_consumer_reports": slow,
		},
		ElapsedMillis: millis(last),
	}, nil
}

// waitDelivered polls count until it reaches expected, stops growing for
// drainQuiet, or ctx ends, and returns the last count.
func waitDelivered(ctx context.Context, expected int, count func() int) int {
	n := count()
	lastGrowth := time.Now()
	for n < expected && time.Since(lastGrowth) < drainQuiet && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		if m := count(); m > n {
			n, lastGrowth = m, time.Now()
		}
	}
	return n
}
