package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

const pubUsage = `STREAM [MESSAGE...] [--key K] [--ack none|message|batch] [--batch N] [--count N --size B] [--if-offset N]
       (no MESSAGE and no --count: one record per line of standard input;
       --if-offset publishes every record as one batch, only if the key's shard's tail is N)`

// Defaults of `herald pub`.
const (
	// defaultPubSize is the payload size --count generates without --size.
	defaultPubSize = 128
	// pubPipeline bounds the publishes waiting for their ack (the client's
	// byte budget bounds them too).
	pubPipeline = 1024
)

// pubCmd is a parsed `herald pub` command line.
type pubCmd struct {
	conn *clientFlags
	name client.StreamName
	// messages are the MESSAGE arguments.
	messages []string
	// key routes every record (--key).
	key string
	// ack is the ack mode (--ack).
	ack client.AckMode
	// batch is the records per publish (--batch).
	batch int
	// count and size generate count payloads of size bytes (--count, --size).
	count, size int
	// conditional publishes every record as one batch, only at the tail
	// ifOffset (--if-offset).
	conditional bool
	ifOffset    uint64
}

// parsePubCmd parses the arguments of `herald pub`.
func parsePubCmd(args []string, stderr io.Writer, getenv func(string) string) (*pubCmd, error) {
	fs := newFlagSet("pub", pubUsage, stderr)
	cmd := &pubCmd{conn: registerClientFlags(fs, getenv)}
	fs.StringVar(&cmd.key, "key", "", "record `key`: records with one key go to one shard")
	ack := fs.String("ack", "batch", "ack `mode`: none, message (one publish and ack per record) or batch")
	fs.IntVar(&cmd.batch, "batch", 1, "records per publish")
	fs.IntVar(&cmd.count, "count", 0, "generate this many records instead of reading messages; prints a summary")
	fs.IntVar(&cmd.size, "size", defaultPubSize, "payload `bytes` of each generated record (with --count)")
	fs.Uint64Var(&cmd.ifOffset, "if-offset", 0, "publish every record as one batch, only if the key's shard's tail is this `offset`; prints \"written at OFFSET\" or \"refused: tail is T\" (exit status 1)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		return nil, usageErrorf("missing STREAM")
	}
	if cmd.name, err = parseStreamArg(pos[0]); err != nil {
		return nil, err
	}
	cmd.messages = pos[1:]
	if cmd.ack, err = parseAckMode(*ack); err != nil {
		return nil, err
	}
	switch {
	case cmd.batch < 1:
		return nil, usageErrorf("--batch must be at least 1")
	case cmd.count < 0:
		return nil, usageErrorf("--count must not be negative")
	case cmd.size < 0:
		return nil, usageErrorf("--size must not be negative")
	case cmd.count > 0 && len(cmd.messages) > 0:
		return nil, usageErrorf("give either MESSAGE arguments or --count, not both")
	case len(cmd.key) > wire.MaxKeyBytes:
		return nil, usageErrorf("--key is longer than %d bytes", wire.MaxKeyBytes)
	}
	if setFlag(fs, "if-offset") != "" {
		cmd.conditional = true
		if f := setFlag(fs, "count", "batch", "ack"); f != "" {
			return nil, usageErrorf("--if-offset publishes one acked batch: it does not take --%s", f)
		}
	}
	return cmd, nil
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

// runPub runs `herald pub`: it publishes the MESSAGE arguments, the lines of
// stdin, or --count generated payloads, --batch records per publish, and
// prints each ack as "shard offset" lines (one per record with --ack
// message; none with --ack none), or a summary with --count. With
// --if-offset it publishes every record as one conditional batch and prints
// "written at OFFSET", or "refused: tail is T" and exits 1.
func runPub(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, err := parsePubCmd(args, stderr, os.Getenv)
	if err != nil {
		return exitStatus(stderr, "pub", err)
	}
	return exitStatus(stderr, "pub", cmd.run(context.Background(), stdin, stdout))
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
	default:
		limit := wire.DefaultMaxFrameBytes // a line is at most one frame
		if cmd.conn != nil {
			limit = int(cmd.conn.maxFrame)
		}
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), limit)
		return func() ([]byte, bool, error) {
			if !sc.Scan() {
				return nil, false, sc.Err()
			}
			return append([]byte(nil), sc.Bytes()...), true, nil
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
	fut *client.PublishFuture
}

func (cmd *pubCmd) run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if cmd.conditional {
		return cmd.runConditional(ctx, c, stdin, stdout)
	}

	opts := []client.PublishOption{client.WithAck(cmd.ack)}
	if cmd.key != "" {
		opts = append(opts, client.WithKey([]byte(cmd.key)))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := bufio.NewWriter(stdout)
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
			wctx, wcancel := context.WithTimeout(ctx, cmd.conn.timeout)
			ack, err := p.fut.Wait(wctx)
			wcancel()
			if err != nil {
				cancel(err)
				return
			}
			if cmd.count == 0 && cmd.ack != client.AckNone {
				if err := printAck(out, ack); err != nil {
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
			bytes += len(p)
		}
		if len(batch) == 0 || loopErr != nil {
			break
		}
		fut, err := c.PublishAsync(ctx, cmd.name, batch, opts...)
		if err != nil {
			loopErr = err
			break
		}
		records += len(batch)
		select {
		case pending <- pendingPublish{fut: fut}:
		case <-ctx.Done():
			loopErr = ctx.Err()
		}
	}
	close(pending)
	<-printed
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	if loopErr != nil {
		return loopErr
	}
	if cmd.count > 0 {
		d := time.Since(start)
		fmt.Fprintf(out, "published %d records (%d payload bytes) in %v: %.0f records/s, %.1f MB/s\n",
			records, bytes, d.Round(time.Millisecond), float64(records)/d.Seconds(), float64(bytes)/d.Seconds()/1e6)
	}
	return nil
}

// printAck prints an ack as "shard offset" lines: one per record for
// AckPerMessage (which may not be contiguous), one per batch otherwise.
func printAck(w io.Writer, ack client.PublishAck) error {
	if ack.Offsets != nil {
		for _, o := range ack.Offsets {
			if _, err := fmt.Fprintf(w, "%d %d\n", ack.Shard, o); err != nil {
				return err
			}
		}
		return nil
	}
	_, err := fmt.Fprintf(w, "%d %d\n", ack.Shard, ack.Offset)
	return err
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
	res, err := c.PublishIf(ctx, cmd.name, batch, cmd.ifOffset, client.WithKey(key))
	if err != nil {
		return err
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
