package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// Defaults of `herald pub`.
const (
	// defaultPubSize is the payload size --count generates without --size.
	defaultPubSize = 128
	// pubPipeline bounds the publishes waiting for their ack (the client's
	// byte budget bounds them too).
	pubPipeline = 1024
	// progressEvery is how often the --count progress bar is redrawn.
	progressEvery = 200 * time.Millisecond
)

// pubCmd is a parsed `herald pub` command line.
type pubCmd struct {
	conn *clientFlags
	name client.StreamName
	// messages are the MESSAGE arguments.
	messages []string
	// key routes every record (--key).
	key string
	// headers go on every record (-H key=value).
	headers client.Headers
	// ack is the ack mode (--ack).
	ack client.AckMode
	// batch is the records per publish (--batch).
	batch int
	// count and size generate count payloads of size bytes (--count, --size).
	count, size int
	// raw publishes all of standard input as one record (--raw).
	raw bool
	// conditional publishes every record as one batch, only at the tail
	// ifOffset (--if-offset).
	conditional bool
	ifOffset    uint64
	// producerID, when not 0, publishes through an idempotent
	// client.Producer with this id (--producer-id): one batch at a time,
	// and a batch sent again after a reconnect or a timeout is written
	// once.
	producerID uint64
	// json and yaml select the output (--output, --json).
	json, yaml bool
	// progress, when set, receives a progress bar for --count (a terminal's
	// stderr).
	progress io.Writer
	// stderr receives notes, such as a re-send of an idempotent batch.
	stderr io.Writer
}

func newPubCmd(env *cliEnv) *cobra.Command {
	var out outputFlags
	var (
		ack     string
		size    sizeFlag = defaultPubSize
		headers []string
	)
	cmd := &pubCmd{}
	c := &cobra.Command{
		Use:   "pub STREAM [MESSAGE...]",
		Short: "Publish records: the MESSAGE arguments, standard input, or generated ones",
		Long: `Publish records to a stream and print, for each record acknowledged, its shard and offset
("shard offset"; with --ack none, nothing).

The records are the MESSAGE arguments; without any, one record per line of standard input
(a line may be as long as the frame limit, --max-frame-bytes; a trailing \r is dropped); with
--raw, all of standard input as one record, byte for byte; with --count, N generated
records, followed by a summary (and, on a terminal, a progress bar with the rate).

--batch N publishes N records per request; every record's offset is printed.
--producer-id N publishes through an idempotent producer with id N (see below).
--if-offset N publishes every record as one batch, only if the key's shard's tail is N:
it prints "written at OFFSET", or "refused: tail is T" and exits with status 1.

A stream that does not exist is created on its first publish when the node has
auto_create_streams on (the dev default).

With --producer-id N every batch carries the producer id N and its sequence number on
its shard, so the node writes each batch exactly once: a batch the client sends again
after it reconnected to a restarted node, or that pub sends again after --timeout, is
answered with the offsets it was written at, and printed as if nothing had happened.
Batches go one at a time, each after the previous one's ack (--batch sets how many records
a batch holds); the ack mode is always batch, and --if-offset does not apply. A run goes
on from the producer's last sequence on the shard, which it asks the node for before its
first batch, so every run writes its records: re-running a command publishes them again.
Give each publisher that runs at the same time its own id.

With several --server addresses (every node of a cluster) pub talks to the cluster: each
batch goes to its shard's leader, always as an idempotent producer (--producer-id, else a
random id for the run), so a batch whose leader dies before it answers is sent again to
the next leader and written once; --ack batch only, and no --if-offset.

` + streamArgHelp,
		Example: `  herald pub orders "hello" "world"                 # prints 0 0 and 0 1
  seq 1 5 | herald pub orders --batch 5              # five records, one request
  herald pub orders -H source=web -H trace=abc "x"   # with headers
  herald pub acme/shop/images --raw < photo.jpg      # one binary record
  herald pub orders --count 200000 --size 1KiB       # generated load, with a summary
  herald pub orders --key k1 --if-offset 12 "tick"   # only if shard's tail is 12
  seq 1 1000 | herald pub orders --producer-id 7      # exactly once across node restarts
  seq 1 1000 | herald pub orders --server 127.0.0.1:7400,127.0.0.1:7410,127.0.0.1:7420  # to a cluster
  herald pub orders --producer-id 7 --count 100000 --batch 100`,
		Args: cobra.ArbitraryArgs,
	}
	cmd.conn = registerClientFlags(c.Flags())
	f := c.Flags()
	f.StringVar(&cmd.key, "key", "", "record `key`: records with one key go to one shard")
	f.StringArrayVarP(&headers, "header", "H", nil, "a header `key=value` on every record (repeatable)")
	f.StringVar(&ack, "ack", "batch", "ack `mode`: none, message (one publish and ack per record) or batch")
	f.IntVar(&cmd.batch, "batch", 1, "records per publish")
	f.IntVar(&cmd.count, "count", 0, "generate this many records instead of reading messages; prints a summary")
	f.Var(&size, "size", "payload bytes of each generated record, e.g. 128 or 1KiB (with --count)")
	f.BoolVar(&cmd.raw, "raw", false, "publish all of standard input as one record (binary safe)")
	f.Uint64Var(&cmd.ifOffset, "if-offset", 0, "publish every record as one batch, only if the key's shard's tail is this `offset`")
	f.Uint64Var(&cmd.producerID, "producer-id", 0, "publish through an idempotent producer with this `id` (at least 1): each batch written exactly once, also across reconnects")
	addOutputFlags(c, &out, `a line {"shard","offset"} per record (and "duplicate": true for one the node had written before a re-send, with --producer-id); with --count a summary object`)
	completeWords(c, "ack", "none", "message", "batch")
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := cmd.conn.resolve(c.Flags(), env); err != nil {
			return err
		}
		fm, err := out.resolve(c)
		if err != nil {
			return err
		}
		setFormat(fm, &cmd.json, &cmd.yaml)
		if len(args) == 0 {
			return usageErrorf("missing STREAM")
		}
		if cmd.name, err = parseStreamArg(args[0], cmd.conn.tenant); err != nil {
			return err
		}
		cmd.messages = args[1:]
		cmd.size = int(size)
		if cmd.ack, err = parseAckMode(ack); err != nil {
			return err
		}
		if cmd.headers, err = parseHeaders(headers); err != nil {
			return err
		}
		if err := cmd.check(c); err != nil {
			return err
		}
		if cmd.count > 0 && env.isTerminal(env.stderr) {
			cmd.progress = env.stderr
		}
		cmd.stderr = env.stderr
		return parsedOrRun(env, cmd, func() error {
			// Ctrl-C or SIGTERM stops publishing (what was acked is
			// printed) and lets the command end as usual, exporting its
			// --trace spans.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err := cmd.run(ctx, env.stdin, env.stdout)
			if err != nil && ctx.Err() != nil {
				return errors.New("interrupted: records after the last one printed may or may not be written")
			}
			return err
		})
	}
	return c
}

// check checks the flags together.
func (cmd *pubCmd) check(c *cobra.Command) error {
	switch {
	case cmd.batch < 1:
		return usageErrorf("--batch must be at least 1")
	case cmd.count < 0:
		return usageErrorf("--count must not be negative")
	case cmd.size < 0:
		return usageErrorf("--size must not be negative")
	case cmd.count > 0 && len(cmd.messages) > 0:
		return usageErrorf("give either MESSAGE arguments or --count, not both")
	case cmd.raw && (cmd.count > 0 || len(cmd.messages) > 0):
		return usageErrorf("--raw publishes standard input: it does not go with MESSAGE arguments or --count")
	case len(cmd.key) > wire.MaxKeyBytes:
		return usageErrorf("--key is longer than %d bytes", wire.MaxKeyBytes)
	}
	if c.Flags().Changed("if-offset") {
		cmd.conditional = true
		for _, f := range []string{"count", "batch", "ack", "producer-id"} {
			if c.Flags().Changed(f) {
				return usageErrorf("--if-offset publishes one acked batch: it does not take --%s", f)
			}
		}
	}
	if c.Flags().Changed("producer-id") {
		switch {
		case cmd.producerID == 0:
			return usageErrorf("--producer-id must be at least 1")
		case cmd.ack != client.AckPerBatch:
			return usageErrorf("--producer-id publishes acked batches: it takes only --ack batch")
		}
	}
	return nil
}

// parseHeaders parses the -H key=value flags.
func parseHeaders(kvs []string) (client.Headers, error) {
	if len(kvs) > wire.MaxHeaders {
		return nil, usageErrorf("at most %d headers (-H) on a record, got %d", wire.MaxHeaders, len(kvs))
	}
	var h client.Headers
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return nil, usageErrorf("-H %q: want key=value", kv)
		case len(k) > wire.MaxHeaderKeyBytes:
			return nil, usageErrorf("-H %q: a header name has at most %d bytes", kv, wire.MaxHeaderKeyBytes)
		}
		h = append(h, client.Header{Key: k, Value: []byte(v)})
	}
	return h, nil
}

// parseAckMode parses --ack.
func parseAckMode(s string) (client.AckMode, error) {
	switch s {
	case "none":
		return client.AckNone, nil
	case "message":
		return client.AckPerMessage, nil
	case "batch":
		return client.AckPerBatch, nil
	}
	return 0, usageErrorf("--ack %q: want none, message or batch", s)
}

// frameLimit is the largest record the command reads from standard input:
// one frame.
func (cmd *pubCmd) frameLimit() int {
	if cmd.conn != nil {
		return int(cmd.conn.maxFrame)
	}
	return wire.DefaultMaxFrameBytes
}

// source returns the function that yields the records to publish, in
// order, until it reports false.
func (cmd *pubCmd) source(stdin io.Reader) func() ([]byte, bool, error) {
	switch {
	case cmd.count > 0:
		i := 0
		return func() ([]byte, bool, error) {
			if i == cmd.count {
				return nil, false, nil
			}
			i++
			return generatedPayload(i, cmd.size), true, nil
		}
	case len(cmd.messages) > 0:
		i := 0
		return func() ([]byte, bool, error) {
			if i == len(cmd.messages) {
				return nil, false, nil
			}
			i++
			return []byte(cmd.messages[i-1]), true, nil
		}
	case cmd.raw:
		done := false
		return func() ([]byte, bool, error) {
			if done {
				return nil, false, nil
			}
			done = true
			limit := cmd.frameLimit()
			b, err := io.ReadAll(io.LimitReader(stdin, int64(limit)+1))
			if err != nil {
				return nil, false, err
			}
			if len(b) > limit {
				return nil, false, fmt.Errorf("standard input is longer than the frame limit (--max-frame-bytes %s)", formatSize(int64(limit)))
			}
			return b, true, nil
		}
	default:
		return lineSource(stdin, cmd.frameLimit())
	}
}

// lineSource yields the lines of r without their "\n" or "\r\n", each at
// most limit bytes.
func lineSource(r io.Reader, limit int) func() ([]byte, bool, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	line := 0
	return func() ([]byte, bool, error) {
		line++
		var buf []byte
		for {
			chunk, err := br.ReadSlice('\n')
			buf = append(buf, chunk...)
			if len(bytes.TrimRight(buf, "\r\n")) > limit {
				return nil, false, fmt.Errorf("line %d is longer than the frame limit (--max-frame-bytes %s; --raw publishes a whole file as one record)", line, formatSize(int64(limit)))
			}
			switch {
			case errors.Is(err, bufio.ErrBufferFull):
				continue
			case errors.Is(err, io.EOF):
				if len(buf) == 0 {
					return nil, false, nil
				}
			case err != nil:
				return nil, false, err
			}
			buf = bytes.TrimSuffix(buf, []byte("\n"))
			buf = bytes.TrimSuffix(buf, []byte("\r"))
			return buf, true, nil
		}
	}
}

// generatedPayload is record i of --count: its sequence number, padded with
// 'x' to size bytes (cut to size if the number is longer).
func generatedPayload(i, size int) []byte {
	p := make([]byte, size)
	for k := range p {
		p[k] = 'x'
	}
	copy(p, strconv.Itoa(i)+" ")
	return p
}

// pendingPublish is a publish waiting for its ack.
type pendingPublish struct {
	// wait waits for the ack.
	wait func(context.Context) (client.PublishAck, error)
	// records and bytes are what the publish holds, for the progress bar.
	records, bytes int
}

// publishOptions returns the options of every publish.
func (cmd *pubCmd) publishOptions() []client.PublishOption {
	var opts []client.PublishOption
	if cmd.key != "" {
		opts = append(opts, client.WithKey([]byte(cmd.key)))
	}
	if len(cmd.headers) > 0 {
		opts = append(opts, client.WithHeaders(cmd.headers...))
	}
	return opts
}

// run publishes the records --batch a publish, pipelined, and prints each
// ack's records ("shard offset", or JSON/YAML), or a summary with --count.
func (cmd *pubCmd) run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	if cmd.conn.clustered() {
		return cmd.runCluster(ctx, stdin, stdout)
	}
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if cmd.conditional {
		return cmd.runConditional(ctx, c, stdin, stdout)
	}

	opts := cmd.publishOptions()
	var publish func(ctx context.Context, batch [][]byte) (pendingPublish, error)
	if cmd.producerID != 0 {
		publish = cmd.idempotentPublisher(c.NewProducer(cmd.name, cmd.producerID), opts)
	} else {
		publish = cmd.plainPublisher(c, append(opts, client.WithAck(cmd.ack)))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out, f, rw, bar := cmd.outputs(stdout)
	defer out.Flush()

	// The printer waits for the acks in order while the loop below keeps
	// publishing: one goroutine pipelines, the other reports.
	pending := make(chan pendingPublish, pubPipeline)
	printed := make(chan struct{})
	var records, bytes int
	start := time.Now()
	go func() {
		defer close(printed)
		for p := range pending {
			ack, err := p.wait(ctx)
			if err != nil {
				cancel(err)
				return
			}
			if bar != nil {
				bar.add(p.records, p.bytes)
			}
			if cmd.count == 0 && cmd.ack != client.AckNone {
				if err := printAck(out, rw, ack); err != nil {
					cancel(err)
					return
				}
				if len(pending) == 0 {
					out.Flush()
				}
			}
		}
	}()

	next := cmd.source(stdin)
	var loopErr error
	for done := false; !done && loopErr == nil; {
		batch := make([][]byte, 0, cmd.batch)
		size := 0
		for len(batch) < cmd.batch {
			p, ok, err := next()
			if err != nil {
				loopErr = fmt.Errorf("read input: %w", err)
			}
			if !ok {
				done = true
				break
			}
			batch = append(batch, p)
			size += len(p)
		}
		if len(batch) == 0 || loopErr != nil {
			break
		}
		p, err := publish(ctx, batch)
		if err != nil {
			loopErr = err
			break
		}
		p.records, p.bytes = len(batch), size
		records += len(batch)
		bytes += size
		select {
		case pending <- p:
		case <-ctx.Done():
			loopErr = ctx.Err()
		}
	}
	close(pending)
	<-printed
	if bar != nil {
		bar.finish()
	}
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	if loopErr != nil {
		return loopErr
	}
	if cmd.count > 0 {
		return writePubSummary(out, stdout, f, records, bytes, time.Since(start))
	}
	return nil
}

// outputs makes a run's buffered output, its format and record writer, and
// its progress bar (nil without --count on a terminal).
func (cmd *pubCmd) outputs(stdout io.Writer) (*bufio.Writer, outputFormat, *recordWriter, *progressBar) {
	out := bufio.NewWriter(stdout)
	f := format(cmd.json, cmd.yaml)
	var bar *progressBar
	if cmd.progress != nil {
		bar = startProgress(cmd.progress, cmd.count, progressEvery)
	}
	return out, f, &recordWriter{format: f, w: out}, bar
}

// writePubSummary prints a --count run's summary: records, bytes and rates.
func writePubSummary(out *bufio.Writer, stdout io.Writer, f outputFormat, records, bytes int, d time.Duration) error {
	sum := pubSummaryJSON{Records: records, Bytes: bytes, Seconds: d.Seconds(),
		RecordsPerSec: float64(records) / d.Seconds(), MBPerSec: float64(bytes) / d.Seconds() / 1e6}
	if f.structured() {
		out.Flush()
		return writeValue(stdout, f, sum)
	}
	_, err := fmt.Fprintf(out, "published %d records (%d payload bytes) in %v: %.0f records/s, %.1f MB/s\n",
		records, bytes, d.Round(time.Millisecond), sum.RecordsPerSec, sum.MBPerSec)
	return err
}

// plainPublisher returns the publish of the run without --producer-id: a
// pipelined PublishAsync, whose ack is waited for (within --timeout) by the
// printer.
func (cmd *pubCmd) plainPublisher(c *client.Client, opts []client.PublishOption) func(context.Context, [][]byte) (pendingPublish, error) {
	return func(ctx context.Context, batch [][]byte) (pendingPublish, error) {
		fut, err := c.PublishAsync(ctx, cmd.name, batch, opts...)
		if err != nil {
			return pendingPublish{}, err
		}
		return pendingPublish{wait: func(ctx context.Context) (client.PublishAck, error) {
			ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
			defer cancel()
			return fut.Wait(ctx)
		}}, nil
	}
}

// idempotentPublisher returns the publish of the run with --producer-id:
// each batch goes through prod and is acked before the next one is sent, so
// that the batches are numbered, written and printed in input order. The
// first batch first learns the producer's last sequence on its shard from
// the node (resumeProducer).
func (cmd *pubCmd) idempotentPublisher(prod *client.Producer, opts []client.PublishOption) func(context.Context, [][]byte) (pendingPublish, error) {
	resumed := false
	return func(ctx context.Context, batch [][]byte) (pendingPublish, error) {
		var ack client.PublishAck
		var err error
		if !resumed {
			resumed = true
			ack, err = cmd.resumeProducer(ctx, prod, batch, opts)
			if !errors.Is(err, errProducerResumed) {
				return resolvedPublish(ack, err), err
			}
		}
		ack, err = cmd.sendIdempotent(ctx, prod, 0, batch, opts)
		return resolvedPublish(ack, err), err
	}
}

// resolvedPublish is a pendingPublish whose ack is in.
func resolvedPublish(ack client.PublishAck, err error) pendingPublish {
	return pendingPublish{wait: func(context.Context) (client.PublishAck, error) { return ack, err }}
}

// errProducerResumed is resumeProducer's report that the producer now goes
// on from the node's last sequence and that batch is still to be published.
var errProducerResumed = errors.New("producer resumed")

// resumeProducer makes prod go on from the producer's last sequence on
// batch's shard on the node, so that a run does not number its batches
// from 1 again and have the node answer them as duplicates of an earlier
// run's. The node has no call that reads the sequence, but it answers a
// sequence past the next one with sequence_gap and the one it expects, and
// writes nothing; the Producer takes that answer and numbers its next
// publish with it. So resumeProducer sends batch numbered as far ahead as a
// sequence goes, and returns errProducerResumed when the node answered so.
// (Were the producer's last sequence on the node just below it, batch was
// written: its ack is returned, with no error.)
func (cmd *pubCmd) resumeProducer(ctx context.Context, prod *client.Producer, batch [][]byte, opts []client.PublishOption) (client.PublishAck, error) {
	ack, err := cmd.sendIdempotent(ctx, prod, math.MaxUint64, batch, opts)
	if errors.Is(err, client.ErrSequenceGap) {
		return client.PublishAck{}, errProducerResumed
	}
	return ack, err
}

// Re-sends of an idempotent batch the node answered with an error that may
// have written it (storage_failure, internal): at most pubNodeRetries, the
// first after pubRetryDelay, each later one after twice the wait.
const (
	pubNodeRetries = 5
	pubRetryDelay  = 200 * time.Millisecond
)

// sendIdempotent publishes batch through prod, numbered seq (0: the next
// sequence), and waits for its ack, each attempt within --timeout. A
// failure whose outcome is unknown sends the batch again with the same
// sequence: the node writes it if the earlier attempt did not land, and
// answers with its offsets if it did. A lost connection or the timeout
// (the client is reconnecting) sends it again at once, as often as it
// happens: the client's reconnect policy bounds that. A node error that may
// have written it sends it again after a pause, at most pubNodeRetries
// times. Any other failure is returned; so is the client's giving up
// reconnecting, after which an attempt fails with an error that is not a
// *client.ProducerError.
func (cmd *pubCmd) sendIdempotent(ctx context.Context, prod *client.Producer, seq uint64, batch [][]byte, opts []client.PublishOption) (client.PublishAck, error) {
	pctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
	var ack client.PublishAck
	var err error
	if seq == 0 {
		ack, err = prod.Publish(pctx, batch, opts...)
	} else {
		ack, err = prod.PublishSequence(pctx, seq, batch, opts...)
	}
	cancel()
	retries, delay := 0, pubRetryDelay
	for {
		var pe *client.ProducerError
		if err == nil || !errors.As(err, &pe) || ctx.Err() != nil {
			return ack, err
		}
		switch outcomeOf(pe.Err) {
		case outcomeLost:
		case outcomeNodeError:
			if retries++; retries > pubNodeRetries {
				return ack, err
			}
			if cmd.stderr != nil {
				fmt.Fprintf(cmd.stderr, "herald pub: batch %d may not be written (%v): sending it again in %v (%d of %d)\n",
					pe.Sequence, pe.Err, delay, retries, pubNodeRetries)
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ack, err
			}
			delay *= 2
		default:
			return ack, err
		}
		pctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		ack, err = prod.PublishSequence(pctx, pe.Sequence, batch, opts...)
		cancel()
	}
}

// What a failed idempotent publish leaves unknown.
const (
	// outcomeKnown: the batch was not written (or the failure is final).
	outcomeKnown = iota
	// outcomeLost: the connection was lost or the attempt timed out with
	// the batch in flight.
	outcomeLost
	// outcomeNodeError: the node answered with an error that may have
	// written it (storage_failure, internal, a code this CLI does not know).
	outcomeNodeError
)

// outcomeOf classifies err, the cause of a failed idempotent publish.
func outcomeOf(err error) int {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrOutcomeUnknown) {
		return outcomeLost
	}
	var we *wire.Error
	if errors.As(err, &we) && we.Code.Retry() == wire.RetryOutcomeUnknown {
		return outcomeNodeError
	}
	return outcomeKnown
}

// pubSummaryJSON is the json and yaml form of the --count summary.
type pubSummaryJSON struct {
	Records       int     `json:"records"`
	Bytes         int     `json:"payload_bytes"`
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
}

// ackJSON is the json and yaml form of one acknowledged record.
type ackJSON struct {
	Shard  uint32 `json:"shard"`
	Offset uint64 `json:"offset"`
	// Duplicate is set when the node answered a re-send of an idempotent
	// batch (--producer-id) that it had written already, with the offsets
	// it was written at.
	Duplicate bool `json:"duplicate,omitempty"`
}

// printAck prints a line "shard offset" per record of an ack (or, when rw
// is structured, a JSON line or YAML document): AckPerMessage lists each
// record's offset, which need not be contiguous; a batch's records have
// Count offsets from Offset.
func printAck(w io.Writer, rw *recordWriter, ack client.PublishAck) error {
	offsets := ack.Offsets
	if offsets == nil {
		for i := range max(ack.Count, 1) {
			offsets = append(offsets, ack.Offset+uint64(i))
		}
	}
	for _, o := range offsets {
		var err error
		if rw != nil && rw.format.structured() {
			err = rw.write(ackJSON{Shard: ack.Shard, Offset: o, Duplicate: ack.Duplicate})
		} else {
			_, err = fmt.Fprintf(w, "%d %d\n", ack.Shard, o)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runConditional publishes every record as one batch with PublishIf and
// prints the outcome.
func (cmd *pubCmd) runConditional(ctx context.Context, c *client.Client, stdin io.Reader, stdout io.Writer) error {
	var batch [][]byte
	next := cmd.source(stdin)
	for {
		p, ok, err := next()
		if err != nil {
			return fmt.Errorf("read input: %w", err)
		}
		if !ok {
			break
		}
		batch = append(batch, p)
	}
	if len(batch) == 0 {
		return usageErrorf("nothing to publish")
	}
	ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
	defer cancel()
	var key []byte
	if cmd.key != "" {
		key = []byte(cmd.key)
	}
	opts := []client.PublishOption{client.WithKey(key)}
	if len(cmd.headers) > 0 {
		opts = append(opts, client.WithHeaders(cmd.headers...))
	}
	res, err := c.PublishIf(ctx, cmd.name, batch, cmd.ifOffset, opts...)
	if err != nil {
		return err
	}
	f := format(cmd.json, cmd.yaml)
	if f.structured() {
		v := map[string]any{"written": res.Written, "offset": res.Offset, "tail": res.Tail}
		if err := writeValue(stdout, f, v); err != nil {
			return err
		}
		if !res.Written {
			return errRefused
		}
		return nil
	}
	if !res.Written {
		if _, err := fmt.Fprintf(stdout, "refused: tail is %d\n", res.Tail); err != nil {
			return err
		}
		return errRefused
	}
	_, err = fmt.Fprintf(stdout, "written at %d\n", res.Offset)
	return err
}
