package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/client"
)

// groupOpHelp describes each subcommand of `herald group`.
var groupOpHelp = map[string][3]string{
	"poll": {"poll STREAM --group G --shard N", "Claim records of a shard for the group and print them",
		`Claim up to --max records of the shard for the group and print "shard offset attempts
payload" per record. Claims not settled are delivered again after the group's visibility
timeout. --ack acks every printed record and says on stderr how many the node settled.`},
	"ack": {"ack STREAM --group G --shard N OFFSET...", "Ack claimed records: done",
		`Ack records: they are done. Prints how many the node settled, e.g. "acked 2 of 3 offsets;
1 was settled already".`},
	"nack": {"nack STREAM --group G --shard N OFFSET...", "Nack claimed records: deliver them again now",
		`Nack claimed records: deliver them again now, counting an attempt. Prints how many the
node settled.`},
	"dead-letters": {"dead-letters STREAM --group G", "List the group's dead letters",
		`Print "shard offset attempts dead_at reason" per dead letter (every shard unless --shard).`},
	"redrive": {"redrive STREAM --group G [--shard N] [OFFSET...]", "Give dead letters back to the group with fresh attempts",
		`Give dead letters back to the group with fresh attempts: without OFFSETs every dead letter
of the shard, without --shard of every shard (OFFSETs need --shard). Prints how many changed.`},
	"discard": {"discard STREAM --group G [--shard N] [OFFSET...]", "Drop dead letters for good",
		`Drop dead letters for good: without OFFSETs every dead letter of the shard, without
--shard of every shard (OFFSETs need --shard). Prints how many changed.`},
	"describe": {"describe STREAM --group G", "Describe a group: position, lag and members per shard",
		`Print the group's generation, settings and lag, a table of its shards (committed,
delivered, tail, lag, claims, owed, dead letters) and a table of its push members.`},
}

// groupOpExamples are each subcommand's examples.
var groupOpExamples = map[string]string{
	"poll":         "  herald group poll orders --group fulfilment --shard 0 --max 10 --wait 5s\n  herald group poll orders --group fulfilment --shard 0 --ack --json",
	"ack":          "  herald group ack orders --group fulfilment --shard 0 3 4 5",
	"nack":         "  herald group nack orders --group fulfilment --shard 0 6",
	"dead-letters": "  herald group dead-letters orders --group fulfilment\n  herald group dead-letters orders --group fulfilment --shard 2 --from 1000 --limit 20 --json",
	"redrive":      "  herald group redrive orders --group fulfilment --shard 2 1041\n  herald group redrive orders --group fulfilment",
	"discard":      "  herald group discard orders --group fulfilment --shard 2 1041",
	"describe":     "  herald group describe orders --group fulfilment\n  herald group describe orders --group fulfilment -o json",
}

// groupOps are the subcommands of `herald group`, in help order.
var groupOps = []string{"poll", "ack", "nack", "dead-letters", "redrive", "discard", "describe"}

// Defaults of `herald group poll`.
const (
	defaultPollMax  = 10
	defaultPollWait = 5 * time.Second
)

// groupCmd is a parsed `herald group` command line.
type groupCmd struct {
	conn *clientFlags
	// op is the subcommand, one of groupOps.
	op   string
	name client.StreamName
	// group is the consumer group (--group).
	group string
	// shard is the shard (--shard); client.AllShards when not given.
	shard uint32
	// offsets are the OFFSET arguments of ack, nack, redrive and discard.
	offsets []uint64
	// max is the most records one poll claims (--max).
	max int
	// wait is how long a poll waits for records (--wait).
	wait time.Duration
	// ack acks the polled records once printed (--ack).
	ack bool
	// from skips dead letters below this offset (--from).
	from uint64
	// limit prints at most this many dead letters; 0 means all (--limit).
	limit int
	// json and yaml select the output (--output, --json) of poll,
	// dead-letters and describe.
	json bool
	yaml bool
}

func newGroupCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("group", "Inspect, consume from and repair a consumer group",
		`Inspect, consume from and repair a consumer group on a durable stream. (herald sub
STREAM --group G runs a push member.)

`+streamArgHelp,
		`  herald group describe orders --group fulfilment
  herald group poll orders --group fulfilment --shard 0 --max 10
  herald group dead-letters orders --group fulfilment`)
	conn := registerClientFlags(c.PersistentFlags())
	var group string
	c.PersistentFlags().StringVar(&group, "group", "", "the consumer `group` (required)")
	for _, op := range groupOps {
		c.AddCommand(newGroupOpCmd(env, conn, &group, op))
	}
	return c
}

// newGroupOpCmd returns `herald group op`.
func newGroupOpCmd(env *cliEnv, conn *clientFlags, group *string, op string) *cobra.Command {
	help := groupOpHelp[op]
	c := &cobra.Command{Use: help[0], Short: help[1], Long: help[2] + "\n\n" + streamArgHelp, Example: groupOpExamples[op], Args: cobra.ArbitraryArgs}
	cmd := &groupCmd{op: op, conn: conn}
	var shard uint
	var out outputFlags
	f := c.Flags()
	switch op {
	case "poll":
		f.UintVar(&shard, "shard", 0, "the shard (required)")
		f.IntVar(&cmd.max, "max", defaultPollMax, "claim at most this many records")
		f.DurationVar(&cmd.wait, "wait", defaultPollWait, "wait this long for records when there are none; the node caps it")
		f.BoolVar(&cmd.ack, "ack", false, "ack every record printed")
		addOutputFlags(c, &out, "a line per record, as herald sub --group prints")
	case "ack", "nack":
		f.UintVar(&shard, "shard", 0, "the shard (required)")
	case "dead-letters":
		f.UintVar(&shard, "shard", 0, "the shard (default every shard)")
		f.Uint64Var(&cmd.from, "from", 0, "list dead letters at this `offset` and above, on every shard listed")
		f.IntVar(&cmd.limit, "limit", 0, "list at most this many dead letters (0: all)")
		addOutputFlags(c, &out, `a line {"shard","offset","attempts","dead_at","reason"} per dead letter`)
	case "redrive", "discard":
		f.UintVar(&shard, "shard", 0, "the shard (default every shard)")
	case "describe":
		addOutputFlags(c, &out, "one object: stream, group, generation, visibility_ms, session_ms, max_attempts, lag, shards, members")
	}
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := conn.resolve(c.Flags(), env); err != nil {
			return err
		}
		if c.Flags().Lookup("output") != nil {
			fm, err := out.resolve(c)
			if err != nil {
				return err
			}
			setFormat(fm, &cmd.json, &cmd.yaml)
		}
		cmd.group = *group
		if err := cmd.parseArgs(c, args, shard); err != nil {
			return err
		}
		return parsedOrRun(env, cmd, func() error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return cmd.run(ctx, env.stdout, env.stderr)
		})
	}
	return c
}

// parseArgs checks the arguments and flags of the subcommand.
func (cmd *groupCmd) parseArgs(c *cobra.Command, args []string, shard uint) error {
	if len(args) < 1 {
		return usageErrorf("missing STREAM")
	}
	var err error
	if cmd.name, err = parseStreamArg(args[0], cmd.conn.tenant); err != nil {
		return err
	}
	if !c.Flags().Changed("group") {
		return usageErrorf("--group is required")
	}
	if err := checkGroupName("group", cmd.group); err != nil {
		return err
	}
	if shard > 1<<32-2 { // 1<<32-1 is client.AllShards
		return usageErrorf("--shard %d is out of range", shard)
	}
	hasShard := c.Flags().Changed("shard")
	cmd.shard = client.AllShards
	if hasShard {
		cmd.shard = uint32(shard)
	}
	switch cmd.op {
	case "ack", "nack", "redrive", "discard":
		for _, a := range args[1:] {
			off, err := strconv.ParseUint(a, 10, 64)
			if err != nil {
				return usageErrorf("OFFSET %q: want an offset", a)
			}
			cmd.offsets = append(cmd.offsets, off)
		}
	default:
		if len(args) > 1 {
			return usageErrorf("unexpected argument %q", args[1])
		}
	}
	switch cmd.op {
	case "poll":
		switch {
		case !hasShard:
			return usageErrorf("poll needs --shard")
		case cmd.max < 1:
			return usageErrorf("--max must be at least 1")
		case cmd.wait < 0:
			return usageErrorf("--wait must not be negative")
		}
	case "ack", "nack":
		switch {
		case !hasShard:
			return usageErrorf("%s needs --shard", cmd.op)
		case len(cmd.offsets) == 0:
			return usageErrorf("%s needs at least one OFFSET", cmd.op)
		}
	case "redrive", "discard":
		if len(cmd.offsets) > 0 && !hasShard {
			return usageErrorf("OFFSETs need --shard")
		}
	case "dead-letters":
		if cmd.limit < 0 {
			return usageErrorf("--limit must not be negative")
		}
	}
	return nil
}

func (cmd *groupCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return interrupted(ctx, err)
	}
	defer c.Close()
	out := bufio.NewWriter(stdout)
	err = cmd.do(ctx, c, out, stderr)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	return interrupted(ctx, err)
}

// do runs the subcommand on c.
func (cmd *groupCmd) do(ctx context.Context, c *client.Client, out *bufio.Writer, stderr io.Writer) error {
	switch cmd.op {
	case "poll":
		return cmd.poll(ctx, c, out, stderr)
	case "ack", "nack":
		g := c.Group(cmd.name, cmd.group)
		settle := g.AckOffsets
		if cmd.op == "nack" {
			settle = g.NackOffsets
		}
		cctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		n, err := settle(cctx, cmd.shard, cmd.offsets...)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, settledNote(cmd.op, n, distinctOffsets(cmd.offsets), "offset"))
		return err
	case "dead-letters":
		list := func(ctx context.Context, shard uint32, from uint64, limit int) ([]client.DeadLetter, bool, error) {
			ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
			defer cancel()
			return c.Group(cmd.name, cmd.group).DeadLetters(ctx, shard, from, limit)
		}
		shards := func(ctx context.Context) (int, error) {
			ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
			defer cancel()
			info, err := c.Group(cmd.name, cmd.group).Describe(ctx)
			return len(info.Shards), err
		}
		return cmd.listDeadLetters(ctx, list, shards, out, stderr)
	case "redrive", "discard":
		g := c.Group(cmd.name, cmd.group)
		change, done := g.Redrive, "redriven"
		if cmd.op == "discard" {
			change, done = g.Discard, "discarded"
		}
		cctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		n, err := change(cctx, cmd.shard, cmd.offsets...)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s %d\n", done, n)
		return err
	case "describe":
		cctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		info, err := c.Group(cmd.name, cmd.group).Describe(cctx)
		if err != nil {
			return err
		}
		if f := format(cmd.json, cmd.yaml); f.structured() {
			return writeValue(out, f, groupInfoJSONOf(cmd.name, info))
		}
		return writeGroupInfo(out, cmd.name, info)
	}
	return fmt.Errorf("unknown subcommand %q", cmd.op) // parseGroupCmd refuses it
}

// poll claims records, prints them and, with --ack, acks them and says on
// stderr how many of them the node settled (stdout holds only records, so
// that --json stays a line per record).
func (cmd *groupCmd) poll(ctx context.Context, c *client.Client, out *bufio.Writer, stderr io.Writer) error {
	g := c.Group(cmd.name, cmd.group)
	// The call must outlast the node's wait.
	pctx, cancel := context.WithTimeout(ctx, cmd.wait+cmd.conn.timeout)
	recs, err := g.Poll(pctx, cmd.shard, cmd.max, cmd.wait)
	cancel()
	if err != nil {
		return err
	}
	rw := &recordWriter{format: format(cmd.json, cmd.yaml), w: out}
	for _, rec := range recs {
		if rw.format.structured() {
			err = rw.write(groupRecordJSONOf(rec))
		} else {
			err = writeGroupRecordText(out, rec)
		}
		if err != nil {
			return err
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if !cmd.ack || len(recs) == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmd.conn.timeout)
	defer cancel()
	n, err := g.Ack(actx, recs...)
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	_, err = fmt.Fprintln(stderr, settledNote("ack", n, len(recs), "record"))
	return err
}

// settledNote says what an ack or nack (op) of asked distinct offsets
// settled, by the node's count: "acked 2 of 3 offsets; 1 was settled
// already". An ack settles every delivered record not settled yet; a nack
// only the claimed ones.
func settledNote(op string, settled, asked int, noun string) string {
	done, why := "acked", "settled already"
	if op == "nack" {
		done, why = "nacked", "not claimed (settled already, or waiting to be delivered again)"
	}
	if asked != 1 {
		noun += "s"
	}
	note := fmt.Sprintf("%s %d of %d %s", done, settled, asked, noun)
	if rest := asked - settled; rest > 0 {
		verb := "were"
		if rest == 1 {
			verb = "was"
		}
		note += fmt.Sprintf("; %d %s %s", rest, verb, why)
	}
	return note
}

// distinctOffsets counts the distinct offsets of offsets (the node settles
// an offset named twice once).
func distinctOffsets(offsets []uint64) int {
	seen := make(map[uint64]struct{}, len(offsets))
	for _, off := range offsets {
		seen[off] = struct{}{}
	}
	return len(seen)
}

// writeGroupRecordText prints "shard offset attempts payload".
func writeGroupRecordText(w *bufio.Writer, rec client.GroupRecord) error {
	w.WriteString(strconv.FormatUint(uint64(rec.Shard), 10))
	w.WriteByte(' ')
	w.WriteString(strconv.FormatUint(rec.Offset, 10))
	w.WriteByte(' ')
	w.WriteString(strconv.FormatUint(uint64(rec.Attempts), 10))
	w.WriteByte(' ')
	w.Write(rec.Payload)
	return w.WriteByte('\n')
}

// deadLetterLister lists one page of dead letters of shard (or
// client.AllShards) from offset from, at most limit (0: the node's cap)
// (client.Group.DeadLetters, or a fake in tests).
type deadLetterLister func(ctx context.Context, shard uint32, from uint64, limit int) ([]client.DeadLetter, bool, error)

// listDeadLetters prints dead letters page by page, in shard then offset
// order, until --limit or the last one. A listing of every shard that one
// page does not hold goes on shard by shard (shardCount says how many there
// are), since a page of every shard can only start at the same offset on
// each. When --limit leaves some out, a note on stderr says where to go on.
func (cmd *groupCmd) listDeadLetters(ctx context.Context, list deadLetterLister, shardCount func(context.Context) (int, error), out *bufio.Writer, stderr io.Writer) error {
	shard, from := cmd.shard, cmd.from
	// shards is set once the listing of every shard goes on shard by shard.
	shards := 0
	printed := 0
	for {
		limit := 0
		if cmd.limit > 0 {
			limit = cmd.limit - printed
		}
		letters, more, err := list(ctx, shard, from, limit)
		if err != nil {
			return err
		}
		for _, dl := range letters {
			if err := cmd.writeDeadLetter(out, dl); err != nil {
				return err
			}
		}
		printed += len(letters)
		if more && len(letters) > 0 {
			last := letters[len(letters)-1]
			if cmd.limit > 0 && printed >= cmd.limit {
				if err := out.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(stderr, "more dead letters: go on with --shard %d --from %d\n", last.Shard, last.Offset+1)
				return nil
			}
			if shard == client.AllShards {
				if shards, err = shardCount(ctx); err != nil {
					return err
				}
			}
			shard, from = last.Shard, last.Offset+1
			continue
		}
		if shards == 0 || int(shard)+1 >= shards || (cmd.limit > 0 && printed >= cmd.limit) {
			return nil
		}
		shard, from = shard+1, cmd.from
	}
}

// writeDeadLetter prints "shard offset attempts dead_at reason", or a JSON
// line or YAML document (each after "---").
func (cmd *groupCmd) writeDeadLetter(w *bufio.Writer, dl client.DeadLetter) error {
	if cmd.json || cmd.yaml {
		j := deadLetterJSON{Shard: dl.Shard, Offset: dl.Offset, Attempts: dl.Attempts,
			DeadAt: dl.DeadAt.UTC().Format(time.RFC3339Nano), Reason: dl.Reason}
		if cmd.yaml {
			return writeYAMLDoc(w, j, true)
		}
		return writeJSONLine(w, j)
	}
	_, err := fmt.Fprintf(w, "%d %d %d %s %s\n", dl.Shard, dl.Offset, dl.Attempts, dl.DeadAt.UTC().Format(time.RFC3339), dl.Reason)
	return err
}

// deadLetterJSON is the --json form of a dead letter.
type deadLetterJSON struct {
	Shard    uint32 `json:"shard"`
	Offset   uint64 `json:"offset"`
	Attempts uint32 `json:"attempts"`
	DeadAt   string `json:"dead_at"`
	Reason   string `json:"reason"`
}

// writeGroupInfo prints a group's description: a header line, a table of
// its shards and a table of its push members.
func writeGroupInfo(w io.Writer, name client.StreamName, info client.GroupInfo) error {
	fmt.Fprintf(w, "group %s on %s: generation=%d visibility=%s session=%s max_attempts=%d lag=%d\n",
		info.Group, name, info.Generation, info.Visibility, info.Session, info.MaxAttempts, info.Lag())
	t := newTable("SHARD", "COMMITTED", "DELIVERED", "TAIL", "LAG", "CLAIMS", "OWED", "DEAD_LETTERS")
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, s := range info.Shards {
		appendRow(t, u(uint64(s.Shard)), u(s.Committed), u(s.Delivered), u(s.Tail), u(s.Lag()), u(uint64(s.Claims)), u(uint64(s.Owed)), u(uint64(s.DeadLetters)))
	}
	if err := writeTable(w, t); err != nil {
		return err
	}
	if len(info.Members) == 0 {
		_, err := fmt.Fprintln(w, "no push members")
		return err
	}
	t = newTable("MEMBER", "SHARDS", "WINDOW", "IN_FLIGHT", "IDLE")
	for _, m := range info.Members {
		appendRow(t, m.ID, formatShards(m.Shards), u(uint64(m.Window)), u(uint64(m.InFlight)), m.Idle.String())
	}
	return writeTable(w, t)
}

// formatShards prints shards as "0,1,2", or "-" for none.
func formatShards(shards []uint32) string {
	if len(shards) == 0 {
		return "-"
	}
	s := make([]string, len(shards))
	for i, n := range shards {
		s[i] = strconv.FormatUint(uint64(n), 10)
	}
	return strings.Join(s, ",")
}

// groupInfoJSON is the --json form of a group's description; durations are
// in milliseconds.
type groupInfoJSON struct {
	Stream       string            `json:"stream"`
	Group        string            `json:"group"`
	Generation   uint64            `json:"generation"`
	VisibilityMS int64             `json:"visibility_ms"`
	SessionMS    int64             `json:"session_ms"`
	MaxAttempts  uint32            `json:"max_attempts"`
	Lag          uint64            `json:"lag"`
	Shards       []groupShardJSON  `json:"shards"`
	Members      []groupMemberJSON `json:"members"`
}

// groupShardJSON is one shard of groupInfoJSON.
type groupShardJSON struct {
	Shard       uint32 `json:"shard"`
	Committed   uint64 `json:"committed"`
	Delivered   uint64 `json:"delivered"`
	Tail        uint64 `json:"tail"`
	Lag         uint64 `json:"lag"`
	Claims      uint32 `json:"claims"`
	Owed        uint32 `json:"owed"`
	DeadLetters uint32 `json:"dead_letters"`
}

// groupMemberJSON is one member of groupInfoJSON.
type groupMemberJSON struct {
	ID       string   `json:"id"`
	Shards   []uint32 `json:"shards"`
	Window   uint32   `json:"window"`
	InFlight uint32   `json:"in_flight"`
	IdleMS   int64    `json:"idle_ms"`
}

// groupInfoJSONOf returns the --json form of info.
func groupInfoJSONOf(name client.StreamName, info client.GroupInfo) groupInfoJSON {
	j := groupInfoJSON{Stream: name.String(), Group: info.Group, Generation: info.Generation,
		VisibilityMS: info.Visibility.Milliseconds(), SessionMS: info.Session.Milliseconds(), MaxAttempts: info.MaxAttempts,
		Lag: info.Lag(), Shards: make([]groupShardJSON, len(info.Shards)), Members: make([]groupMemberJSON, len(info.Members))}
	for i, s := range info.Shards {
		j.Shards[i] = groupShardJSON{Shard: s.Shard, Committed: s.Committed, Delivered: s.Delivered, Tail: s.Tail, Lag: s.Lag(),
			Claims: s.Claims, Owed: s.Owed, DeadLetters: s.DeadLetters}
	}
	for i, m := range info.Members {
		shards := m.Shards
		if shards == nil {
			shards = []uint32{}
		}
		j.Members[i] = groupMemberJSON{ID: m.ID, Shards: shards, Window: m.Window, InFlight: m.InFlight, IdleMS: m.Idle.Milliseconds()}
	}
	return j
}
