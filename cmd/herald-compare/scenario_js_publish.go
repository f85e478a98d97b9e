package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errAckTimeout is returned when a JetStream publish ack does not arrive in time.
var errAckTimeout = errors.New("herald-compare: timed out waiting for publish acks")

// ackTimeout bounds the wait for one batch's acks.
const ackTimeout = 10 * time.Second

// benchStream is the one file-backed stream the JetStream scenarios use.
func benchStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:      "BENCH",
		Subjects:  []string{"bench.js"},
		Storage:   jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy,
		Replicas:  1,
	}
}

// runJSPublish publishes batches of cfg.batch records with PublishAsync for
// cfg.duration, keeping at most cfg.maxPending acks outstanding: once another
// batch would exceed that, it waits for the oldest batch's acks. Records count
// once acked, and the clock stops at the last ack.
func runJSPublish(ctx context.Context, cfg config) ([]Result, error) {
	srv, err := startServer()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	nc, err := srv.connect("js-publish")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.maxPending))
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, benchStream()); err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}

	p := &asyncPublisher{js: js, subject: "bench.js", payload: make([]byte, cfg.payload), batch: cfg.batch, maxPending: cfg.maxPending}
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for time.Now().Before(deadline) {
		if err := p.publishBatch(ctx); err != nil {
			return nil, err
		}
	}
	if err := p.drain(ctx); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)

	return []Result{{
		System:   "nats",
		Scenario: "js-publish",
		Params: map[string]any{
			"payload":     cfg.payload,
			"batch":       cfg.batch,
			"max_pending": cfg.maxPending,
			"storage":     "file",
			"sync":        "server default (periodic fsync, not before ack)",
			"duration_ms": cfg.duration.Milliseconds(),
		},
		RecordsPerSec: float64(p.acked) / elapsed.Seconds(),
		Counts:        map[string]int{"acked": p.acked, "batches": p.batches},
		ElapsedMillis: millis(elapsed),
	}}, nil
}

// asyncPublisher publishes batches with PublishAsync and tracks the batches
// whose acks are outstanding. It is used by one goroutine.
type asyncPublisher struct {
	js         jetstream.JetStream        // publishes
	subject    string                     // subject of every record
	payload    []byte                     // body of every record, never modified
	batch      int                        // records per batch
	maxPending int                        // most acks outstanding at once
	inFlight   [][]jetstream.PubAckFuture // batches awaiting acks, oldest first
	pending    int                        // records in inFlight
	free       [][]jetstream.PubAckFuture // emptied batch slices for reuse
	acked      int                        // records acked so far
	batches    int                        // batches fully acked so far
}

// publishBatch publishes one batch, first waiting for the oldest batches'
// acks if the new batch would exceed maxPending.
func (p *asyncPublisher) publishBatch(ctx context.Context) error {
	for p.pending+p.batch > p.maxPending && len(p.inFlight) > 0 {
		if err := p.awaitOldest(ctx); err != nil {
			return err
		}
	}
	var futures []jetstream.PubAckFuture
	if n := len(p.free); n > 0 {
		futures, p.free = p.free[n-1][:0], p.free[:n-1]
	}
	for range p.batch {
		f, err := p.js.PublishAsync(p.subject, p.payload)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		futures = append(futures, f)
	}
	p.inFlight = append(p.inFlight, futures)
	p.pending += len(futures)
	return nil
}

// drain waits for every outstanding batch's acks.
func (p *asyncPublisher) drain(ctx context.Context) error {
	for len(p.inFlight) > 0 {
		if err := p.awaitOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

// awaitOldest waits for every ack of the oldest outstanding batch.
func (p *asyncPublisher) awaitOldest(ctx context.Context) error {
	futures := p.inFlight[0]
	p.inFlight = p.inFlight[1:]
	timer := time.NewTimer(ackTimeout)
	defer timer.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish ack: %w", err)
		case <-timer.C:
			return errAckTimeout
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.pending -= len(futures)
	p.acked += len(futures)
	p.batches++
	clear(futures)
	p.free = append(p.free, futures)
	return nil
}

// millis converts a duration to fractional milliseconds.
func millis(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}
