package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go"
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

// runJSPublish publishes single records, each with its own PublishAsync
// (what a NATS user does, and the peer of Herald's single-record async
// publish), for cfg.duration once for each of cfg.maxPending, a row each,
// keeping at most that many acks outstanding: after every cfg.batch
// publishes it checks, and once another cfg.batch would exceed it, it waits
// for the oldest cfg.batch's acks. Records count once acked, and the clock
// (and the CPU window) stops at the last ack. Each run publishes to a fresh
// stream on the same server.
//
// The server's storage is nats-server's default (file storage, sync_interval
// 2 minutes): JetStream acks a record once it is written to the OS, before
// any fsync. js-publish-sync runs the server with sync_interval: always
// (SyncAlways), which fsyncs every write before its ack, as Herald's durable
// publish does.
func runJSPublish(ctx context.Context, e *env, sc scenario) ([]Result, error) {
	srv, err := e.startServer(ctx, sc.opts)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	nc, err := srv.connect("js-publish")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	var rows []Result
	for _, maxPending := range e.cfg.maxPending {
		r, err := jsPublishRun(ctx, e, sc, srv, nc, maxPending)
		if err != nil {
			return nil, fmt.Errorf("max pending %d: %w", maxPending, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// jsPublishRun is one row of runJSPublish: a fresh stream, published to
// with at most maxPending acks outstanding, deleted afterwards.
func jsPublishRun(ctx context.Context, e *env, sc scenario, srv *natsServer, nc *nats.Conn, maxPending int) (Result, error) {
	cfg := e.cfg
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		return Result{}, err
	}
	if _, err := js.CreateStream(ctx, benchStream()); err != nil {
		return Result{}, fmt.Errorf("create stream: %w", err)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), benchStream().Name)

	p := &asyncPublisher{js: js, subject: "bench.js", payload: make([]byte, cfg.payload), batch: cfg.batch, maxPending: maxPending}
	cpuStart, err := srv.sampleCPU()
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for time.Now().Before(deadline) {
		if err := p.publishBatch(ctx); err != nil {
			return Result{}, err
		}
	}
	if err := p.drain(ctx); err != nil {
		return Result{}, err
	}
	elapsed := time.Since(start)
	cpuEnd, err := srv.sampleCPU()
	if err != nil {
		return Result{}, err
	}

	r := sc.result(e)
	maps.Copy(r.Params, map[string]any{
		"records_per_publish": 1,
		"batch":               cfg.batch,
		"max_pending":         maxPending,
		"storage":             "file",
		"sync":                jsSyncParam(sc.opts.syncAlways),
		"duration_ms":         cfg.duration.Milliseconds(),
		"cpu_records":         "acked",
	})
	r.RecordsPerSec = float64(p.acked) / elapsed.Seconds()
	r.Counts = map[string]int{"acked": p.acked, "batches": p.batches}
	r.ElapsedMillis = millis(elapsed)
	setCPU(&r, cpuStart, cpuEnd, p.acked)
	return r, nil
}

// jsSyncParam says when the server fsyncs relative to its acks.
func jsSyncParam(syncAlways bool) string {
	if syncAlways {
		return "always (sync_interval: always): every write fsynced before its ack"
	}
	return "server default (sync_interval 2m): acked before fsync"
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
