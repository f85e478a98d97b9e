package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
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
}

// replayRate is one timed phase of the replay scenario.
type replayRate struct {
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	// MBPerSec is payload bytes (10^6) per second.
	MBPerSec float64 `json:"mb_per_sec"`
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

func runBenchReplay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("herald bench replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	records := fs.Int64("records", defaultReplayRecords, "records in the shard to replay")
	size := fs.Int("size", defaultReplayPayload, "payload bytes per record")
	batch := fs.Int("batch", defaultReplayBatch, "records per publish while filling")
	inflight := fs.Int("inflight", defaultReplayInflight, "most fill publishes unacked at once")
	queue := fs.Uint("queue", defaultReplayQueue, "subscription queue to ask for, in batches (the node clamps it)")
	timeout := fs.Duration("timeout", defaultReplayTimeout, "bound on the whole run")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if code, ok := parseStdFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if *records < 1 || *size < 1 || *batch < 1 || *inflight < 1 || *timeout <= 0 || *queue > 1<<32-1 {
		fmt.Fprintln(stderr, "herald bench replay: --records, --size, --batch, --inflight and --timeout must be positive")
		return 2
	}
	n, err := startBenchNode()
	if err != nil {
		fmt.Fprintln(stderr, "herald bench:", err)
		return 1
	}
	defer n.close()
	progress := newBenchProgress(stderr)
	defer progress.close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := benchReplay(ctx, n, progress, *records, *size, *batch, *inflight, uint32(*queue))
	progress.close()
	if err != nil {
		fmt.Fprintln(stderr, "herald bench replay:", err)
		return 1
	}
	if *asJSON {
		return writeBenchJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "replay: one durable shard of %d x %s records, read from offset 0 by one subscriber (queue %d batches)\n",
		res.Records, fmtBytes(res.PayloadBytes), res.QueueCapacity)
	fmt.Fprintf(stdout, "  fill:    %12.0f records/s %8.1f MB/s  (%d per publish, %d in flight, %.2fs)\n",
		res.Fill.RecordsPerSec, res.Fill.MBPerSec, res.BatchRecords, res.Inflight, res.Fill.Seconds)
	fmt.Fprintf(stdout, "  replay:  %12.0f records/s %8.1f MB/s  (%.2fs; first record after %s; %d resumes)\n",
		res.Replay.RecordsPerSec, res.Replay.MBPerSec, res.Replay.Seconds, fmtMicros(res.FirstRecordMillis*1000), res.Resumes)
	fmt.Fprintf(stdout, "  every offset once, in order: %t\n", res.Verified)
	return 0
}

// benchReplay fills a fresh durable one-shard stream of n with records of
// size bytes, then reads them all back from offset 0 with a new client.
func benchReplay(ctx context.Context, n *benchNode, progress *benchProgress, records int64, size, batch, inflight int, queue uint32) (*replayResult, error) {
	res := &replayResult{Scenario: "replay", Records: records, PayloadBytes: size,
		BatchRecords: batch, Inflight: inflight, Durable: true}
	stream := client.StreamName{Tenant: "bench", Namespace: "replay", Stream: "replay"}
	fill, err := replayFill(ctx, n, progress, stream, records, size, batch, inflight)
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	res.Fill = newReplayRate(records, size, fill)
	if err := replayRead(ctx, n, progress, stream, res, queue); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	res.Verified = true
	return res, nil
}

// replayFill creates stream (durable, one shard) and publishes records to
// it in batches, keeping up to inflight unacked. It returns the time from
// the first publish to the last ack, and fails unless the shard starts at
// offset 0 and ends at records.
func replayFill(ctx context.Context, n *benchNode, progress *benchProgress, stream client.StreamName, records int64, size, batch, inflight int) (time.Duration, error) {
	c, err := n.dial(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		return 0, err
	}
	payloads := make([][]byte, batch)
	for i := range payloads {
		payloads[i] = make([]byte, size)
		_, _ = rand.Read(payloads[i])
	}
	var acked atomic.Int64
	progress.phase("replay: fill", "records", &acked, 0)
	// The waiter checks each ack in issue order: acks on one shard arrive
	// in order, so batch k must start at the offset k's records precede.
	type pending struct {
		f     *client.PublishFuture
		first int64
		n     int
	}
	slots := make(chan struct{}, inflight)
	queue := make(chan pending, inflight)
	waitErr := make(chan error, 1)
	go func() {
		var first error
		for p := range queue {
			ack, err := p.f.Wait(ctx)
			<-slots
			switch {
			case first != nil:
			case err != nil:
				first = err
			case ack.Shard != 0 || ack.Offset != uint64(p.first) || ack.Count != p.n:
				first = fmt.Errorf("publish of records [%d, %d) acked as %d at shard %d offset %d", p.first, p.first+int64(p.n), ack.Count, ack.Shard, ack.Offset)
			default:
				acked.Add(int64(p.n))
			}
		}
		waitErr <- first
	}()
	start := time.Now()
	var sent int64
	for sent < records {
		k := int(min(int64(batch), records-sent))
		slots <- struct{}{}
		f, err := c.PublishAsync(ctx, stream, payloads[:k], client.WithAck(client.AckPerBatch))
		if err != nil {
			close(queue)
			<-waitErr
			return 0, err
		}
		queue <- pending{f: f, first: sent, n: k}
		sent += int64(k)
	}
	close(queue)
	if err := <-waitErr; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// errReplayOrder reports a record delivered out of order, twice or with the
// wrong shape.
var errReplayOrder = errors.New("replay out of order")

// replayRead subscribes to stream's shard 0 from offset 0 with a new client
// and reads res.Records records, each at the next offset, recording the
// rate, the first record's delay, the granted queue and the resumes in res.
func replayRead(ctx context.Context, n *benchNode, progress *benchProgress, stream client.StreamName, res *replayResult, queue uint32) error {
	c, err := n.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var read atomic.Int64
	progress.phase("replay: read", "records", &read, 0)
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
	read.Store(res.Records)
	res.Resumes = sub.Resumes()
	return nil
}
