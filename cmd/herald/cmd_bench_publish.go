package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
)

// Defaults of `herald bench publish`.
const (
	// defaultPublishCell is how long each cell of the matrix publishes.
	defaultPublishCell = 2 * time.Second
	// defaultPublishInflight is how many publishes a cell keeps unacked:
	// the node's publish window.
	defaultPublishInflight = 256
)

// publishResult is the publish scenario's machine-readable result.
type publishResult struct {
	Scenario string `json:"scenario"`
	// CellSeconds is how long each cell published.
	CellSeconds float64 `json:"cell_seconds"`
	// Inflight is the most publishes a cell keeps unacked.
	Inflight int `json:"inflight"`
	// ClientInflightBytes is the client's bound on acked publish bytes in
	// flight (WithPublishInflightBytes): it, not Inflight, limits the
	// pipeline of large batches.
	ClientInflightBytes int64 `json:"client_inflight_bytes"`
	// Cells are the matrix, durable first, then by batch and payload.
	Cells []publishCell `json:"cells"`
}

// publishCell is one point of the publish matrix: one client publishing to
// a fresh one-shard stream, acked per batch, pipelined.
type publishCell struct {
	Durable      bool `json:"durable"`
	BatchRecords int  `json:"batch_records"`
	PayloadBytes int  `json:"payload_bytes"`
	// Records and Batches are what was published and acked.
	Records int64 `json:"records"`
	Batches int64 `json:"batches"`
	// Seconds is from the first publish to the last ack.
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	BatchesPerSec float64 `json:"batches_per_sec"`
	// MBPerSec is payload bytes (10^6) per second.
	MBPerSec float64 `json:"mb_per_sec"`
	// AckLatency is from the PublishAsync call to the batch's ack.
	AckLatency latencySummary `json:"ack_latency"`
	// Commits and BatchesPerCommit are the node's storage commits during
	// the cell (herald_storage_commits_total) and the batches each carried
	// on average: the group commit's shape, to set beside the Badger
	// ceiling's. Zero for ephemeral cells.
	Commits          int64   `json:"storage_commits"`
	CommitsPerSec    float64 `json:"storage_commits_per_sec"`
	BatchesPerCommit float64 `json:"batches_per_commit"`
}

// name is the cell's label, as in "durable 64x128B".
func (c publishCell) name() string {
	return publishCellName(c.Durable, c.BatchRecords, c.PayloadBytes)
}

func publishCellName(durable bool, batch, size int) string {
	kind := "ephemeral"
	if durable {
		kind = "durable"
	}
	return fmt.Sprintf("%s %dx%s", kind, batch, fmtBytes(size))
}

// fmtBytes formats a payload size: 128B, 1KiB, 16KiB.
func fmtBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

func runBenchPublish(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("herald bench publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	durableFlag := fs.String("durable", "both", "stream durability: true, false or both")
	batchFlag := fs.String("batch", "1,64", "comma-separated records per publish")
	payloadFlag := fs.String("payload", "128,1k,16k", "comma-separated payload sizes (suffix k = KiB)")
	cell := fs.Duration("duration", defaultPublishCell, "how long each cell publishes")
	inflight := fs.Int("inflight", defaultPublishInflight, "most publishes unacked at once")
	inflightBytes := fs.Int64("client-inflight-bytes", 0, "client bound on publish bytes in flight (0: client default)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if code, ok := parseStdFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	durables, err := parseDurability(*durableFlag)
	if err != nil {
		fmt.Fprintln(stderr, "herald bench publish:", err)
		return 2
	}
	batches, err := parseSizes(*batchFlag)
	if err != nil {
		fmt.Fprintln(stderr, "herald bench publish: --batch:", err)
		return 2
	}
	payloads, err := parseSizes(*payloadFlag)
	if err != nil {
		fmt.Fprintln(stderr, "herald bench publish: --payload:", err)
		return 2
	}
	if *inflight < 1 || *cell <= 0 {
		fmt.Fprintln(stderr, "herald bench publish: --inflight and --duration must be positive")
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
	res := &publishResult{Scenario: "publish", CellSeconds: cell.Seconds(), Inflight: *inflight, ClientInflightBytes: *inflightBytes}
	if res.ClientInflightBytes <= 0 {
		res.ClientInflightBytes = client.DefaultPublishInflightBytes
	}
	for _, durable := range durables {
		for _, batch := range batches {
			for _, size := range payloads {
				c, err := benchPublishCell(n, progress, durable, batch, size, *cell, *inflight, *inflightBytes)
				if err != nil {
					progress.close()
					fmt.Fprintf(stderr, "herald bench publish: %s: %v\n", publishCellName(durable, batch, size), err)
					return 1
				}
				res.Cells = append(res.Cells, c)
			}
		}
	}
	progress.close()
	if *asJSON {
		return writeBenchJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "publish: one client, one shard, acked per batch, up to %d (and %d MiB) in flight, %s per cell\n",
		res.Inflight, res.ClientInflightBytes>>20, *cell)
	fmt.Fprintf(stdout, "  %-20s %12s %10s   %s\n", "cell", "records/s", "MB/s", "ack latency")
	for _, c := range res.Cells {
		fmt.Fprintf(stdout, "  %-20s %12.0f %10.1f   %s\n", c.name(), c.RecordsPerSec, c.MBPerSec, c.AckLatency)
		if c.Commits > 0 {
			fmt.Fprintf(stdout, "  %-20s %.0f commits/s of %.1f batches each\n", "", c.CommitsPerSec, c.BatchesPerCommit)
		}
	}
	return 0
}

// benchPublishCell publishes batches of batch × size bytes to a fresh
// one-shard stream for d, keeping up to inflight unacked, and deletes the
// stream afterwards.
func benchPublishCell(n *benchNode, progress *benchProgress, durable bool, batch, size int, d time.Duration, inflight int, inflightBytes int64) (publishCell, error) {
	cell := publishCell{Durable: durable, BatchRecords: batch, PayloadBytes: size}
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	var opts []client.Option
	if inflightBytes > 0 {
		opts = append(opts, client.WithPublishInflightBytes(inflightBytes))
	}
	c, err := n.dial(ctx, opts...)
	if err != nil {
		return cell, err
	}
	defer c.Close()
	stream := client.StreamName{Tenant: "bench", Namespace: "publish",
		Stream: strings.NewReplacer(" ", "-").Replace(cell.name())}
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: durable}); err != nil {
		return cell, err
	}
	defer func() { _ = c.DeleteStream(context.Background(), stream) }()
	payloads := make([][]byte, batch)
	for i := range payloads {
		payloads[i] = make([]byte, size)
		_, _ = rand.Read(payloads[i])
	}
	// One publish outside the clock: the client describes the stream and
	// opens its publish stream.
	if _, err := c.PublishBatch(ctx, stream, payloads); err != nil {
		return cell, err
	}

	type pending struct {
		f     *client.PublishFuture
		start time.Time
	}
	var acked atomic.Int64
	progress.phase("publish "+cell.name(), "records", &acked, d)
	// The waiter owns the histogram. Acks on one shard arrive in order, so
	// waiting in issue order observes each one when it lands.
	hist := newLatencyHistogram()
	// slots holds one token per unacked publish, taken before PublishAsync
	// and returned once its ack is recorded.
	slots := make(chan struct{}, inflight)
	queue := make(chan pending, inflight)
	waitErr := make(chan error, 1)
	go func() {
		var first error
		for p := range queue {
			_, err := p.f.Wait(ctx)
			<-slots
			if err != nil {
				if first == nil {
					first = err
				}
				continue
			}
			recordLatency(hist, time.Since(p.start))
			acked.Add(int64(batch))
		}
		waitErr <- first
	}()
	commits0, committed0 := n.node.Metric("herald_storage_commits_total"), n.node.Metric("herald_storage_committed_batches_total")
	start := time.Now()
	for time.Since(start) < d {
		slots <- struct{}{}
		t0 := time.Now()
		f, err := c.PublishAsync(ctx, stream, payloads, client.WithAck(client.AckPerBatch))
		if err != nil {
			close(queue)
			<-waitErr
			return cell, err
		}
		queue <- pending{f: f, start: t0}
		cell.Batches++
	}
	close(queue)
	if err := <-waitErr; err != nil {
		return cell, err
	}
	elapsed := time.Since(start).Seconds()
	cell.Records = cell.Batches * int64(batch)
	cell.Seconds = elapsed
	cell.RecordsPerSec = float64(cell.Records) / elapsed
	cell.BatchesPerSec = float64(cell.Batches) / elapsed
	cell.MBPerSec = float64(cell.Records) * float64(size) / 1e6 / elapsed
	cell.AckLatency = summarize(hist)
	if commits := n.node.Metric("herald_storage_commits_total") - commits0; commits > 0 {
		cell.Commits = int64(commits)
		cell.CommitsPerSec = commits / elapsed
		cell.BatchesPerCommit = (n.node.Metric("herald_storage_committed_batches_total") - committed0) / commits
	}
	return cell, nil
}
