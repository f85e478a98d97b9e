package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errAckFloor is returned when the consumer's ack floor does not reach the
// last record in time.
var errAckFloor = errors.New("herald-compare: ack floor did not reach the last record")

// runJSConsume pre-publishes cfg.messages records into a file-backed stream,
// then consumes them through a durable pull consumer with explicit acks,
// acking every record. The clock (and the CPU window) runs from the first
// pull until the server reports all of them acked.
func runJSConsume(ctx context.Context, e *env, sc scenario) ([]Result, error) {
	cfg := e.cfg
	srv, err := e.startServer(ctx, sc.opts)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	nc, err := srv.connect("js-consume")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.maxPending[0]))
	if err != nil {
		return nil, err
	}
	stream, err := js.CreateStream(ctx, benchStream())
	if err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}

	// Pre-publish in the js-publish batch shape.
	p := &asyncPublisher{js: js, subject: "bench.js", payload: make([]byte, cfg.payload), batch: cfg.batch, maxPending: cfg.maxPending[0]}
	for p.acked+p.pending < cfg.messages {
		p.batch = min(cfg.batch, cfg.messages-p.acked-p.pending)
		if err := p.publishBatch(ctx); err != nil {
			return nil, err
		}
	}
	if err := p.drain(ctx); err != nil {
		return nil, err
	}

	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   "bench",
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer: %w", err)
	}

	cpuStart, err := srv.sampleCPU()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(cfg.pull))
	if err != nil {
		return nil, fmt.Errorf("pull: %w", err)
	}
	consumed, missedHeartbeats := 0, 0
	for consumed < cfg.messages {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if errors.Is(err, jetstream.ErrNoHeartbeat) && ctx.Err() == nil {
			// Not terminal: the iterator has dropped its pending pull and
			// pulls again (seen on a loaded 2-core machine).
			missedHeartbeats++
			continue
		}
		if err != nil {
			it.Stop()
			return nil, fmt.Errorf("next after %d records: %w", consumed, err)
		}
		if err := msg.Ack(); err != nil {
			it.Stop()
			return nil, fmt.Errorf("ack: %w", err)
		}
		consumed++
	}
	it.Stop()
	if err := waitAckFloor(ctx, cons, uint64(cfg.messages)); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	cpuEnd, err := srv.sampleCPU()
	if err != nil {
		return nil, err
	}

	rate := float64(consumed) / elapsed.Seconds()
	r := sc.result(e)
	maps.Copy(r.Params, map[string]any{
		"messages":    cfg.messages,
		"pull":        cfg.pull,
		"ack":         "explicit, per record",
		"storage":     "file",
		"cpu_records": "consumed",
	})
	r.RecordsPerSec = rate
	r.DeliveriesPerSec = rate
	r.Counts = map[string]int{"consumed": consumed, "missed_heartbeats": missedHeartbeats}
	r.ElapsedMillis = millis(elapsed)
	setCPU(&r, cpuStart, cpuEnd, consumed)
	return []Result{r}, nil
}

// waitAckFloor polls the consumer until its ack floor reaches seq.
func waitAckFloor(ctx context.Context, cons jetstream.Consumer, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer info: %w", err)
		}
		if info.AckFloor.Consumer >= seq {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (at %d of %d)", errAckFloor, info.AckFloor.Consumer, seq)
		case <-time.After(time.Millisecond):
		}
	}
}
