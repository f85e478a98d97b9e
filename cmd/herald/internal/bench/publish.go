package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/heraldmq/herald/client"
)

// Defaults of `herald bench publish`.
const (
	// defaultPublishCell is how long each cell of the matrix publishes.
	defaultPublishCell = 2 * time.Second
	// defaultPublishInflight is how many publishes a batch cell keeps
	// unacked: the node's publish window.
	defaultPublishInflight = 256
	// defaultSingleInflight is the unacked publishes of the single-record
	// cells, one cell each: 256 (the node's publish window), and 4000,
	// what nats.go's PublishAsync allows by default (its
	// defaultAsyncPubAckInflight), the shape a NATS user's async publisher
	// has. herald-compare's js-publish runs at the same two.
	defaultSingleInflight = "256,4000"
)

// publishResult is the publish scenario's machine-readable result.
type publishResult struct {
	Scenario string `json:"scenario"`
	// CellSeconds is how long each cell published.
	CellSeconds float64 `json:"cell_seconds"`
	// Inflight is the most publishes a batch cell keeps unacked;
	// SingleInflight the single-record cells', one cell each.
	Inflight       int   `json:"inflight"`
	SingleInflight []int `json:"single_inflight"`
	// ClientInflightBytes is the client's bound on acked publish bytes in
	// flight (WithPublishInflightBytes): it, not Inflight, limits the
	// pipeline of large batches.
	ClientInflightBytes int64 `json:"client_inflight_bytes"`
	// NodeProcess is true when the node ran as its own process (the
	// default): the cells' node_cpu_* figures are then its own.
	NodeProcess bool `json:"node_process"`
	// Cells are the matrix, durable first, then by batch and payload.
	Cells []publishCell `json:"cells"`
}

// Publish modes of a cell.
const (
	// modeSingleAsync is one record per PublishAsync, up to Inflight
	// unacked: the peer of JetStream's async publish.
	modeSingleAsync = "single-async"
	// modeBatch is BatchRecords records per PublishAsync, acked as one.
	modeBatch = "batch"
)

// publishCell is one point of the publish matrix: one client publishing to
// a fresh one-shard stream, acked per batch, pipelined.
type publishCell struct {
	Durable      bool `json:"durable"`
	BatchRecords int  `json:"batch_records"`
	PayloadBytes int  `json:"payload_bytes"`
	// Mode is "single-async" for one record per PublishAsync (BatchRecords
	// 1), "batch" for more.
	Mode string `json:"mode"`
	// Inflight is the most publishes (PublishAsync calls) unacked at once.
	Inflight int `json:"inflight"`
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
	// CPU is the node's and the clients' CPU over the cell, per million
	// acked records.
	CPU
}

// name is the cell's label, as in "durable 64x128B".
func (c publishCell) name() string {
	return publishCellName(c.Durable, c.BatchRecords, c.PayloadBytes)
}

// publishMode is the mode of cells of batch records per publish.
func publishMode(batch int) string {
	if batch == 1 {
		return modeSingleAsync
	}
	return modeBatch
}

// modeLabel says how the cell published, for the summary.
func (c publishCell) modeLabel() string {
	if c.Mode == modeSingleAsync {
		return fmt.Sprintf("single-record async, %d in flight", c.Inflight)
	}
	return fmt.Sprintf("batches of %d, %d in flight", c.BatchRecords, c.Inflight)
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

func runPublish(env *Env, args []string) int {
	f := newScenarioFlags("publish")
	durableFlag := f.fs.String("durable", "both", "stream durability: true, false or both")
	batchFlag := f.fs.String("batch", "1,64", "comma-separated records per publish (1: single-record async publishes)")
	payloadFlag := f.fs.String("payload", "128,1k,16k", "comma-separated payload sizes (suffix k = KiB)")
	cell := f.fs.Duration("duration", defaultPublishCell, "how long each cell publishes")
	inflight := f.fs.Int("inflight", defaultPublishInflight, "most publishes unacked at once in a batch cell")
	singleFlag := f.fs.String("single-inflight", defaultSingleInflight, "comma-separated most publishes unacked at once in single-record cells, a cell each")
	inflightBytes := f.fs.Int64("client-inflight-bytes", 0, "client bound on publish bytes in flight (0: client default)")
	if code, ok := env.parse(f.fs, args); !ok {
		return code
	}
	durables, err := parseDurability(*durableFlag)
	if err != nil {
		return env.usageError("publish", err)
	}
	batches, err := parseSizes(*batchFlag)
	if err != nil {
		return env.usageError("publish", fmt.Errorf("--batch: %w", err))
	}
	payloads, err := parseSizes(*payloadFlag)
	if err != nil {
		return env.usageError("publish", fmt.Errorf("--payload: %w", err))
	}
	singles, err := parseFanouts(*singleFlag)
	if err != nil {
		return env.usageError("publish", fmt.Errorf("--single-inflight: %w", err))
	}
	if *inflight < 1 || *cell <= 0 {
		return env.usageError("publish", errors.New("--inflight and --duration must be positive"))
	}
	s, err := env.open(context.Background(), "publish", *f.inProcess)
	if err != nil {
		return env.fail("publish", err)
	}
	defer s.close()
	res := &publishResult{Scenario: "publish", CellSeconds: cell.Seconds(), Inflight: *inflight, SingleInflight: singles,
		ClientInflightBytes: *inflightBytes, NodeProcess: s.nodeProcess()}
	if res.ClientInflightBytes <= 0 {
		res.ClientInflightBytes = client.DefaultPublishInflightBytes
	}
	for _, durable := range durables {
		for _, batch := range batches {
			inflights := []int{*inflight}
			if batch == 1 {
				inflights = singles
			}
			for _, size := range payloads {
				for _, n := range inflights {
					c, err := s.publishCell(durable, batch, size, *cell, n, *inflightBytes)
					if err != nil {
						return s.fail(fmt.Errorf("%s, %d in flight: %w", publishCellName(durable, batch, size), n, err))
					}
					res.Cells = append(res.Cells, c)
				}
			}
		}
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "publish: one client, one shard, acked per publish, up to %d MiB in flight, %s per cell, %s\n",
			res.ClientInflightBytes>>20, *cell, s.nodeNote())
		fmt.Fprintf(w, "  %-20s %-36s %12s %10s %s   %s\n", "cell", "mode", "records/s", "MB/s", cpuHeader, "ack latency")
		for _, c := range res.Cells {
			fmt.Fprintf(w, "  %-20s %-36s %12.0f %10.1f %s   %s\n", c.name(), c.modeLabel(), c.RecordsPerSec, c.MBPerSec, c.columns(), c.AckLatency)
			if c.Commits > 0 {
				fmt.Fprintf(w, "  %-20s %.0f commits/s of %.1f batches each\n", "", c.CommitsPerSec, c.BatchesPerCommit)
			}
		}
	})
}

// publishCell publishes batches of batch × size bytes to a fresh one-shard
// stream for d, keeping up to inflight unacked, and deletes the stream
// afterwards. A batch of 1 is single-record async publishing.
func (s *session) publishCell(durable bool, batch, size int, d time.Duration, inflight int, inflightBytes int64) (publishCell, error) {
	cell := publishCell{Durable: durable, BatchRecords: batch, PayloadBytes: size, Mode: publishMode(batch), Inflight: inflight}
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	var opts []client.Option
	if inflightBytes > 0 {
		opts = append(opts, client.WithPublishInflightBytes(inflightBytes))
	}
	c, err := s.node.dial(ctx, opts...)
	if err != nil {
		return cell, err
	}
	defer c.Close()
	stream := client.StreamName{Tenant: "bench", Namespace: "publish",
		Stream: strings.NewReplacer(" ", "-").Replace(cell.name())}
	drop, err := freshStream(ctx, c, stream, client.StreamConfig{Shards: 1, Durable: durable})
	if err != nil {
		return cell, err
	}
	defer drop()
	payloads := randomPayloads(batch, size)
	// One publish outside the clock: the client describes the stream and
	// opens its publish stream.
	if _, err := c.PublishBatch(ctx, stream, payloads); err != nil {
		return cell, err
	}

	// The waiter owns the histogram until finish.
	hist := newLatencyHistogram()
	p := startPipeline(ctx, c, stream, inflight, func(q pipelined, _ client.PublishAck) error {
		recordLatency(hist, time.Since(q.sent))
		return nil
	})
	defer p.finish()
	s.progress.phase("publish "+cell.name(), "records", &p.acked, d)
	// The commits and the batches they carried, before and after.
	commitMetrics := []string{"herald_storage_commits_total", "herald_storage_committed_batches_total"}
	before, err := s.metrics(ctx, commitMetrics...)
	if err != nil {
		return cell, err
	}
	m, err := s.startMeter()
	if err != nil {
		return cell, err
	}
	start := time.Now()
	for time.Since(start) < d {
		if err := p.publish(ctx, payloads); err != nil {
			return cell, err
		}
		cell.Batches++
	}
	if err := p.finish(); err != nil {
		return cell, err
	}
	elapsed := time.Since(start).Seconds()
	cell.Records = cell.Batches * int64(batch)
	if got := p.acked.Load(); got != cell.Records {
		return cell, fmt.Errorf("%w: %d of %d published records acked", errLost, got, cell.Records)
	}
	if cell.CPU, err = m.stop(cell.Records); err != nil {
		return cell, err
	}
	cell.Seconds = elapsed
	cell.RecordsPerSec = float64(cell.Records) / elapsed
	cell.BatchesPerSec = float64(cell.Batches) / elapsed
	cell.MBPerSec = float64(cell.Records) * float64(size) / 1e6 / elapsed
	cell.AckLatency = summarize(hist)
	after, err := s.metrics(ctx, commitMetrics...)
	if err != nil {
		return cell, err
	}
	if commits := after[0] - before[0]; commits > 0 {
		cell.Commits = int64(commits)
		cell.CommitsPerSec = commits / elapsed
		cell.BatchesPerCommit = (after[1] - before[1]) / commits
	}
	return cell, nil
}
