package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/heraldmq/herald/client"
)

// ExampleClusterClient_Subscribe follows a replicated stream from the
// replicas nearest to this process: the first address is the local node.
// Each shard stays at its replica and moves to another, where it goes on
// after the last record it delivered, when that node is lost or its replica
// falls behind its leader. It needs a running cluster, so it has no checked
// output.
func ExampleClusterClient_Subscribe() {
	ctx := context.Background()
	cc, err := client.DialCluster(ctx, "10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400", client.WithCAFile("ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	sub, err := cc.Subscribe(ctx, orders, client.WithStartEarliest())
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	fmt.Println("served by", sub.ServedBy()) // per shard, the node id of its replica
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %d %s\n", ev.Shard, ev.Offset, ev.Payload)
	}
}

// ExampleWithReplica reads a page of a replicated shard from its leader.
// A follower asked for the leader refuses, naming it.
func ExampleWithReplica() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "10.0.0.1:7400", client.WithCAFile("ca.pem"), client.WithReplica(client.ReplicaLeader))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	page, err := c.Read(ctx, orders, 0, 0, client.ReadToTail)
	var werr *client.Error
	switch {
	case errors.Is(err, client.ErrNotLeader) && errors.As(err, &werr):
		log.Fatalf("node %d leads shard 0: dial it, or use a ClusterClient, which goes there", werr.Detail)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println(len(page.Records), "records, tail", page.Tail)
}
