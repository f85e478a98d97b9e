package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heraldmq/herald/client"
)

const streamUsage = `create|describe|list STREAM [--shards N] [--ephemeral]
       (list takes an optional TENANT or TENANT/NAMESPACE instead of STREAM)`

// streamCmd is a parsed `herald stream` command line.
type streamCmd struct {
	conn *clientFlags
	// op is create, describe or list.
	op string
	// name is the stream (create, describe).
	name client.StreamName
	// tenant and namespace filter list.
	tenant, namespace string
	// shards and ephemeral configure create.
	shards    int
	ephemeral bool
}

// parseStreamCmd parses the arguments of `herald stream`.
func parseStreamCmd(args []string, stderr io.Writer, getenv func(string) string) (*streamCmd, error) {
	fs := newFlagSet("stream", streamUsage, stderr)
	cmd := &streamCmd{conn: registerClientFlags(fs, getenv)}
	fs.IntVar(&cmd.shards, "shards", 1, "number of shards (create)")
	fs.BoolVar(&cmd.ephemeral, "ephemeral", false, "keep the stream in memory only (create)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		return nil, usageErrorf("missing subcommand: create, describe or list")
	}
	cmd.op = pos[0]
	switch cmd.op {
	case "create", "describe":
		if len(pos) != 2 {
			return nil, usageErrorf("%s takes one STREAM argument", cmd.op)
		}
		if cmd.name, err = parseStreamArg(pos[1]); err != nil {
			return nil, err
		}
		if cmd.shards < 1 {
			return nil, usageErrorf("--shards must be at least 1")
		}
	case "list":
		switch len(pos) {
		case 1:
			cmd.tenant = "default"
		case 2:
			cmd.tenant, cmd.namespace, _ = strings.Cut(pos[1], "/")
			if cmd.tenant == "" || strings.Contains(cmd.namespace, "/") {
				return nil, usageErrorf("list takes TENANT or TENANT/NAMESPACE, got %q", pos[1])
			}
		default:
			return nil, usageErrorf("list takes at most one TENANT[/NAMESPACE] argument")
		}
	default:
		return nil, usageErrorf("unknown subcommand %q: want create, describe or list", cmd.op)
	}
	return cmd, nil
}

// runStream runs `herald stream create|describe|list`: it prints one line
// per stream (name, config, creation time, shard tails) to stdout.
func runStream(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, err := parseStreamCmd(args, stderr, os.Getenv)
	if err != nil {
		return exitStatus(stderr, "stream", err)
	}
	return exitStatus(stderr, "stream "+cmd.op, cmd.run(context.Background(), stdout))
}

func (cmd *streamCmd) run(ctx context.Context, stdout io.Writer) error {
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
	defer cancel()

	var infos []client.StreamInfo
	switch cmd.op {
	case "create":
		info, err := c.CreateStream(ctx, cmd.name, client.StreamConfig{Shards: cmd.shards, Durable: !cmd.ephemeral})
		if err != nil {
			return err
		}
		infos = append(infos, info)
	case "describe":
		info, err := c.DescribeStream(ctx, cmd.name)
		if err != nil {
			return err
		}
		infos = append(infos, info)
	case "list":
		if infos, err = c.ListStreams(ctx, cmd.tenant, cmd.namespace); err != nil {
			return err
		}
	}
	for _, info := range infos {
		if _, err := fmt.Fprintln(stdout, formatStreamInfo(info)); err != nil {
			return err
		}
	}
	return nil
}

// formatStreamInfo renders a stream as one line:
//
//	acme/shop/orders shards=4 durable=true created=2026-01-02T03:04:05Z tails=10,0,7,3
func formatStreamInfo(info client.StreamInfo) string {
	tails := make([]string, len(info.Tails))
	for i, t := range info.Tails {
		tails[i] = strconv.FormatUint(t, 10)
	}
	return fmt.Sprintf("%s shards=%d durable=%t created=%s tails=%s", info.Name, info.Config.Shards,
		info.Config.Durable, info.Created.UTC().Format(time.RFC3339), strings.Join(tails, ","))
}
