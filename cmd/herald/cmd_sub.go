package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/heraldmq/herald/client"
)

const subUsage = `STREAM [--from earliest|latest|OFFSET] [--shard N] [--count N] [--queue N] [--json]
       (without --shard: every shard of the stream, merged)`

// subCmd is a parsed `herald sub` command line.
type subCmd struct {
	conn *clientFlags
	name client.StreamName
	// from is where the subscription starts (--from).
	from client.SubscribeOption
	// oneShard is set by --shard: subscribe to shard only; otherwise to
	// every shard.
	oneShard bool
	shard    uint32
	// count stops after this many records; 0 runs until interrupted.
	count int
	// queue asks the node for a queue of this many batches (--queue).
	queue uint32
	// json prints JSON lines (--json).
	json bool
}

// parseSubCmd parses the arguments of `herald sub`.
func parseSubCmd(args []string, stderr io.Writer, getenv func(string) string) (*subCmd, error) {
	fs := newFlagSet("sub", subUsage, stderr)
	cmd := &subCmd{conn: registerClientFlags(fs, getenv)}
	from := fs.String("from", "earliest", "where to start: earliest, latest or an `offset` (of every subscribed shard)")
	shard := fs.Uint("shard", 0, "subscribe to this shard only (default: every shard)")
	fs.IntVar(&cmd.count, "count", 0, "exit after this many records (0: run until interrupted)")
	queue := fs.Uint("queue", 0, "queue capacity in batches to ask the node for (0: the stream's default)")
	fs.BoolVar(&cmd.json, "json", false, `print JSON lines {"shard","offset","timestamp","key","payload"}; a key or payload that is not UTF-8 is printed as "key_base64"/"payload_base64"`)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	switch len(pos) {
	case 0:
		return nil, usageErrorf("missing STREAM")
	case 1:
	default:
		return nil, usageErrorf("unexpected argument %q", pos[1])
	}
	if cmd.name, err = parseStreamArg(pos[0]); err != nil {
		return nil, err
	}
	if cmd.from, err = parseFrom(*from); err != nil {
		return nil, err
	}
	if *shard > 1<<32-1 || *queue > 1<<32-1 {
		return nil, usageErrorf("--shard and --queue must fit in 32 bits")
	}
	cmd.shard, cmd.queue = uint32(*shard), uint32(*queue)
	cmd.oneShard = setFlag(fs, "shard") != ""
	if cmd.count < 0 {
		return nil, usageErrorf("--count must not be negative")
	}
	return cmd, nil
}

// parseFrom parses --from.
func parseFrom(s string) (client.SubscribeOption, error) {
	switch s {
	case "earliest":
		return client.FromEarliest(), nil
	case "latest":
		return client.FromLatest(), nil
	}
	off, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return nil, usageErrorf("--from %q: want earliest, latest or an offset", s)
	}
	return client.FromOffset(off), nil
}

// runSub runs `herald sub`: it prints one line per record ("shard offset
// payload", or JSON with --json) until --count records or an interrupt, and
// exits non-zero with a one-line message on error. Without --shard it
// subscribes to every shard of the stream; a shard that falls behind its
// queue on a durable stream is resubscribed where it stopped, so the output
// has no gap.
func runSub(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, err := parseSubCmd(args, stderr, os.Getenv)
	if err != nil {
		return exitStatus(stderr, "sub", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return exitStatus(stderr, "sub", cmd.run(ctx, stdout))
}

func (cmd *subCmd) run(ctx context.Context, stdout io.Writer) error {
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return interrupted(ctx, err)
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
	sub, err := c.Subscribe(sctx, cmd.name, cmd.subscribeOptions()...)
	cancel()
	if err != nil {
		return interrupted(ctx, err)
	}
	defer sub.Close()

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	for n := 0; cmd.count == 0 || n < cmd.count; n++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			return interrupted(ctx, err)
		}
		if cmd.json {
			err = writeEventJSON(out, ev)
		} else {
			err = writeEventText(out, ev)
		}
		if err == nil {
			err = out.Flush()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// subscribeOptions returns the Subscribe options the flags ask for.
func (cmd *subCmd) subscribeOptions() []client.SubscribeOption {
	opts := []client.SubscribeOption{cmd.from, client.QueueCapacity(cmd.queue), client.AutoResume()}
	if cmd.oneShard {
		opts = append(opts, client.OnShard(cmd.shard))
	}
	return opts
}

// interrupted turns the error of a call cut short by an interrupt into a
// clean exit.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// writeEventText prints "shard offset payload".
func writeEventText(w *bufio.Writer, ev client.Event) error {
	w.WriteString(strconv.FormatUint(uint64(ev.Shard), 10))
	w.WriteByte(' ')
	w.WriteString(strconv.FormatUint(ev.Offset, 10))
	w.WriteByte(' ')
	w.Write(ev.Payload)
	return w.WriteByte('\n')
}

// eventJSON is the --json form of an event.
type eventJSON struct {
	Shard         uint32  `json:"shard"`
	Offset        uint64  `json:"offset"`
	Timestamp     string  `json:"timestamp"`
	Key           *string `json:"key"`
	KeyBase64     string  `json:"key_base64,omitempty"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 string  `json:"payload_base64,omitempty"`
}

// writeEventJSON prints an event as one JSON line; a key or payload that is
// not valid UTF-8 goes in key_base64 / payload_base64 instead.
func writeEventJSON(w *bufio.Writer, ev client.Event) error {
	j := eventJSON{Shard: ev.Shard, Offset: ev.Offset, Timestamp: ev.Timestamp.UTC().Format(time.RFC3339Nano)}
	if ev.Key != nil {
		if utf8.Valid(ev.Key) {
			k := string(ev.Key)
			j.Key = &k
		} else {
			j.KeyBase64 = base64.StdEncoding.EncodeToString(ev.Key)
		}
	}
	if utf8.Valid(ev.Payload) {
		p := string(ev.Payload)
		j.Payload = &p
	} else {
		j.PayloadBase64 = base64.StdEncoding.EncodeToString(ev.Payload)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	w.Write(b)
	return w.WriteByte('\n')
}
