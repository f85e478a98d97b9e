package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/heraldmq/herald/client"
)

// ExampleClient_GroupPoll is a pull consumer of the group "fulfilment":
// it claims records of shard 0, handles them and acks or nacks each.
func ExampleClient_GroupPoll() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	for {
		// Give the call more time than the poll's wait.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		recs, err := c.GroupPoll(pctx, orders, 0, "fulfilment", 32, 5*time.Second)
		cancel()
		if errors.Is(err, client.ErrTooManyClaims) {
			time.Sleep(time.Second)
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, rec := range recs {
			if rec.Attempts > 1 {
				fmt.Printf("offset %d again, attempt %d\n", rec.Offset, rec.Attempts)
			}
			settle := c.GroupAck
			if len(rec.Payload) == 0 {
				settle = c.GroupNack // hand it back for another try
			}
			if err := settle(ctx, orders, rec.Shard, "fulfilment", rec.Offset); err != nil {
				log.Fatal(err)
			}
		}
	}
}

// ExampleClient_SubscribeGroup is a push member of the group "live": the
// node assigns it shards and pushes their records; each delivery is acked
// with its cursor.
func ExampleClient_SubscribeGroup() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	gs, err := c.SubscribeGroup(ctx, orders, "live", client.Window(100), client.MaxPerPush(50),
		client.Member("m1"), client.Heartbeat(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer gs.Close()
	fmt.Println("assigned shards", gs.Assignment().Shards)
	for {
		d, err := gs.Next(ctx)
		if err != nil {
			log.Fatal(err) // for example ErrSessionExpired: subscribe again
		}
		for _, rec := range d.Records {
			fmt.Printf("%d/%d %s\n", rec.Shard, rec.Offset, rec.Payload)
		}
		err = gs.Ack(ctx, d.Cursor, len(d.Records))
		if errors.Is(err, client.ErrStaleCursor) {
			continue // the shard moved to another member, which gets these records again
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}

// ExampleClient_GroupDeadLetters lists the dead letters of the group
// "fulfilment" on shard 2 and gives them back to the group.
func ExampleClient_GroupDeadLetters() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	letters, more, err := c.GroupDeadLetters(ctx, orders, "fulfilment", client.DeadLetterShard(2), client.DeadLetterLimit(100))
	if err != nil {
		log.Fatal(err)
	}
	offsets := make([]uint64, len(letters))
	for i, dl := range letters {
		fmt.Printf("%d/%d after %d attempts: %s\n", dl.Shard, dl.Offset, dl.Attempts, dl.Reason)
		offsets[i] = dl.Offset
	}
	if len(offsets) > 0 {
		n, err := c.GroupRedrive(ctx, orders, "fulfilment", 2, offsets...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("redriven", n, "more to list:", more)
	}
}
