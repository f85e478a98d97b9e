package client_test

import (
	"context"
	"errors"
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

	sub, err := c.Subscribe(ctx, orders, client.WithShard(first.Shard), client.WithStartOffset(first.Offset))
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

// ExampleClient_PublishIf is a single writer that publishes only if the
// shard has not moved since it last wrote.
func ExampleClient_PublishIf() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	game := client.StreamName{Tenant: "acme", Namespace: "games", Stream: "match-7"}
	next := uint64(0)
	res, err := c.PublishIf(ctx, game, [][]byte{[]byte("tick 120")}, next)
	switch {
	case err != nil:
		log.Fatal(err) // the outcome may be unknown: read the shard at next to find out
	case !res.Written:
		log.Fatalf("lost the stream: its tail is %d", res.Tail)
	}
	next = res.Offset + 1
	fmt.Println("next write expects", next)
}

// ExampleProducer publishes idempotently and re-sends after an error whose
// outcome is unknown.
func ExampleProducer() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	p := c.NewProducer(orders, 42)
	key, payloads := []byte("customer-7"), [][]byte{[]byte("order 1")}
	ack, err := p.Publish(ctx, payloads, client.WithKey(key))
	var pe *client.ProducerError
	if errors.As(err, &pe) {
		// Same payloads, same sequence: written at most once.
		ack, err = p.PublishSequence(ctx, pe.Sequence, payloads, client.WithKey(key))
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ack.Shard, ack.Offset, ack.Duplicate)
}

// ExampleClient_Read reads a shard from an offset to its tail, page by page.
func ExampleClient_Read() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	for next := uint64(0); ; {
		page, err := c.Read(ctx, orders, 0, next, client.ReadToTail, client.WithMaxRecords(100))
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range page.Records {
			fmt.Printf("%d %s\n", ev.Offset, ev.Payload)
		}
		if page.Next >= page.Tail || page.Next == next {
			break
		}
		next = page.Next
	}
}

// ExampleClient_Subscribe subscribes to every shard of a stream, resuming
// lagged shards by itself.
func ExampleClient_Subscribe() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	// Resume shards 0 and 1 where the application left them; others from now.
	sub, err := c.Subscribe(ctx, orders, client.WithStartLatest(),
		client.WithStartOffsets(map[uint32]uint64{0: 1200, 1: 877}), client.WithAutoResume())
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %d %s\n", ev.Shard, ev.Offset, ev.Payload)
	}
}

// ExampleWithReconnect dials a node that may restart: the client reconnects
// by itself (here for at most a minute after each loss), tells the
// application as it goes, and its subscription goes on without a gap. It
// needs a running node, so it has no checked output.
func ExampleWithReconnect() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, "127.0.0.1:7400,127.0.0.1:7410", client.WithCAFile("data/tls/ca.pem"),
		client.WithReconnect(client.Reconnect{Timeout: time.Minute}),
		client.WithConnectionEvents(func(ev client.ConnectionEvent) {
			log.Printf("herald %s %s: %v", ev.Kind, ev.Addr, ev.Err)
		}))
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrNoNodeAnswered): nothing listens there
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	sub, err := c.Subscribe(ctx, orders, client.WithStartEarliest())
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		var gap *client.GapError
		switch {
		case errors.As(err, &gap):
			log.Printf("shard %d: records from %d lost across a restart; going on at %d", gap.Shard, gap.From, gap.To)
			continue
		case err != nil:
			log.Print(err) // the context ended, or reconnecting gave up (*client.ReconnectError)
			return
		}
		fmt.Println(ev.Shard, ev.Offset, string(ev.Payload))
	}
}
