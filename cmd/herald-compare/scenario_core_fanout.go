package main

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Pacing of the core-fanout publisher.
const (
	// fanoutPublishRound is how many records the publisher publishes
	// between looks at the clock and at its lead.
	fanoutPublishRound = 256
	// defaultFanoutMaxLead is the default --max-lead: the most
	// deliveries the publisher lets be outstanding (published × fanout −
	// received); past it, it waits for the subscribers. Without it the
	// publisher of a large fan-out ran tens of seconds of deliveries ahead
	// into the server's buffers (at fanout 1000 the drain outlasted the
	// client's one-minute write timeout); 262,144 is a fraction of a
	// second of deliveries at any fan-out, so the pipeline stays full.
	defaultFanoutMaxLead = 1 << 18
)

// drainQuiet is how long the fanout and latency scenarios wait without any
// new delivery before deciding the rest were dropped.
const drainQuiet = time.Second

// fanoutSubscriber counts the records one subscriber receives. Its fields
// are written by the subscription's callback goroutine and its connection's
// handlers, and read by the scenario's goroutine.
type fanoutSubscriber struct {
	nc       *nats.Conn         // its own connection
	sub      *nats.Subscription // its subscription to the bench subject
	received atomic.Int64       // records received
	lastNano atomic.Int64       // nanoseconds from base to the latest receipt
	slow     atomic.Int64       // slow-consumer errors reported on its connection
	lost     atomic.Int64       // disconnections (the server closes a slow consumer's connection)
}

// runCoreFanout runs the core fan-out scenario once per configured fanout.
func runCoreFanout(ctx context.Context, e *env, sc scenario) ([]Result, error) {
	var results []Result
	for _, fanout := range e.cfg.fanouts {
		r, err := coreFanout(ctx, e, sc, fanout)
		if err != nil {
			return nil, fmt.Errorf("fanout %d: %w", fanout, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// coreFanout publishes to one subject with fanout subscribers, each on its own
// connection, for cfg.duration. The publisher never flushes per record: the
// client buffers and writes when its buffer fills; it waits only while more
// than cfg.maxLead deliveries are outstanding. Records/s is measured at
// the publisher (up to its final flush); deliveries/s at the subscribers, from
// the start to the last delivery. CPU time is taken over the same window
// (ended once every delivery arrived, or the drain gave up) and divided by
// the deliveries.
func coreFanout(ctx context.Context, e *env, sc scenario, fanout int) (Result, error) {
	cfg := e.cfg
	srv, err := e.startServer(ctx, sc.opts)
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
		s.nc, err = srv.connect("core-fanout-sub",
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) { s.slow.Add(1) }),
			nats.DisconnectErrHandler(func(*nats.Conn, error) { s.lost.Add(1) }))
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

	delivered := func() int {
		n := 0
		for _, s := range subs {
			n += int(s.received.Load())
		}
		return n
	}
	payload := make([]byte, cfg.payload)
	published, leadWaits := 0, 0
	cpuStart, err := srv.sampleCPU()
	if err != nil {
		return Result{}, err
	}
	start := time.Since(base)
	for time.Since(base)-start < cfg.duration && ctx.Err() == nil {
		for range fanoutPublishRound {
			if err := pub.Publish(subject, payload); err != nil {
				return Result{}, err
			}
		}
		published += fanoutPublishRound
		for published*fanout-delivered() > cfg.maxLead && ctx.Err() == nil {
			leadWaits++
			time.Sleep(100 * time.Microsecond)
		}
	}
	if err := pub.Flush(); err != nil {
		return Result{}, err
	}
	pubElapsed := time.Since(base) - start

	expected := published * fanout
	got := waitDelivered(ctx, expected, delivered)
	cpuEnd, err := srv.sampleCPU()
	if err != nil {
		return Result{}, err
	}
	var last time.Duration
	dropped, slow, lost := 0, 0, 0
	for _, s := range subs {
		last = max(last, time.Duration(s.lastNano.Load())-start)
		d, _ := s.sub.Dropped()
		dropped += d
		slow += int(s.slow.Load())
		lost += int(s.lost.Load())
	}

	r := sc.result(e)
	maps.Copy(r.Params, map[string]any{
		"fanout":      fanout,
		"connections": fanout,
		"delivery":    "at most once",
		"duration_ms": cfg.duration.Milliseconds(),
		"cpu_records": "deliveries",
		"max_lead":    cfg.maxLead,
	})
	r.RecordsPerSec = float64(published) / pubElapsed.Seconds()
	r.DeliveriesPerSec = float64(got) / last.Seconds()
	r.Counts = map[string]int{
		"published":             published,
		"deliveries":            got,
		"deliveries_expected":   expected,
		"client_dropped":        dropped,
		"slow_consumer_reports": slow,
		"disconnected":          lost,
		"lead_waits":            leadWaits,
	}
	r.ElapsedMillis = millis(last)
	setCPU(&r, cpuStart, cpuEnd, got)
	return r, nil
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
