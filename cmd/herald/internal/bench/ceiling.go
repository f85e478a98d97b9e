package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/storage"
)

// Defaults of `herald bench ceiling`.
const (
	// defaultCeilingDuration is how long each measurement runs.
	defaultCeilingDuration = 2 * time.Second
	// defaultGroupCommit is the batches per Badger commit: what the
	// storage writer gathers under load.
	defaultGroupCommit = 64
	// recordFraming approximates the bytes a stored record adds to its
	// payload (storage's BenchmarkBadgerCommit uses the same).
	recordFraming = 3
)

// ceilingResult is the ceiling scenario's machine-readable result.
type ceilingResult struct {
	Scenario string `json:"scenario"`
	// Badger is the raw storage ceiling.
	Badger badgerCeiling `json:"badger"`
	// QUIC is the raw transport ceiling.
	QUIC quicCeiling `json:"quic"`
	// HeraldPublish is Herald's durable publish cell of the same shape as
	// Badger's batches, when run (--publish).
	HeraldPublish *publishCell `json:"herald_publish,omitempty"`
	// HeraldFractionOfBadger is HeraldPublish's records/s over Badger's
	// (the same shape, so also the payload bytes/s ratio; issue 16 target 7c: ≥ 0.80).
	HeraldFractionOfBadger float64 `json:"herald_fraction_of_badger,omitempty"`
	// NodeProcess is true when the Herald publish cell's node ran as its
	// own process (--in-process=false).
	NodeProcess bool `json:"node_process"`
}

// badgerCeiling is the synced group-commit append rate of storage's Badger
// log, with the node's default Badger options, from one goroutine.
type badgerCeiling struct {
	BatchesPerCommit int `json:"batches_per_commit"`
	BatchRecords     int `json:"batch_records"`
	PayloadBytes     int `json:"payload_bytes"`
	// StoredBatchBytes is the Records bytes of one stored batch (payloads
	// plus approximate framing).
	StoredBatchBytes int     `json:"stored_batch_bytes"`
	Commits          int64   `json:"commits"`
	Seconds          float64 `json:"seconds"`
	CommitsPerSec    float64 `json:"commits_per_sec"`
	RecordsPerSec    float64 `json:"records_per_sec"`
	// MBPerSec is payload bytes (10^6) per second, comparable with
	// publishCell.MBPerSec.
	MBPerSec float64 `json:"mb_per_sec"`
	// CommitLatency is the duration of one synced Commit.
	CommitLatency latencySummary `json:"commit_latency"`
}

func runCeiling(env *Env, args []string) int {
	f := newScenarioFlags("ceiling")
	// The raw Badger ceiling runs in this process, and the Herald cell's
	// fraction of it has always been measured with the node here too; a
	// child node costs both processes more CPU per record on a shared
	// machine (docs/benchmarks.md).
	f.nodeInProcessByDefault("run the Herald publish cell's node in this process, beside the raw Badger ceiling; false: a child herald node process, its CPU reported apart")
	d := f.fs.Duration("duration", defaultCeilingDuration, "length of each measurement")
	groupCommit := f.fs.Int("group-commit", defaultGroupCommit, "batches per Badger commit")
	batch := f.fs.Int("batch", 64, "records per batch (Badger and the Herald publish cell)")
	size := f.fs.Int("payload", 128, "payload bytes per record (Badger, Herald publish cell, QUIC frames)")
	publish := f.fs.Bool("publish", true, "also run Herald's durable publish cell of the same shape and print it as a fraction of the Badger ceiling")
	if code, ok := env.parse(f.fs, args); !ok {
		return code
	}
	if *d <= 0 || *groupCommit < 1 || *batch < 1 || *size < 1 {
		return env.usageError("ceiling", errors.New("--duration, --group-commit, --batch and --payload must be positive"))
	}
	dir, err := os.MkdirTemp("", "herald-bench-ceiling-")
	if err != nil {
		return env.fail("ceiling", err)
	}
	defer os.RemoveAll(dir)
	progress := newBenchProgress(env.Stderr, env.Terminal)
	defer progress.close()
	res := &ceilingResult{Scenario: "ceiling"}
	if res.Badger, err = benchBadgerCeiling(filepath.Join(dir, "badger"), progress, *groupCommit, *batch, *size, *d); err != nil {
		progress.close()
		return env.fail("ceiling", fmt.Errorf("badger: %w", err))
	}
	if res.QUIC, err = benchQUICCeiling(filepath.Join(dir, "tls"), progress, *size, *d); err != nil {
		progress.close()
		return env.fail("ceiling", fmt.Errorf("quic: %w", err))
	}
	progress.close()
	if *publish {
		s, err := env.open(context.Background(), "ceiling", *f.inProcess)
		if err != nil {
			return env.fail("ceiling", err)
		}
		cell, err := s.publishCell(true, *batch, *size, *d, defaultPublishInflight, 0)
		s.close()
		if err != nil {
			return env.fail("ceiling", fmt.Errorf("herald publish: %w", err))
		}
		res.HeraldPublish, res.NodeProcess = &cell, s.nodeProcess()
		if res.Badger.RecordsPerSec > 0 {
			res.HeraldFractionOfBadger = cell.RecordsPerSec / res.Badger.RecordsPerSec
		}
	}
	return writeReport(env.Stdout, *f.asJSON, res, func(w io.Writer) {
		b, q := res.Badger, res.QUIC
		fmt.Fprintf(w, "ceiling: %s per measurement\n", *d)
		fmt.Fprintf(w, "  badger synced commit, %d batches of %d x %s: %.0f records/s, %.1f MB/s payload, %.0f commits/s (commit %s)\n",
			b.BatchesPerCommit, b.BatchRecords, fmtBytes(b.PayloadBytes), b.RecordsPerSec, b.MBPerSec, b.CommitsPerSec, b.CommitLatency)
		fmt.Fprintf(w, "  quic loopback bulk, one stream:    %10.1f MB/s\n", q.BulkMBPerSec)
		fmt.Fprintf(w, "  quic framed writes of %s:        %10.0f frames/s (%.1f MB/s)\n", fmtBytes(q.FrameBytes), q.FramesPerSec, q.FramesMBPerSec)
		fmt.Fprintf(w, "  quic echo round trip of %s:      %s\n", fmtBytes(q.FrameBytes), q.EchoRTT)
		fmt.Fprintf(w, "  same, paced at %d/s:              %s\n", q.PacedEchoRate, q.PacedEchoRTT)
		if p := res.HeraldPublish; p != nil {
			fmt.Fprintf(w, "  herald %s publish:       %10.0f records/s, %.1f MB/s = %.2f of the badger ceiling (target >= 0.80); node %s ms, client %.0f ms per million records\n",
				p.name(), p.RecordsPerSec, p.MBPerSec, res.HeraldFractionOfBadger, p.nodeMs(), p.ClientCPUMsPerMillion)
		}
	})
}

// benchBadgerCeiling commits groupCommit batches of batch × size bytes
// (one shard, contiguous offsets) per synced Commit to a fresh Badger log
// in dir for d.
func benchBadgerCeiling(dir string, progress *benchProgress, groupCommit, batch, size int, d time.Duration) (badgerCeiling, error) {
	res := badgerCeiling{BatchesPerCommit: groupCommit, BatchRecords: batch, PayloadBytes: size,
		StoredBatchBytes: batch * (size + recordFraming)}
	l, err := storage.OpenBadger(storage.DefaultBadgerOptions(dir))
	if err != nil {
		return res, err
	}
	defer l.Close()
	records := make([]byte, res.StoredBatchBytes)
	for i := range records {
		records[i] = byte(i * 7)
	}
	appends := make([]storage.Append, groupCommit)
	hist := newLatencyHistogram()
	var done atomic.Int64
	progress.phase(fmt.Sprintf("badger %d x %dx%s per commit", groupCommit, batch, fmtBytes(size)), "records", &done, d)
	var next uint64
	start := time.Now()
	for time.Since(start) < d {
		for i := range appends {
			appends[i] = storage.Append{
				Shard: storage.ShardKey{Stream: 1, Shard: 0},
				Batch: storage.Batch{Base: next, Count: uint32(batch), Timestamp: time.Now().UnixNano(), Records: records},
			}
			next += uint64(batch)
		}
		t0 := time.Now()
		if err := l.Commit(appends, nil); err != nil {
			return res, err
		}
		recordLatency(hist, time.Since(t0))
		res.Commits++
		done.Add(int64(groupCommit * batch))
	}
	elapsed := time.Since(start).Seconds()
	recs := float64(res.Commits) * float64(groupCommit*batch)
	res.Seconds = elapsed
	res.CommitsPerSec = float64(res.Commits) / elapsed
	res.RecordsPerSec = recs / elapsed
	res.MBPerSec = recs * float64(size) / 1e6 / elapsed
	res.CommitLatency = summarize(hist)
	return res, nil
}
