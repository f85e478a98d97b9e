// Command pubsub creates a stream, publishes records with pipelined acked
// publishes, and reads them back with a subscription: the smallest useful
// Herald program.
//
//	go run ./examples/pubsub -count 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/heraldmq/herald/client"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pubsub:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("pubsub", flag.ContinueOnError)
	server := fs.String("server", "127.0.0.1:7400", "node address")
	ca := fs.String("ca", "data/tls/ca.pem", "CA certificate that signed the node's certificate")
	stream := fs.String("stream", "examples/pubsub/demo", "stream: tenant/namespace/stream")
	count := fs.Int("count", 100, "records to publish")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	c, err := client.Dial(ctx, *server, client.WithCAFile(*ca), client.WithToken(os.Getenv("HERALD_TOKEN")))
	if err != nil {
		return err
	}
	defer c.Close()
	name, err := client.ParseStreamName(*stream)
	if err != nil {
		return err
	}
	info, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true})
	if err != nil {
		return err
	}
	start := info.Tails[0] // the stream may already hold records from an earlier run

	// Pipeline: issue every publish, then wait for the acks in order.
	futures := make([]*client.PublishFuture, 0, *count)
	for i := range *count {
		f, err := c.PublishAsync(ctx, name, [][]byte{fmt.Appendf(nil, "record %d", i)})
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	var last client.PublishAck
	for _, f := range futures {
		if last, err = f.Wait(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "published %d records to %s, last at offset %d\n", *count, name, last.Offset)

	sub, err := c.Subscribe(ctx, name, client.WithStartOffset(start))
	if err != nil {
		return err
	}
	defer sub.Close()
	for range *count {
		ev, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		if ev.Offset == start || ev.Offset == last.Offset {
			fmt.Fprintf(out, "offset %d: %s\n", ev.Offset, ev.Payload)
		}
	}
	fmt.Fprintf(out, "read %d records back\n", *count)
	return nil
}
