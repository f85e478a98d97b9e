package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
)

// Defaults of `herald bench replay` (issue scenario 6: resume from offset 0
// of a 1,000,000-record shard).
const (
	defaultReplayRecords  = 1_000_000
	defaultReplayPayload  = 128
	defaultReplayBatch    = 64
	defaultReplayInflight = 256
	// defaultReplayQueue is the subscription queue asked for, in batches;
	// the node clamps it to subscriber_queue_capacity_max (4096 by default).
	defaultReplayQueue = 4096
	// defaultReplayTimeout bounds the whole run.
	defaultReplayTimeout = 10 * time.Minute
)

// replayResult is the replay scenario's machine-readable result.
type replayResult struct {
	Scenario string `json:"scenario"`
	// Records is how many records the shard holds and the replay read.
	Records      int64 `json:"records"`
	PayloadBytes int   `json:"payload_bytes"`
	// BatchRecords and Inflight shape the fill: records per publish and
	// most publishes unacked.
	BatchRecords int `json:"batch_records"`
	Inflight     int `json:"inflight"`
	// Durable is always true: replay reads a durable shard from storage.
	Durable bool `json:"durable"`
	// QueueCapacity is the subscription queue the node granted, in batches.
	QueueCapacity uint32 `json:"queue_capacity"`
	// Fill is publishing the shard, from the first publish to the last ack.
	Fill replayRate `json:"fill"`
	// Replay is from the Subscribe call to the last record's Next.
	Replay replayRate `json:"replay"`
	// FirstRecordMillis is from the Subscribe call to the first record.
	FirstRecordMillis float64 `json:"first_record_ms"`
	// Resumes counts the subscription's automatic resubscriptions after
	// the node ended it as lagged (0 when the reader kept up).
	Resumes int `json:"resumes"`
	// Verified is true when every offset from 0 to Records-1 arrived once,
	// in order, with its payload's length.
	Verified bool `json:"verified"`
	// NodeProcess is true when the node ran as its own process (the
	// default): the phases' node_cpu_* figures are then its own.
	NodeProcess bool `json:"node_process"`
}

// replayRate is one timed phase of the replay scenario.
type replayRate struct {
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	// MBPerSec is payload bytes (10^6) per second.
	MBPerSec float64 `json:"mb_per_sec"`
	// CPU is the node's and the clients' CPU over the phase, per million
	// records acked (fill) or read (replay).
	CPU
}

// newReplayRate returns the rate of records of size bytes in d.
func newReplayRate(records int64, size int, d time.Duration) replayRate {
	secs := d.Seconds()
	if secs <= 0 {
		return replayRate{}
	}
	return replayRate{Seconds: secs, RecordsPerSec: float64(records) / secs,
		MBPerSec: float64(records) * float64(size) / 1e6 / secs}
}

func runReplay(env *Env, args []string) int {
	f := newScenarioFlags("replay")
	records := f.fs.Int64("records", defaultReplayRecords, "records in the shard to replay")
	size := f.fs.Int("size", defaultReplayPayload, "payload bytes per record")
	batch := f.fs.Int("batch", defaultReplayBatch, "records per publish while filling")
	inflight := f.fs.Int("inflight", defaultReplayInflight, "most fill publishes unacked at once")
	queue := f.fs.Uint("queue", defaultReplayQueue, "subscription queue to ask for, in batches (the node clamps it)")
	timeout := f.fs.Duration("timeout", defaultReplayTimeout, "bound on the whole run")
	if code, ok := env.parse(f.fs, args); !ok {
		return code
	}
	if *records < 1 || *size < 1 || *batch < 1 || *inflight < 1 || *timeout <= 0 || *queue > 1<<32-1 {
		return env.usageError("replay", errors.New("--records, --size, --batch, --inflight and --timeout must be positive"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	s, err := env.open(ctx, "replay", *f.inProcess)
	if err != nil {
		return env.fail("replay", err)
	}
	defer s.close()
	res, err := s.replay(ctx, *records, *size, *batch, *inflight, uint32(*queue))
	if err != nil {
		return s.fail(err)
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "replay: one durable shard of %d x %s records, read from offset 0 by one subscriber (queue %d batches), %s\n",
			res.Records, fmtBytes(res.PayloadBytes), res.QueueCapacity, s.nodeNote())
		fmt.Fprintf(w, "  %-8s %12s %8s %s\n", "", "records/s", "MB/s", cpuHeader)
		fmt.Fprintf(w, "  fill:    %12.0f %8.1f %s  (%d per publish, %d in flight, %.2fs)\n",
			res.Fill.RecordsPerSec, res.Fill.MBPerSec, res.Fill.columns(), res.BatchRecords, res.Inflight, res.Fill.Seconds)
		fmt.Fprintf(w, "  replay:  %12.0f %8.1f %s  (%.2fs; first record after %s; %d resumes)\n",
			res.Replay.RecordsPerSec, res.Replay.MBPerSec, res.Replay.columns(), res.Replay.Seconds, fmtMicros(res.FirstRecordMillis*1000), res.Resumes)
		fmt.Fprintf(w, "  every offset once, in order: %t\n", res.Verified)
	})
}

// replay fills a fresh durable one-shard stream with records of size
// bytes, then reads them all back from offset 0 with a new client.
func (s *session) replay(ctx context.Context, records int64, size, batch, inflight int, queue uint32) (*replayResult, error) {
	res := &replayResult{Scenario: "replay", Records: records, PayloadBytes: size,
		BatchRecords: batch, Inflight: inflight, Durable: true, NodeProcess: s.nodeProcess()}
	stream := client.StreamName{Tenant: "bench", Namespace: "replay", Stream: "replay"}
	if err := s.replayFill(ctx, stream, res); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	if err := s.replayRead(ctx, stream, res, queue); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	res.Verified = true
	return res, nil
}

// replayFill creates stream (durable, one shard) and publishes res.Records
// to it in batches, keeping up to res.Inflight unacked, and sets res.Fill
// from the first publish to the last ack. It fails unless the shard starts
// at offset 0 and ends at res.Records.
func (s *session) replayFill(ctx context.Context, stream client.StreamName, res *replayResult) error {
	c, err := s.node.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		return err
	}
	payloads := randomPayloads(res.BatchRecords, res.PayloadBytes)
	// Each ack is checked in issue order: acks on one shard arrive in
	// order, so publish k must be acked at the offset of the records
	// before it.
	p := startPipeline(ctx, c, stream, res.Inflight, func(q pipelined, ack client.PublishAck) error {
		if ack.Shard != 0 || ack.Offset != uint64(q.first) || ack.Count != q.n {
			return fmt.Errorf("%w: publish of records [%d, %d) acked as %d at shard %d offset %d", errReplayOrder, q.first, q.first+int64(q.n), ack.Count, ack.Shard, ack.Offset)
		}
		return nil
	})
	defer p.finish()
	s.progress.phase("replay: fill", "records", &p.acked, 0)
	m, err := s.startMeter()
	if err != nil {
		return err
	}
	start := time.Now()
	for p.sent < res.Records {
		k := int(min(int64(res.BatchRecords), res.Records-p.sent))
		if err := p.publish(ctx, payloads[:k]); err != nil {
			return err
		}
	}
	if err := p.finish(); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if got := p.acked.Load(); got != res.Records {
		return fmt.Errorf("%w: %d of %d records acked", errLost, got, res.Records)
	}
	res.Fill = newReplayRate(res.Records, res.PayloadBytes, elapsed)
	res.Fill.CPU, err = m.stop(res.Records)
	return err
}

// errReplayOrder reports a record delivered out of order, twice or with the
// wrong shape.
var errReplayOrder = errors.New("replay out of order")

// replayRead subscribes to stream's shard 0 from offset 0 with a new client
// and reads res.Records records, each at the next offset, recording the
// rate, the first record's delay, the granted queue and the resumes in res.
func (s *session) replayRead(ctx context.Context, stream client.StreamName, res *replayResult, queue uint32) error {
	c, err := s.node.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var read atomic.Int64
	s.progress.phase("replay: read", "records", &read, 0)
	m, err := s.startMeter()
	if err != nil {
		return err
	}
	start := time.Now()
	sub, err := c.Subscribe(ctx, stream, client.WithShard(0), client.WithStartOffset(0), client.WithQueueCapacity(queue), client.WithAutoResume())
	if err != nil {
		return err
	}
	defer sub.Close()
	res.QueueCapacity = sub.QueueCapacity()
	for next := int64(0); next < res.Records; next++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			return fmt.Errorf("after %d records: %w", next, err)
		}
		if next == 0 {
			res.FirstRecordMillis = float64(time.Since(start).Microseconds()) / 1000
		}
		if ev.Shard != 0 || ev.Offset != uint64(next) || len(ev.Payload) != res.PayloadBytes {
			return fmt.Errorf("%w: record %d arrived as shard %d offset %d with %d bytes", errReplayOrder, next, ev.Shard, ev.Offset, len(ev.Payload))
		}
		if next&1023 == 0 {
			read.Store(next)
		}
	}
	res.Replay = newReplayRate(res.Records, res.PayloadBytes, time.Since(start))
	if res.Replay.CPU, err = m.stop(res.Records); err != nil {
		return err
	}
	read.Store(res.Records)
	res.Resumes = sub.Resumes()
	return nil
}
