package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/heraldmq/herald/client"
)

// ExampleGroup_Poll is a pull consumer of the group "fulfilment": it claims
// records of shard 0, handles them, and acks the good ones and nacks the
// others, each in one request.
func ExampleGroup_Poll() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	g := c.Group(orders, "fulfilment")
	for {
		// Give the call more time than the poll's wait.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		recs, err := g.Poll(pctx, 0, 32, 5*time.Second)
		cancel()
		if errors.Is(err, client.ErrTooManyClaims) {
			time.Sleep(time.Second)
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		var done, again []client.GroupRecord
		for _, rec := range recs {
			if rec.Attempts > 1 {
				fmt.Printf("offset %d again, attempt %d\n", rec.Offset, rec.Attempts)
			}
			if len(rec.Payload) == 0 {
				again = append(again, rec) // hand it back for another try
			} else {
				done = append(done, rec)
			}
		}
		if len(done) > 0 {
			n, err := g.Ack(ctx, done...)
			if err != nil {
				log.Fatal(err)
			}
			if n < len(done) {
				fmt.Printf("%d of %d were settled already (their claims expired)\n", len(done)-n, len(done))
			}
		}
		if len(again) > 0 {
			if _, err := g.Nack(ctx, again...); err != nil {
				log.Fatal(err)
			}
		}
	}
}

// ExampleGroup_Subscribe is a push member of the group "live": the node
// assigns it shards and pushes their records; each delivery is acked once
// its records are handled.
func ExampleGroup_Subscribe() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	m, err := c.Group(orders, "live").Subscribe(ctx, client.WithWindow(100), client.WithMaxPerPush(50),
		client.WithMember("m1"), client.WithHeartbeat(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	fmt.Println("assigned shards", m.Assignment().Shards)
	for {
		d, err := m.Next(ctx)
		if err != nil {
			log.Fatal(err) // for example ErrSessionExpired: subscribe again
		}
		for _, rec := range d.Records {
			fmt.Printf("%d/%d %s\n", rec.Shard, rec.Offset, rec.Payload)
		}
		err = m.Ack(ctx, d)
		if errors.Is(err, client.ErrStaleCursor) {
			continue // the shard moved to another member, which gets these records again
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}

// ExampleGroup_DeadLetters lists the dead letters of the group
// "fulfilment" on shard 2 and gives them back to the group.
func ExampleGroup_DeadLetters() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	g := c.Group(orders, "fulfilment")
	letters, more, err := g.DeadLetters(ctx, 2, 0, 100) // shard 2, from offset 0, at most 100
	if err != nil {
		log.Fatal(err)
	}
	offsets := make([]uint64, len(letters))
	for i, dl := range letters {
		fmt.Printf("%d/%d after %d attempts: %s\n", dl.Shard, dl.Offset, dl.Attempts, dl.Reason)
		offsets[i] = dl.Offset
	}
	if len(offsets) > 0 {
		n, err := g.Redrive(ctx, 2, offsets...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("redriven", n, "more to list:", more)
	}
}
