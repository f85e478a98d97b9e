package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/client"
)

// readCmd is a parsed `herald read` command line.
type readCmd struct {
	conn *clientFlags
	name client.StreamName
	// shard is the shard read (--shard).
	shard uint32
	// from is the first offset read (--from).
	from uint64
	// to is the offset reading stops before (--to); client.ReadToTail when
	// not given.
	to uint64
	// limit stops after this many records; 0 means no limit (--limit).
	limit int
	// json and yaml select the output (--output, --json).
	json, yaml bool
}

func newReadCmd(env *cliEnv) *cobra.Command {
	var out outputFlags
	var shard uint
	var to string
	cmd := &readCmd{}
	c := &cobra.Command{
		Use:   "read STREAM --shard N --from OFFSET",
		Short: "Read a range of a shard's committed records (never waits for more)",
		Long: `Read a shard's committed records from --from up to --to, or to the shard's tail, page by
page, and print one line per record ("shard offset payload", or JSON with --json). It
never waits for more records. Last, it prints "next OFFSET" on stderr: where to read on
from.

` + replicaHelp + `

` + streamArgHelp,
		Example: `  herald read orders --shard 0 --from 100 --to 200 --limit 50
  herald read acme/shop/orders --shard 2 --from 1041 --limit 1 --json
  herald read orders --shard 0 --from 0 --server a:7400,b:7400,c:7400 --replica leader`,
		Args: cobra.ArbitraryArgs,
	}
	cmd.conn = registerClientFlags(c.Flags())
	f := c.Flags()
	f.UintVar(&shard, "shard", 0, "shard to read (required)")
	f.Uint64Var(&cmd.from, "from", 0, "first `offset` to read (required)")
	f.StringVar(&to, "to", "", "stop before this `offset` (default: the shard's tail when read)")
	f.IntVar(&cmd.limit, "limit", 0, "read at most this many records (0: no limit)")
	addOutputFlags(c, &out, `a line {"shard","offset","timestamp","key","headers","payload"} per record, as herald sub prints`)
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
		cmd.to = client.ReadToTail
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
		if !c.Flags().Changed("shard") || !c.Flags().Changed("from") {
			return usageErrorf("--shard and --from are required")
		}
		if shard > 1<<32-1 {
			return usageErrorf("--shard must fit in 32 bits")
		}
		cmd.shard = uint32(shard)
		if to != "" {
			if cmd.to, err = strconv.ParseUint(to, 10, 64); err != nil {
				return usageErrorf("--to %q: want an offset", to)
			}
			if cmd.to < cmd.from {
				return usageErrorf("--to %d is before --from %d", cmd.to, cmd.from)
			}
		}
		if cmd.limit < 0 {
			return usageErrorf("--limit must not be negative")
		}
		return parsedOrRun(env, cmd, func() error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return cmd.run(ctx, env.stdout, env.stderr)
		})
	}
	return c
}

func (cmd *readCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	var read pageReader
	if cmd.conn.clustered() {
		// Several nodes: read where the shard's replica (or leader) is,
		// following the cluster.
		cc, err := cmd.conn.dialCluster(ctx)
		if err != nil {
			return interrupted(ctx, err)
		}
		defer cc.Close()
		read = func(ctx context.Context, start uint64, opts ...client.ReadOption) (client.ReadPage, error) {
			return cc.Read(ctx, cmd.name, cmd.shard, start, cmd.to, opts...)
		}
	} else {
		c, err := cmd.conn.dial(ctx)
		if err != nil {
			return interrupted(ctx, err)
		}
		defer c.Close()
		read = func(ctx context.Context, start uint64, opts ...client.ReadOption) (client.ReadPage, error) {
			return c.Read(ctx, cmd.name, cmd.shard, start, cmd.to, opts...)
		}
	}
	out := bufio.NewWriter(stdout)
	next, err := cmd.readPages(ctx, read, out)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return interrupted(ctx, err)
	}
	_, err = fmt.Fprintf(stderr, "next %d\n", next)
	return err
}

// pageReader reads the page of the command's shard that starts at start
// (client.Client.Read, or a fake in tests).
type pageReader func(ctx context.Context, start uint64, opts ...client.ReadOption) (client.ReadPage, error)

// readPages reads and prints pages until the end, the tail or the limit,
// and returns the offset to read on from.
func (cmd *readCmd) readPages(ctx context.Context, read pageReader, out *bufio.Writer) (uint64, error) {
	next, printed := cmd.from, 0
	rw := &recordWriter{format: format(cmd.json, cmd.yaml), w: out}
	for cmd.to == client.ReadToTail || next < cmd.to {
		var opts []client.ReadOption
		if cmd.limit > 0 {
			opts = append(opts, client.WithMaxRecords(cmd.limit-printed))
		}
		pctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		page, err := read(pctx, next, opts...)
		cancel()
		if err != nil {
			return next, err
		}
		for _, ev := range page.Records {
			if rw.format.structured() {
				err = rw.write(eventJSONOf(ev))
			} else {
				err = writeEventText(out, ev)
			}
			if err != nil {
				return next, err
			}
			next = ev.Offset + 1
			if printed++; cmd.limit > 0 && printed == cmd.limit {
				return next, nil
			}
		}
		if page.Next <= next && len(page.Records) == 0 {
			return next, nil // nothing more committed
		}
		next = max(next, page.Next)
		if next >= page.Tail {
			return next, nil
		}
	}
	return next, nil
}
