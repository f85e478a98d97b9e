package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// Bounds of the wait for a stream that does not exist yet.
const (
	streamWaitFirst = 100 * time.Millisecond
	streamWaitMax   = 2 * time.Second
)

// subCmd is a parsed `herald sub` command line.
type subCmd struct {
	conn *clientFlags
	name client.StreamName
	// from is where the subscription starts (--from, --from-time; --since
	// sets it when the command runs).
	from client.SubscribeOption
	// since starts the subscription at the records committed this long
	// before the command runs (--since); 0 when not given.
	since time.Duration
	// fromTime starts the subscription at the records committed at or after
	// it (--from-time); the zero time when not given.
	fromTime time.Time
	// oneShard is set by --shard: subscribe to shard only; otherwise to
	// every shard.
	oneShard bool
	shard    uint32
	// count stops after this many records; 0 runs until interrupted.
	count int
	// queue asks the node for a queue of this many batches (--queue).
	queue uint32
	// json and yaml select the output (--output, --json).
	json, yaml bool
	// noWait fails at once on a stream that does not exist (--no-wait);
	// otherwise sub waits for it to be created.
	noWait bool

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

func newSubCmd(env *cliEnv) *cobra.Command {
	var out outputFlags
	var from, fromTime string
	var since durationFlag
	var shard, queue uint
	cmd := &subCmd{}
	c := &cobra.Command{
		Use:   "sub STREAM",
		Short: "Subscribe to a stream and print its records, or consume as a group member",
		Long: `Subscribe to a stream and print one line per record, "shard offset payload" (or JSON lines
with --json), until --count records or Ctrl-C (exit status 0). Without --shard it
subscribes to every shard, merged; a shard that falls behind its queue on a durable stream
is resubscribed where it stopped, so the output has no gap.

--from starts every shard at earliest (the default), latest or an offset. --since 10m
(units d, h, m, s: 7d, 1d12h, 90s) and --from-time 2026-12-01T10:00:00Z (RFC 3339) start
each shard at its first record committed at or after that time, by the node's clock (--since
counts back from this machine's clock), or at its tail when it has none that recent; give
only one of the three.

A stream that does not exist yet is waited for (polling with backoff up to 2s, and saying
so on stderr): it appears when someone creates it or, on a node with auto_create_streams
(the dev default), publishes to it. Ctrl-C ends the wait; --no-wait fails at once with
stream_not_found instead.

With --group G it joins consumer group G as a push member instead: the node assigns it
shards and it resumes at the group's committed position, so --from, --shard, --queue and
--replica do not apply. Each delivery is acked once all its records are printed; with
--count, a delivery cut short by the count is not acked and all its records go back to the
group.

` + replicaHelp + `

` + streamArgHelp,
		Example: `  herald sub orders --count 2                      # 0 0 hello, 0 1 world
  herald sub orders --from latest                  # follow new records until Ctrl-C
  herald sub acme/shop/orders --shard 2 --from 100 --json
  herald sub orders --since 10m                    # the last ten minutes, then follow
  herald sub orders --from-time 2026-12-01T10:00:00Z --count 100
  herald sub orders --group workers --count 10     # a group member: print, then ack
  herald sub orders --server a:7400,b:7400,c:7400 --replica leader`,
		Args: cobra.ArbitraryArgs,
	}
	cmd.conn = registerClientFlags(c.Flags())
	f := c.Flags()
	f.StringVar(&from, "from", "earliest", "where to start: earliest, latest or an `offset` (of every subscribed shard)")
	f.Var(&since, "since", "start at the records committed this long ago, e.g. 10m, 2h or 7d")
	f.StringVar(&fromTime, "from-time", "", "start at the records committed at or after this RFC 3339 `time`, e.g. 2026-12-01T10:00:00Z")
	f.UintVar(&shard, "shard", 0, "subscribe to this shard only (default: every shard)")
	f.IntVar(&cmd.count, "count", 0, "exit after this many records (0: run until interrupted)")
	f.UintVar(&queue, "queue", 0, "queue capacity in batches to ask the node for (0: the stream's default)")
	f.BoolVar(&cmd.noWait, "no-wait", false, "fail with stream_not_found if the stream does not exist, instead of waiting for it")
	f.StringVar(&cmd.group, "group", "", "join this consumer `group` as a push member instead of subscribing to the stream")
	f.StringVar(&cmd.member, "member", "", "member `id` in the group (default: the node names the member) (--group)")
	f.IntVar(&cmd.window, "window", client.DefaultGroupWindow, "credit window: at most this many records delivered and not yet acked; with --count, at most the count (--group)")
	f.IntVar(&cmd.maxPerPush, "max", 0, "at most this many records per delivery (0: the node decides) (--group)")
	f.DurationVar(&cmd.heartbeat, "heartbeat", 0, "send a heartbeat after this long without an ack (0: a third of the group's session timeout) (--group)")
	addOutputFlags(c, &out, `a line {"shard","offset","timestamp","key","headers","payload"} per record, with --group also "attempts"; a key or payload that is not UTF-8 goes in "key_base64"/"payload_base64"`)
	completeWords(c, "from", "earliest", "latest")
	addReplicaFlag(c, cmd.conn)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := cmd.conn.resolve(c.Flags(), env); err != nil {
			return err
		}
		fm, err := out.resolve(c)
		if err != nil {
			return err
		}
		setFormat(fm, &cmd.json, &cmd.yaml)
		switch len(args) {
		case 0:
			return usageErrorf("missing STREAM")
		case 1:
		default:
			return usageErrorf("unexpected argument %q", args[1])
		}
		if cmd.name, err = parseStreamArg(args[0], cmd.conn.tenant); err != nil {
			return err
		}
		if cmd.from, err = parseFrom(from); err != nil {
			return err
		}
		if err := cmd.parseStartTime(c, time.Duration(since), fromTime); err != nil {
			return err
		}
		if shard > 1<<32-1 || queue > 1<<32-1 {
			return usageErrorf("--shard and --queue must fit in 32 bits")
		}
		cmd.shard, cmd.queue = uint32(shard), uint32(queue)
		cmd.oneShard = c.Flags().Changed("shard")
		if cmd.count < 0 {
			return usageErrorf("--count must not be negative")
		}
		if err := cmd.checkGroupFlags(c); err != nil {
			return err
		}
		return parsedOrRun(env, cmd, func() error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cmd.group != "" {
				return cmd.runGroup(ctx, env.stdout, env.stderr)
			}
			return cmd.run(ctx, env.stdout, env.stderr)
		})
	}
	return c
}

// checkGroupFlags checks that the group member flags come with --group and
// the plain subscription's flags without it.
func (cmd *subCmd) checkGroupFlags(c *cobra.Command) error {
	fs := c.Flags()
	if cmd.group == "" {
		for _, f := range groupMemberFlags {
			if fs.Changed(f) {
				return usageErrorf("--%s needs --group", f)
			}
		}
		if fs.Changed("group") {
			return usageErrorf("--group must not be empty")
		}
		return nil
	}
	switch {
	case fs.Changed("from"), fs.Changed("since"), fs.Changed("from-time"):
		flag := "--from"
		if fs.Changed("since") {
			flag = "--since"
		} else if fs.Changed("from-time") {
			flag = "--from-time"
		}
		return usageErrorf("%s does not go with --group: a group member resumes at the group's committed position (move it with herald group seek)", flag)
	case fs.Changed("shard"):
		return usageErrorf("--shard does not go with --group: the node assigns the group's shards to its members")
	case fs.Changed("queue"):
		return usageErrorf("--queue does not go with --group: --window bounds what a group member has in flight")
	case fs.Changed("replica"):
		return usageErrorf("--replica does not go with --group: a group's coordinator serves its members")
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
	if cmd.count > 0 && !fs.Changed("window") {
		cmd.window = min(cmd.window, cmd.count)
	}
	return nil
}

// checkGroupName checks a group or member name (what is the flag's name).
func checkGroupName(what, s string) error { return checkName("--"+what, s) }

// checkName checks a group or member name given as label (a flag or an
// argument).
func checkName(label, s string) error {
	if err := wire.ValidateGroupName(label, s); err != nil {
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

// parseStartTime checks --since and --from-time (since and fromTime, as
// given) and sets the start they ask for: --from-time's now, --since's when
// the command runs.
func (cmd *subCmd) parseStartTime(c *cobra.Command, since time.Duration, fromTime string) error {
	fs := c.Flags()
	given := 0
	for _, f := range []string{"from", "since", "from-time"} {
		if fs.Changed(f) {
			given++
		}
	}
	if given > 1 {
		return usageErrorf("--from, --since and --from-time say where to start: give only one")
	}
	switch {
	case fs.Changed("since"):
		if since <= 0 {
			return usageErrorf("--since must be more than 0: how long ago to start, e.g. 10m or 7d (--from latest starts now)")
		}
		cmd.since = since
	case fs.Changed("from-time"):
		t, err := time.Parse(time.RFC3339Nano, fromTime)
		if err != nil {
			return usageErrorf("--from-time %q: want an RFC 3339 time such as 2026-12-01T10:00:00Z or 2026-12-01T11:00:00+01:00", fromTime)
		}
		cmd.fromTime = t
		cmd.from = client.WithStartTime(t)
	}
	return nil
}

// run prints the records of a plain subscription until --count records
// or an interrupt (SIGINT or SIGTERM, a clean exit), and returns an error
// otherwise.
func (cmd *subCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	if cmd.since > 0 {
		// Once: waiting for the stream to be created does not move it.
		cmd.from = client.WithStartTime(time.Now().Add(-cmd.since))
	}
	var sub subscription
	if cmd.conn.clustered() {
		// Several nodes: each shard from its replica (or leader), moved to
		// another when its node is lost or its replica falls behind.
		cc, err := cmd.conn.dialCluster(ctx)
		if err != nil {
			return interrupted(ctx, err)
		}
		defer cc.Close()
		if sub, err = cmd.subscribeCluster(ctx, cc, stderr); err != nil {
			return interrupted(ctx, err)
		}
	} else {
		c, err := cmd.conn.dial(ctx)
		if err != nil {
			return interrupted(ctx, err)
		}
		defer c.Close()
		if sub, err = cmd.subscribe(ctx, c, stderr); err != nil {
			return interrupted(ctx, err)
		}
	}
	defer sub.Close()

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	rw := &recordWriter{format: format(cmd.json, cmd.yaml), w: out}
	for n := 0; cmd.count == 0 || n < cmd.count; n++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			return interrupted(ctx, err)
		}
		if rw.format.structured() {
			err = rw.write(eventJSONOf(ev))
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

// subscribe subscribes, waiting for the stream if it does not exist yet
// (unless --no-wait): it says so once on stderr and tries again with
// backoff until the stream is there or ctx ends.
func (cmd *subCmd) subscribe(ctx context.Context, c *client.Client, stderr io.Writer) (*client.Subscription, error) {
	var sub *client.Subscription
	err := cmd.waitForStream(ctx, stderr, func() error {
		sctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		var err error
		sub, err = c.Subscribe(sctx, cmd.name, cmd.subscribeOptions()...)
		return err
	})
	return sub, err
}

// subscribeCluster is subscribe through a ClusterClient.
func (cmd *subCmd) subscribeCluster(ctx context.Context, cc *client.ClusterClient, stderr io.Writer) (*client.ClusterSubscription, error) {
	var sub *client.ClusterSubscription
	err := cmd.waitForStream(ctx, stderr, func() error {
		sctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		var err error
		sub, err = cc.Subscribe(sctx, cmd.name, cmd.subscribeOptions()...)
		return err
	})
	return sub, err
}

// waitForStream calls try until it returns anything but stream_not_found,
// with a backoff from streamWaitFirst to streamWaitMax between calls,
// saying once on stderr that it waits. With --no-wait it calls try once.
func (cmd *subCmd) waitForStream(ctx context.Context, stderr io.Writer, try func() error) error {
	wait := streamWaitFirst
	for said := false; ; said = true {
		err := try()
		if cmd.noWait || !errors.Is(err, client.ErrStreamNotFound) {
			return err
		}
		if !said {
			fmt.Fprintf(stderr, "herald sub: stream %s does not exist yet; waiting for it to be created (Ctrl-C to stop)\n", cmd.name)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, streamWaitMax)
	}
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

// eventJSON is the json and yaml form of an event.
type eventJSON struct {
	Shard         uint32       `json:"shard"`
	Offset        uint64       `json:"offset"`
	Timestamp     string       `json:"timestamp"`
	Key           *string      `json:"key"`
	KeyBase64     string       `json:"key_base64,omitempty"`
	Headers       []headerJSON `json:"headers,omitempty"`
	Payload       *string      `json:"payload,omitempty"`
	PayloadBase64 string       `json:"payload_base64,omitempty"`
}

// headerJSON is one record header in eventJSON; a value that is not UTF-8
// goes in value_base64.
type headerJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 string  `json:"value_base64,omitempty"`
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
	for _, h := range ev.Headers {
		hj := headerJSON{Key: h.Key}
		if utf8.Valid(h.Value) {
			v := string(h.Value)
			hj.Value = &v
		} else {
			hj.ValueBase64 = base64.StdEncoding.EncodeToString(h.Value)
		}
		j.Headers = append(j.Headers, hj)
	}
	if utf8.Valid(ev.Payload) {
		p := string(ev.Payload)
		j.Payload = &p
	} else {
		j.PayloadBase64 = base64.StdEncoding.EncodeToString(ev.Payload)
	}
	return j
}
