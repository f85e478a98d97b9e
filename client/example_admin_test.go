package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/heraldmq/herald/client"
)

// ExampleWithStartTime subscribes to the records of the last ten minutes,
// on every shard, then follows new ones. It needs a running node (herald
// node), so it has no checked output.
func ExampleWithStartTime() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	sub, err := c.Subscribe(ctx, orders, client.WithStartTime(time.Now().Add(-10*time.Minute)))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	fmt.Println("starting at", sub.StartOffsets()) // per shard: the first offset of the last ten minutes, or the tail
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %d %s %s\n", ev.Shard, ev.Offset, ev.Timestamp.Format(time.RFC3339), ev.Payload)
	}
}

// ExampleGroup_Seek replays the last hour to a consumer group, after its
// members have stopped, and lists the stream's groups.
func ExampleGroup_Seek() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	g := c.Group(orders, "fulfilment")
	positions, err := g.Seek(ctx, client.AllShards, client.SeekToTime(time.Now().Add(-time.Hour)))
	switch {
	case errors.Is(err, client.ErrGroupInUse):
		log.Fatal("stop the group's members (or let its claims settle) first: ", err)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println("the group resumes at", positions)

	groups, err := c.ListGroups(ctx, orders)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range groups {
		fmt.Printf("%s: %d members, lag %d\n", s.Group, s.Members, s.Lag)
	}
}
