package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

const subUsage = `STREAM [--from earliest|latest|OFFSET] [--shard N] [--count N] [--queue N] [--json]
       (without --shard: every shard of the stream, merged)
   or: herald sub STREAM --group G [--member M] [--window N] [--max N] [--heartbeat DURATION] [--count N] [--json]
       (joins consumer group G as a push member: the node assigns it shards and it resumes at the
       group's committed position, so --from, --shard and --queue do not apply; each delivery is
       acked once all its records are printed; with --count, a delivery cut short by the count is
       not acked and all its records go back to the group, to be delivered again)`

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

	// group is the consumer group to join as a push member (--group);
	// empty means a plain subscription. The fields below apply only to a
	// group member.
	group string
	// member is the member id (--member); empty lets the node name it.
	member string
	// window is the credit window asked for, in records (--window).
	window int
	// maxPerPush caps the records of one delivery; 0 lets the node decide
	// (--max).
	maxPerPush int
	// heartbeat is the heartbeat interval; 0 means the client's default, a
	// third of the session timeout (--heartbeat).
	heartbeat time.Duration
}

// groupMemberFlags are the flags of `herald sub` that only a group member
// takes.
var groupMemberFlags = []string{"member", "window", "max", "heartbeat"}

// parseSubCmd parses the arguments of `herald sub`.
func parseSubCmd(args []string, stderr io.Writer, getenv func(string) string) (*subCmd, error) {
	fs := newFlagSet("sub", subUsage, stderr)
	cmd := &subCmd{conn: registerClientFlags(fs, getenv)}
	from := fs.String("from", "earliest", "where to start: earliest, latest or an `offset` (of every subscribed shard)")
	shard := fs.Uint("shard", 0, "subscribe to this shard only (default: every shard)")
	fs.IntVar(&cmd.count, "count", 0, "exit after this many records (0: run until interrupted)")
	queue := fs.Uint("queue", 0, "queue capacity in batches to ask the node for (0: the stream's default)")
	fs.BoolVar(&cmd.json, "json", false, `print JSON lines {"shard","offset","timestamp","key","payload"} (with --group also "attempts"); a key or payload that is not UTF-8 is printed as "key_base64"/"payload_base64"`)
	fs.StringVar(&cmd.group, "group", "", "join this consumer `group` as a push member instead of subscribing to the stream")
	fs.StringVar(&cmd.member, "member", "", "member `id` in the group (default: the node names the member) (--group)")
	fs.IntVar(&cmd.window, "window", client.DefaultGroupWindow, "credit window: at most this many records delivered and not yet acked; with --count, at most the count (--group)")
	fs.IntVar(&cmd.maxPerPush, "max", 0, "at most this many records per delivery (0: the node decides) (--group)")
	fs.DurationVar(&cmd.heartbeat, "heartbeat", 0, "send a heartbeat after this long without an ack (0: a third of the group's session timeout) (--group)")
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
	if err := cmd.checkGroupFlags(fs); err != nil {
		return nil, err
	}
	return cmd, nil
}

// checkGroupFlags checks that the group member flags come with --group and
// the plain subscription's flags without it.
func (cmd *subCmd) checkGroupFlags(fs *flag.FlagSet) error {
	if cmd.group == "" {
		if f := setFlag(fs, groupMemberFlags...); f != "" {
			return usageErrorf("--%s needs --group", f)
		}
		if setFlag(fs, "group") != "" {
			return usageErrorf("--group must not be empty")
		}
		return nil
	}
	switch setFlag(fs, "from", "shard", "queue") {
	case "from":
		return usageErrorf("--from does not go with --group: a group member resumes at the group's committed position")
	case "shard":
		return usageErrorf("--shard does not go with --group: the node assigns the group's shards to its members")
	case "queue":
		return usageErrorf("--queue does not go with --group: --window bounds what a group member has in flight")
	}
	if err := checkGroupName("group", cmd.group); err != nil {
		return err
	}
	if cmd.member != "" {
		if err := checkGroupName("member", cmd.member); err != nil {
			return err
		}
	}
	switch {
	case cmd.window < 1:
		return usageErrorf("--window must be at least 1")
	case cmd.maxPerPush < 0:
		return usageErrorf("--max must not be negative")
	case cmd.heartbeat < 0:
		return usageErrorf("--heartbeat must not be negative")
	}
	// With --count and no --window, hold no more than the count in flight:
	// no delivery is then cut short by the count, so each is printed whole
	// and acked, and the group's cursor moves past what was printed.
	if cmd.count > 0 && setFlag(fs, "window") == "" {
		cmd.window = min(cmd.window, cmd.count)
	}
	return nil
}

// checkGroupName checks a group or member name (what is the flag's name).
func checkGroupName(what, s string) error {
	if err := wire.ValidateGroupName("--"+what, s); err != nil {
		var werr *wire.Error
		if errors.As(err, &werr) {
			return usageErrorf("%s", werr.Message)
		}
		return usageErrorf("%v", err)
	}
	return nil
}

// parseFrom parses --from.
func parseFrom(s string) (client.SubscribeOption, error) {
	switch s {
	case "earliest":
		return client.WithStartEarliest(), nil
	case "latest":
		return client.WithStartLatest(), nil
	}
	off, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return nil, usageErrorf("--from %q: want earliest, latest or an offset", s)
	}
	return client.WithStartOffset(off), nil
}

// runSub runs `herald sub`: it prints one line per record ("shard offset
// payload", or JSON with --json) until --count records or an interrupt
// (SIGINT or SIGTERM, exit status 0), and exits non-zero with a one-line
// message on error. Without --shard it subscribes to every shard of the
// stream; a shard that falls behind its queue on a durable stream is
// resubscribed where it stopped, so the output has no gap. With --group it
// is a member of a consumer group instead (cmd_sub_group.go).
func runSub(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, err := parseSubCmd(args, stderr, os.Getenv)
	if err != nil {
		return exitStatus(stderr, "sub", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd.group != "" {
		return exitStatus(stderr, "sub", cmd.runGroup(ctx, stdout, stderr))
	}
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
	opts := []client.SubscribeOption{cmd.from, client.WithQueueCapacity(cmd.queue), client.WithAutoResume()}
	if cmd.oneShard {
		opts = append(opts, client.WithShard(cmd.shard))
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
	return writeJSONLine(w, eventJSONOf(ev))
}

// eventJSONOf returns the --json form of ev.
func eventJSONOf(ev client.Event) eventJSON {
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
	return j
}

// writeJSONLine prints v as one JSON line.
func writeJSONLine(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	w.Write(b)
	return w.WriteByte('\n')
}
