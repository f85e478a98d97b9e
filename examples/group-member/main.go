// Command group-member is a worker in a consumer group: it joins the group
// as a push member with a credit window, processes each delivery and acks
// it (one call returns the credit and commits the records), and heartbeats
// while idle so it keeps its shards. Start several with different -member
// ids and the stream's shards are split among them; stop one and the others
// take its shards, with its unacked records delivered again.
//
//	go run ./examples/group-member -produce 1000 -member m1
//	go run ./examples/group-member -member m2 &   # in another terminal
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/heraldmq/herald/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "group-member:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("group-member", flag.ContinueOnError)
	server := fs.String("server", "127.0.0.1:7400", "node address")
	ca := fs.String("ca", "data/tls/ca.pem", "CA certificate that signed the node's certificate")
	stream := fs.String("stream", "examples/groups/jobs", "stream: tenant/namespace/stream (created durable with 4 shards if missing)")
	group := fs.String("group", "workers", "consumer group")
	member := fs.String("member", "m1", "this member's id")
	window := fs.Int("window", 100, "credit window: records pushed and not yet acked")
	heartbeat := fs.Duration("heartbeat", 10*time.Second, "send an empty ack when idle this long")
	produce := fs.Int("produce", 0, "publish this many keyed records first")
	count := fs.Int("count", 0, "exit after processing this many records (0: until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	c, err := client.Dial(ctx, *server, client.WithCAFile(*ca), client.WithToken(os.Getenv("HERALD_TOKEN")))
	if err != nil {
		return err
	}
	defer c.Close()
	name, err := client.ParseStreamName(*stream)
	if err != nil {
		return err
	}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 4, Durable: true}); err != nil {
		return err
	}
	if *produce > 0 {
		futures := make([]*client.PublishFuture, 0, *produce)
		for i := range *produce {
			job := fmt.Sprintf("job-%d", i)
			f, err := c.PublishAsync(ctx, name, [][]byte{[]byte(job)}, client.WithKey([]byte(job)))
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			if _, err := f.Wait(ctx); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "published %d jobs\n", *produce)
	}

	m, err := c.Group(name, *group).Subscribe(ctx, client.WithMember(*member), client.WithWindow(*window), client.WithHeartbeat(*heartbeat))
	if err != nil {
		return err
	}
	defer m.Close() // leaving at once hands our shards to the others
	fmt.Fprintf(out, "%s joined %s: shards %v\n", *member, *group, m.Assignment().Shards)

	processed := 0
	for *count == 0 || processed < *count {
		d, err := m.Next(ctx)
		if err != nil {
			return err
		}
		for _, r := range d.Records {
			// The work: here, print it. A record with Attempts > 1 was
			// delivered before and not acked (a member died, or a
			// visibility timeout lapsed): processing must be idempotent.
			fmt.Fprintf(out, "shard %d offset %d attempt %d: %s\n", r.Shard, r.Offset, r.Attempts, r.Payload)
		}
		// Ack after the work, never before: one call commits the records
		// durably, and only then returns their credit.
		if err := m.Ack(ctx, d); err != nil {
			return err
		}
		processed += len(d.Records)
	}
	fmt.Fprintf(out, "%s processed %d records\n", *member, processed)
	return nil
}
