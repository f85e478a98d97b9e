package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heraldmq/herald/client"
)

const streamUsage = `create|describe|list|delete STREAM [--shards N] [--routing hash|jump]
       [--ephemeral] [--overflow drop_new|drop_old|block] [--queue-capacity N] [--queue-max-bytes N]
       [--retention-age D] [--retention-bytes N]
       (the config flags are for create; list takes an optional TENANT or TENANT/NAMESPACE instead of STREAM)`

// streamCmd is a parsed `herald stream` command line.
type streamCmd struct {
	conn *clientFlags
	// op is create, describe, list or delete.
	op string
	// name is the stream (create, describe, delete).
	name client.StreamName
	// tenant and namespace filter list.
	tenant, namespace string
	// config is the stream config for create.
	config client.StreamConfig
}

// configFlags are the flags that set a created stream's config.
var configFlags = []string{"shards", "routing", "ephemeral", "overflow", "queue-capacity", "queue-max-bytes", "retention-age", "retention-bytes"}

// parseStreamCmd parses the arguments of `herald stream`.
func parseStreamCmd(args []string, stderr io.Writer, getenv func(string) string) (*streamCmd, error) {
	fs := newFlagSet("stream", streamUsage, stderr)
	cmd := &streamCmd{conn: registerClientFlags(fs, getenv)}
	shards := fs.Int("shards", 1, "number of shards (create)")
	routing := fs.String("routing", "hash", "how a key picks its shard: hash (hash % shards) or jump (jump consistent hashing) (create)")
	ephemeral := fs.Bool("ephemeral", false, "keep the stream in memory only (create)")
	overflow := fs.String("overflow", "drop_new", "what a full subscriber queue does to a live batch: drop_new, drop_old or block (create)")
	queueCap := fs.Int("queue-capacity", 0, "subscriber queue capacity in batches (0: the node's default) (create)")
	queueBytes := fs.Int64("queue-max-bytes", 0, "subscriber queue bound in payload bytes (0: the node's default) (create)")
	retentionAge := fs.Duration("retention-age", 0, "delete whole batches older than this, e.g. 72h (0: keep forever) (create)")
	retentionBytes := fs.Int64("retention-bytes", 0, "delete a shard's oldest whole batches past this many bytes (0: no bound) (create)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		return nil, usageErrorf("missing subcommand: create, describe, list or delete")
	}
	cmd.op = pos[0]
	switch cmd.op {
	case "create", "describe", "delete":
		if len(pos) != 2 {
			return nil, usageErrorf("%s takes one STREAM argument", cmd.op)
		}
		if cmd.name, err = parseStreamArg(pos[1]); err != nil {
			return nil, err
		}
	case "list":
		switch len(pos) {
		case 1:
			// The node lists the tenant of the credentials ("default"
			// without authentication).
		case 2:
			cmd.tenant, cmd.namespace, _ = strings.Cut(pos[1], "/")
			if cmd.tenant == "" || strings.Contains(cmd.namespace, "/") {
				return nil, usageErrorf("list takes TENANT or TENANT/NAMESPACE, got %q", pos[1])
			}
		default:
			return nil, usageErrorf("list takes at most one TENANT[/NAMESPACE] argument")
		}
	default:
		return nil, usageErrorf("unknown subcommand %q: want create, describe, list or delete", cmd.op)
	}
	if cmd.op != "create" {
		if f := setFlag(fs, configFlags...); f != "" {
			return nil, usageErrorf("--%s only applies to create", f)
		}
		return cmd, nil
	}
	cfg := client.StreamConfig{Shards: *shards, Durable: !*ephemeral, QueueCapacity: *queueCap,
		QueueMaxBytes: *queueBytes, RetentionAge: *retentionAge, RetentionBytes: *retentionBytes}
	if cfg.Routing, err = parseRouting(*routing); err != nil {
		return nil, err
	}
	if cfg.Overflow, err = parseOverflow(*overflow); err != nil {
		return nil, err
	}
	switch {
	case cfg.Shards < 1:
		return nil, usageErrorf("--shards must be at least 1")
	case cfg.QueueCapacity < 0 || int64(cfg.QueueCapacity) > 1<<32-1:
		return nil, usageErrorf("--queue-capacity must be between 0 and %d", uint32(1<<32-1))
	case cfg.QueueMaxBytes < 0:
		return nil, usageErrorf("--queue-max-bytes must not be negative")
	case cfg.RetentionAge < 0:
		return nil, usageErrorf("--retention-age must not be negative")
	case cfg.RetentionBytes < 0:
		return nil, usageErrorf("--retention-bytes must not be negative")
	}
	cmd.config = cfg
	return cmd, nil
}

// setFlag returns the first of names that was set on the command line, or
// "".
func setFlag(fs *flag.FlagSet, names ...string) string {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, n := range names {
		if set[n] {
			return n
		}
	}
	return ""
}

// parseRouting parses --routing.
func parseRouting(s string) (client.Routing, error) {
	switch s {
	case "hash":
		return client.RoutingHash, nil
	case "jump":
		return client.RoutingJump, nil
	}
	return 0, usageErrorf("--routing %q: want hash or jump", s)
}

// parseOverflow parses --overflow.
func parseOverflow(s string) (client.Overflow, error) {
	switch s {
	case "drop_new":
		return client.OverflowDropNew, nil
	case "drop_old":
		return client.OverflowDropOld, nil
	case "block":
		return client.OverflowBlock, nil
	}
	return 0, usageErrorf("--overflow %q: want drop_new, drop_old or block", s)
}

// runStream runs `herald stream create|describe|list|delete`: create,
// describe and list print one line per stream (name, config, creation time,
// shard tails) to stdout; delete prints "deleted STREAM".
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
		info, err := c.CreateStream(ctx, cmd.name, cmd.config)
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
	case "delete":
		if err := c.DeleteStream(ctx, cmd.name); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "deleted %s\n", cmd.name)
		return err
	}
	for _, info := range infos {
		if _, err := fmt.Fprintln(stdout, formatStreamInfo(info)); err != nil {
			return err
		}
	}
	return nil
}

// formatStreamInfo renders a stream as one line of key=value fields (0 for
// a queue bound means the node's default; 0 for retention, none):
//
//	acme/shop/orders shards=4 routing=hash durable=true overflow=drop_new queue_capacity=0
//	  queue_max_bytes=0 retention_age=72h0m0s retention_bytes=0 created=2026-01-02T03:04:05Z tails=10,0,7,3
func formatStreamInfo(info client.StreamInfo) string {
	tails := make([]string, len(info.Tails))
	for i, t := range info.Tails {
		tails[i] = strconv.FormatUint(t, 10)
	}
	cfg := info.Config
	return fmt.Sprintf("%s shards=%d routing=%s durable=%t overflow=%s queue_capacity=%d queue_max_bytes=%d retention_age=%s retention_bytes=%d created=%s tails=%s",
		info.Name, cfg.Shards, cfg.Routing, cfg.Durable, cfg.Overflow, cfg.QueueCapacity, cfg.QueueMaxBytes,
		cfg.RetentionAge, cfg.RetentionBytes, info.Created.UTC().Format(time.RFC3339), strings.Join(tails, ","))
}
