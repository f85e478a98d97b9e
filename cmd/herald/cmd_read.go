package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"

	"github.com/heraldmq/herald/client"
)

const readUsage = `STREAM --shard N --from OFFSET [--to OFFSET] [--limit N] [--json]
       (reads committed records from OFFSET up to --to, or to the shard's tail; never waits)`

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
	// json prints JSON lines (--json).
	json bool
}

// parseReadCmd parses the arguments of `herald read`.
func parseReadCmd(args []string, stderr io.Writer, getenv func(string) string) (*readCmd, error) {
	fs := newFlagSet("read", readUsage, stderr)
	cmd := &readCmd{conn: registerClientFlags(fs, getenv), to: client.ReadToTail}
	shard := fs.Uint("shard", 0, "shard to read (required)")
	fs.Uint64Var(&cmd.from, "from", 0, "first `offset` to read (required)")
	to := fs.String("to", "", "stop before this `offset` (default: the shard's tail when read)")
	fs.IntVar(&cmd.limit, "limit", 0, "read at most this many records (0: no limit)")
	fs.BoolVar(&cmd.json, "json", false, `print JSON lines {"shard","offset","timestamp","key","payload"}, as herald sub does`)
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
	if setFlag(fs, "shard") == "" || setFlag(fs, "from") == "" {
		return nil, usageErrorf("--shard and --from are required")
	}
	if *shard > 1<<32-1 {
		return nil, usageErrorf("--shard must fit in 32 bits")
	}
	cmd.shard = uint32(*shard)
	if *to != "" {
		if cmd.to, err = strconv.ParseUint(*to, 10, 64); err != nil {
			return nil, usageErrorf("--to %q: want an offset", *to)
		}
		if cmd.to < cmd.from {
			return nil, usageErrorf("--to %d is before --from %d", cmd.to, cmd.from)
		}
	}
	if cmd.limit < 0 {
		return nil, usageErrorf("--limit must not be negative")
	}
	return cmd, nil
}

// runRead runs `herald read`: it reads the shard's committed records in
// [--from, --to) page by page, stopping at the shard's tail (it never waits
// for more) or after --limit records, prints one line per record ("shard
// offset payload", or JSON with --json) to stdout and, last, "next OFFSET"
// (where to read on from) to stderr.
func runRead(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, err := parseReadCmd(args, stderr, os.Getenv)
	if err != nil {
		return exitStatus(stderr, "read", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return exitStatus(stderr, "read", cmd.run(ctx, stdout, stderr))
}

func (cmd *readCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return interrupted(ctx, err)
	}
	defer c.Close()
	out := bufio.NewWriter(stdout)
	read := func(ctx context.Context, start uint64, opts ...client.ReadOption) (client.ReadPage, error) {
		return c.Read(ctx, cmd.name, cmd.shard, start, cmd.to, opts...)
	}
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
			if cmd.json {
				err = writeEventJSON(out, ev)
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
