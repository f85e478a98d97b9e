package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/heraldmq/herald/client"
)

// ExampleClient publishes to a stream of a local development node and reads
// the records back. It needs a running node (herald node), so it has no
// checked output.
func ExampleClient() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	if _, err := c.CreateStream(ctx, orders, client.StreamConfig{Shards: 4, Durable: true}); err != nil {
		log.Fatal(err)
	}

	// Pipeline a few publishes from one goroutine, then wait for the acks.
	var futures []*client.PublishFuture
	for i := range 3 {
		f, err := c.PublishAsync(ctx, orders, [][]byte{[]byte(fmt.Sprint("order ", i))},
			client.WithKey([]byte("customer-7")))
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, f)
	}
	var first client.PublishAck
	for i, f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if i == 0 {
			first = ack
		}
	}

	sub, err := c.Subscribe(ctx, orders, client.OnShard(first.Shard), client.FromOffset(first.Offset))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for range 3 {
		ev, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %d %s\n", ev.Shard, ev.Offset, ev.Payload)
	}
}
