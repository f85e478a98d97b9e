package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
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
	"list": {"list STREAM", "List a stream's consumer groups with their members and lag",
		`Print a table of the stream's consumer groups, in name order, each with its push members
and its lag (records between its committed position and the shards' tails, summed over
shards), as its coordinator last published them.`},
	"seek": {"seek STREAM GROUP (--to-offset N | --to-time T | --to-earliest | --to-latest)", "Move a group's committed position: replay or skip records",
		`Set the group's committed position on every shard (or --shard's) and print each shard's new
position: --to-offset N (clamped to what the shard retains), --to-time T (RFC 3339: each
shard's first record committed at or after T, or its tail when it has none that recent),
--to-earliest (replay everything retained) or --to-latest (skip the backlog). Everything
below the position counts as settled, everything from it on is delivered again, attempts
counted from 1. A group never used is created there.

It is refused (group_in_use) while the group has push members, or while a shard it moves
has records claimed: stop the members (herald sub --group), let the claims settle, then
seek. The group may be given as GROUP or with --group.`},
	"delete": {"delete STREAM GROUP", "Delete a consumer group and all its state",
		`Delete a consumer group and all its state, for good: cursors, attempts, dead letters. The
next poll or member of the name starts a new group at the stream's first retained record.
It is refused (group_in_use) while the group has push members. The group may be given as
GROUP or with --group.

On a terminal it asks for confirmation first, unless --force. When standard input is not
a terminal (a script, a pipe) it deletes nothing without --force: there is nobody to ask.`},
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
	"list":         "  herald group list orders\n  herald group list acme/shop/orders -o json",
	"seek": "  herald group seek orders fulfilment --to-time 2026-12-01T10:00:00Z   # replay from then\n" +
		"  herald group seek orders fulfilment --to-latest                      # skip the backlog\n" +
		"  herald group seek orders fulfilment --shard 2 --to-offset 1041",
	"delete": "  herald group delete orders fulfilment          # asks: Delete group fulfilment on default/default/orders ...? [y/N]\n" +
		"  herald group delete orders fulfilment --force  # in scripts",
}

// groupOps are the subcommands of `herald group`, in help order.
var groupOps = []string{"poll", "ack", "nack", "dead-letters", "redrive", "discard", "describe", "list", "seek", "delete"}

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
	// dead-letters, describe, list, seek and delete.
	json bool
	yaml bool
	// to is where seek moves the group (--to-offset, --to-time,
	// --to-earliest, --to-latest).
	to client.SeekTarget
	// force deletes without asking (delete --force).
	force bool
}

// seekFlags are the flags of `herald group seek` that say where to.
type seekFlags struct {
	offset           uint64
	time             string
	earliest, latest bool
}

func newGroupCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("group", "Inspect, consume from, repair and administer consumer groups",
		`Inspect, consume from and repair a consumer group on a durable stream; list a stream's
groups, move a group's position and delete a group. (herald sub STREAM --group G runs a
push member.)

`+streamArgHelp,
		`  herald group describe orders --group fulfilment
  herald group poll orders --group fulfilment --shard 0 --max 10
  herald group dead-letters orders --group fulfilment
  herald group list orders
  herald group seek orders fulfilment --to-time 2026-12-01T10:00:00Z`)
	conn := registerClientFlags(c.PersistentFlags())
	var group string
	c.PersistentFlags().StringVar(&group, "group", "", "the consumer `group` (required; seek and delete also take it as GROUP, list takes none)")
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
	var seek seekFlags
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
	case "list":
		addOutputFlags(c, &out, `one object: {"stream", "groups": [{"group","members","lag"}]}`)
	case "seek":
		f.UintVar(&shard, "shard", 0, "move this shard only (default every shard)")
		f.Uint64Var(&seek.offset, "to-offset", 0, "move to this `offset`, clamped to what each shard retains")
		f.StringVar(&seek.time, "to-time", "", "move to the first record committed at or after this RFC 3339 `time`, e.g. 2026-12-01T10:00:00Z")
		f.BoolVar(&seek.earliest, "to-earliest", false, "move to the first retained record: replay everything")
		f.BoolVar(&seek.latest, "to-latest", false, "move to the tail: skip the backlog")
		addOutputFlags(c, &out, `one object: {"stream", "group", "shards": [{"shard","committed"}]}`)
	case "delete":
		f.BoolVarP(&cmd.force, "force", "f", false, "delete without asking for confirmation")
		addOutputFlags(c, &out, `one object: {"stream", "deleted": GROUP}`)
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
		if err := cmd.parseArgs(c, args, shard, &seek); err != nil {
			return err
		}
		return parsedOrRun(env, cmd, func() error {
			if cmd.op == "delete" && !cmd.force && !env.isTerminal(env.stdin) {
				return usageErrorf("not deleting group %s on %s: standard input is not a terminal, so nobody can confirm; pass --force to delete it", cmd.group, cmd.name)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return cmd.run(ctx, env)
		})
	}
	return c
}

// parseArgs checks the arguments and flags of the subcommand.
func (cmd *groupCmd) parseArgs(c *cobra.Command, args []string, shard uint, seek *seekFlags) error {
	if len(args) < 1 {
		return usageErrorf("missing STREAM")
	}
	var err error
	if cmd.name, err = parseStreamArg(args[0], cmd.conn.tenant); err != nil {
		return err
	}
	switch cmd.op {
	case "list":
		switch {
		case c.Flags().Changed("group"):
			return usageErrorf("list takes no --group: it lists every group of the stream")
		case len(args) > 1:
			return usageErrorf("unexpected argument %q", args[1])
		}
		return nil
	case "seek", "delete":
		if args, err = cmd.groupArg(c, args); err != nil {
			return err
		}
	default:
		if !c.Flags().Changed("group") {
			return usageErrorf("--group is required")
		}
		if err := checkGroupName("group", cmd.group); err != nil {
			return err
		}
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
	case "seek":
		return cmd.parseSeekTarget(c, seek)
	}
	return nil
}

// groupArg takes the group of seek and delete from the GROUP argument or
// --group (one of them, or both the same) and returns the arguments left.
func (cmd *groupCmd) groupArg(c *cobra.Command, args []string) ([]string, error) {
	byFlag := c.Flags().Changed("group")
	switch {
	case len(args) > 2:
		return nil, usageErrorf("unexpected argument %q", args[2])
	case len(args) == 2 && byFlag && args[1] != cmd.group:
		return nil, usageErrorf("GROUP %q and --group %q differ: give the group once", args[1], cmd.group)
	case len(args) == 2:
		cmd.group = args[1]
		if err := checkName("GROUP", cmd.group); err != nil {
			return nil, err
		}
	case !byFlag:
		return nil, usageErrorf("%s needs GROUP: herald group %s STREAM GROUP", cmd.op, cmd.op)
	default:
		if err := checkGroupName("group", cmd.group); err != nil {
			return nil, err
		}
	}
	return args[:1], nil
}

// parseSeekTarget sets where seek moves the group: exactly one of
// --to-offset, --to-time, --to-earliest and --to-latest.
func (cmd *groupCmd) parseSeekTarget(c *cobra.Command, seek *seekFlags) error {
	fs := c.Flags()
	given := 0
	for _, set := range []bool{fs.Changed("to-offset"), fs.Changed("to-time"), seek.earliest, seek.latest} {
		if set {
			given++
		}
	}
	switch {
	case given == 0:
		return usageErrorf("seek needs where to: --to-offset N, --to-time T, --to-earliest or --to-latest")
	case given > 1:
		return usageErrorf("--to-offset, --to-time, --to-earliest and --to-latest say where to seek: give only one")
	case fs.Changed("to-offset"):
		cmd.to = client.SeekToOffset(seek.offset)
	case fs.Changed("to-time"):
		t, err := time.Parse(time.RFC3339Nano, seek.time)
		if err != nil {
			return usageErrorf("--to-time %q: want an RFC 3339 time such as 2026-12-01T10:00:00Z or 2026-12-01T11:00:00+01:00", seek.time)
		}
		cmd.to = client.SeekToTime(t)
	case seek.earliest:
		cmd.to = client.SeekToEarliest()
	default:
		cmd.to = client.SeekToLatest()
	}
	return nil
}

func (cmd *groupCmd) run(ctx context.Context, env *cliEnv) error {
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return interrupted(ctx, err)
	}
	defer c.Close()
	out := bufio.NewWriter(env.stdout)
	err = cmd.do(ctx, c, out, env)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	return interrupted(ctx, err)
}

// do runs the subcommand on c; delete asks env's terminal for
// confirmation.
func (cmd *groupCmd) do(ctx context.Context, c *client.Client, out *bufio.Writer, env *cliEnv) error {
	stderr := env.stderr
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
	case "list":
		cctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		groups, err := c.ListGroups(cctx, cmd.name)
		if err != nil {
			return err
		}
		if f := format(cmd.json, cmd.yaml); f.structured() {
			return writeValue(out, f, groupListJSONOf(cmd.name, groups))
		}
		return writeGroupList(out, cmd.name, groups)
	case "seek":
		cctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		positions, err := c.Group(cmd.name, cmd.group).Seek(cctx, cmd.shard, cmd.to)
		if err != nil {
			return err
		}
		j := groupSeekJSONOf(cmd.name, cmd.group, positions)
		if f := format(cmd.json, cmd.yaml); f.structured() {
			return writeValue(out, f, j)
		}
		return writeGroupSeek(out, j)
	case "delete":
		return cmd.delete(ctx, c, out, env)
	}
	return fmt.Errorf("unknown subcommand %q", cmd.op) // parseGroupCmd refuses it
}

// delete deletes the group, after asking on the terminal unless --force
// (run refuses to go on without --force when there is no terminal).
func (cmd *groupCmd) delete(ctx context.Context, c *client.Client, out *bufio.Writer, env *cliEnv) error {
	g := c.Group(cmd.name, cmd.group)
	if !cmd.force {
		// The figures need consume permission, the delete manage: a
		// credential without the first is asked without them.
		dctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		info, err := g.Describe(dctx)
		cancel()
		prompt := fmt.Sprintf("Delete group %s on %s and all its state?", cmd.group, cmd.name)
		switch {
		case err == nil:
			var dead uint64
			for _, s := range info.Shards {
				dead += uint64(s.DeadLetters)
			}
			prompt = fmt.Sprintf("Delete group %s on %s (lag %d, %d dead letters, %d push members) and all its state?",
				cmd.group, cmd.name, info.Lag(), dead, len(info.Members))
		case !errors.Is(err, client.ErrPermissionDenied):
			return err
		}
		if err := confirm(ctx, env, prompt); err != nil {
			return err
		}
	}
	// The delete's own --timeout, after however long the prompt took.
	ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
	defer cancel()
	if err := g.Delete(ctx); err != nil {
		return err
	}
	if f := format(cmd.json, cmd.yaml); f.structured() {
		return writeValue(out, f, groupDeletedJSON{Stream: cmd.name.String(), Deleted: cmd.group})
	}
	_, err := fmt.Fprintf(out, "deleted group %s on %s\n", cmd.group, cmd.name)
	return err
}

// writeGroupList prints a caption and a table of a stream's groups, or a
// sentence when it has none.
func writeGroupList(w io.Writer, name client.StreamName, groups []client.GroupSummary) error {
	if len(groups) == 0 {
		_, err := fmt.Fprintf(w, "No groups on %s.\n", name)
		return err
	}
	noun := "groups"
	if len(groups) == 1 {
		noun = "group"
	}
	fmt.Fprintf(w, "%d %s on %s:\n", len(groups), noun, name)
	t := newTable("GROUP", "MEMBERS", "LAG")
	for _, g := range groups {
		appendRow(t, g.Group, strconv.FormatUint(uint64(g.Members), 10), strconv.FormatUint(g.Lag, 10))
	}
	return writeTable(w, t)
}

// groupListJSON is the --json form of a stream's groups.
type groupListJSON struct {
	Stream string             `json:"stream"`
	Groups []groupSummaryJSON `json:"groups"`
}

// groupSummaryJSON is one group of groupListJSON.
type groupSummaryJSON struct {
	Group   string `json:"group"`
	Members uint32 `json:"members"`
	Lag     uint64 `json:"lag"`
}

// groupListJSONOf returns the --json form of a stream's groups.
func groupListJSONOf(name client.StreamName, groups []client.GroupSummary) groupListJSON {
	j := groupListJSON{Stream: name.String(), Groups: make([]groupSummaryJSON, len(groups))}
	for i, g := range groups {
		j.Groups[i] = groupSummaryJSON(g)
	}
	return j
}

// groupSeekJSON is the --json form of a seek's outcome: each sought shard's
// new committed position, in shard order.
type groupSeekJSON struct {
	Stream string              `json:"stream"`
	Group  string              `json:"group"`
	Shards []groupPositionJSON `json:"shards"`
}

// groupPositionJSON is one shard of groupSeekJSON.
type groupPositionJSON struct {
	Shard     uint32 `json:"shard"`
	Committed uint64 `json:"committed"`
}

// groupSeekJSONOf returns the --json form of positions, in shard order.
func groupSeekJSONOf(name client.StreamName, group string, positions map[uint32]uint64) groupSeekJSON {
	j := groupSeekJSON{Stream: name.String(), Group: group, Shards: make([]groupPositionJSON, 0, len(positions))}
	for _, shard := range slices.Sorted(maps.Keys(positions)) {
		j.Shards = append(j.Shards, groupPositionJSON{Shard: shard, Committed: positions[shard]})
	}
	return j
}

// writeGroupSeek prints a seek's outcome: a caption and a table of each
// shard's new committed position.
func writeGroupSeek(w io.Writer, j groupSeekJSON) error {
	fmt.Fprintf(w, "group %s on %s moved:\n", j.Group, j.Stream)
	t := newTable("SHARD", "COMMITTED")
	for _, s := range j.Shards {
		appendRow(t, strconv.FormatUint(uint64(s.Shard), 10), strconv.FormatUint(s.Committed, 10))
	}
	return writeTable(w, t)
}

// groupDeletedJSON is the --json form of a delete's outcome.
type groupDeletedJSON struct {
	Stream  string `json:"stream"`
	Deleted string `json:"deleted"`
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
