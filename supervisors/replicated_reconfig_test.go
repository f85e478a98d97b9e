package supervisors

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// A stream's replicas change under publishing: a stream of one replica (a
// cluster's default) grows to three, whose new replicas copy the log (from
// a snapshot and pages: the one replica compacted its raft log first) and
// become voters; the three keep it when the original node stops and when
// every node restarts; it shrinks back to one, the removed replicas stop
// and, where one led, it handed leadership over first. No acknowledged
// record is lost or moved at any step.
func TestReplicatedStreamReplicasGrowAndShrink(t *testing.T) {
	tc := newTestClusterWith(t, func(c *Config) { c.RaftCompactEntries = 50 })
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "grow"}
	cc := tc.dialCluster(ctx)
	if _, err := cc.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	p := cc.NewProducer(name, 7)
	publish := func(from, n int) { t.Helper(); publishRecords(t, ctx, p, from, n) }
	n := 0 // records published
	publish(n, 50)
	n += 50
	ds := tc.describeAll(name, "one replica, leading", func(id uint64, d StreamDescription) bool {
		return len(d.Shard[0].Replicas) == 1 && (d.Shard[0].Replicas[0] != id || d.Shard[0].Leader == id)
	})
	first := ds[1].Shard[0].Replicas[0]
	// Publishing until the one replica compacts its raft log (it looks
	// every 50 ticks while busy).
	for {
		d, err := tc.nodes[first].DescribeStream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Shard[0].RaftFirst > 50 {
			break
		}
		publish(n, 50)
		n += 50
	}

	// Bad asks are refused with what is wrong, and change nothing.
	if _, err := cc.SetReplicas(ctx, name, 4); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("4 replicas of 3 nodes: %v, want ErrInvalidConfig", err)
	}
	if _, err := cc.SetReplicas(ctx, wire.StreamName{Tenant: "default", Namespace: "default", Stream: "nope"}, 2); !errors.Is(err, client.ErrStreamNotFound) {
		t.Fatalf("an unknown stream: %v, want ErrStreamNotFound", err)
	}

	// Grow to three while a producer publishes.
	info, err := cc.SetReplicas(ctx, name, 3)
	if err != nil || info.Config.Replicas != 3 {
		t.Fatalf("set replicas 3: %+v, %v", info.Config, err)
	}
	publish(n, 100)
	n += 100
	all := []uint64{1, 2, 3}
	voters := func(want []uint64) func(uint64, StreamDescription) bool {
		return func(id uint64, d StreamDescription) bool {
			s := d.Shard[0]
			if !slices.Contains(want, id) {
				return len(s.Voters) == 0 && s.Tail == 0 // not held here
			}
			return slices.Equal(s.Voters, want) && len(s.Learners) == 0 && s.Tail == uint64(n) && s.Leader != 0
		}
	}
	tc.describeAll(name, "three voters, every one with every record", voters(all))
	for _, id := range all {
		checkRecords(t, ctx, tc.dial(id), name, 0, n)
	}

	// The new voters carry the group without the original replica.
	tc.stop(first)
	publish(n, 20)
	n += 20
	tc.start(first)
	// And the configuration survives a restart of every node.
	for _, id := range all {
		tc.stop(id)
	}
	for _, id := range all {
		tc.start(id)
	}
	cc.Close()
	cc = tc.dialCluster(ctx)
	p = cc.NewProducer(name, 8)
	publish(n, 20)
	n += 20
	tc.describeAll(name, "three voters after a restart", func(id uint64, d StreamDescription) bool {
		return slices.Equal(d.Shard[0].Voters, all) && d.Shard[0].Tail == uint64(n)
	})

	// Shrink back to one, the original node, while it is down: another
	// node leads, and removes nobody while that would leave a group the
	// live replicas cannot carry; once the original node is back, the
	// leader removes the third node, hands leadership to the original one
	// and is removed by it.
	tc.stop(first)
	lead := tc.leaderOf(name, 0)
	if _, err := cc.SetReplicas(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	publish(n, 20)
	n += 20
	tc.describeAll(name, "no replica removed while the target is down", func(id uint64, d StreamDescription) bool {
		return len(d.Shard[0].Voters) == 3 && d.Shard[0].Tail == uint64(n)
	})
	tc.start(first)
	publish(n, 20)
	n += 20
	tc.describeAll(name, "one voter", voters2(first, uint64(n)))
	t.Logf("shrank to node %d; node %d led while it was down; %d records", first, lead, n)
	checkRecords(t, ctx, tc.dial(first), name, 0, n)
	publish(n, 10)
	for id := range tc.nodes {
		n := tc.nodes[id]
		if id != first && n.stats.RaftLeading.Load() != 0 {
			t.Fatalf("node %d still leads a group", id)
		}
	}
}

// voters2 holds when only node one holds the shard, as its one voter,
// with n records.
func voters2(one uint64, n uint64) func(uint64, StreamDescription) bool {
	return func(id uint64, d StreamDescription) bool {
		s := d.Shard[0]
		if id != one {
			return len(s.Voters) == 0 && s.Tail == 0 && slices.Equal(s.Replicas, []uint64{one})
		}
		return slices.Equal(s.Voters, []uint64{one}) && len(s.Learners) == 0 && s.Tail == n && s.Leader == one
	}
}

// A node that was down while a stream was created and its replicas
// changed applies both metadata entries at once when it comes back (the
// change lands while the create is still being stored): it takes the new
// count, becomes one of the replicas, and keeps the count across a
// restart. Meanwhile the grow waits for it, the other new replica a voter.
func TestReplicatedReplicasChangedWhileANodeWasDown(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tc.stop(3)
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "late"}
	addrs := tc.nodes[1].Addr() + "," + tc.nodes[2].Addr()
	cc, err := client.DialCluster(ctx, addrs, client.WithCAFile(tc.nodes[1].CAFile()+","+tc.nodes[2].CAFile()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := cc.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.SetReplicas(ctx, name, 3); err != nil {
		t.Fatal(err)
	}
	p := cc.NewProducer(name, 9)
	publishRecords(t, ctx, p, 0, 30)
	tc.describeAll(name, "two voters, node 3 a learner while it is down", func(id uint64, d StreamDescription) bool {
		s := d.Shard[0]
		return len(s.Voters) == 2 && slices.Equal(s.Learners, []uint64{3}) && s.Tail == 30
	})
	tc.start(3)
	all := []uint64{1, 2, 3}
	tc.describeAll(name, "three voters once node 3 is back", func(id uint64, d StreamDescription) bool {
		return d.Replicas == 3 && slices.Equal(d.Shard[0].Voters, all) && len(d.Shard[0].Learners) == 0 && d.Shard[0].Tail == 30
	})
	tc.stop(3)
	tc.start(3)
	tc.describeAll(name, "node 3 keeps the count across a restart", func(id uint64, d StreamDescription) bool {
		return d.Replicas == 3 && slices.Equal(d.Shard[0].Voters, all) && d.Shard[0].Tail == 30
	})
	checkRecords(t, ctx, tc.dial(3), name, 0, 30)
}
