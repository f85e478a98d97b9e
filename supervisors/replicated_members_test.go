package supervisors

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// prepareNode gives node id of tc an address, a client address and a data
// directory, and a --peers of the nodes ids (its own included); it starts
// with --join.
func (tc *testCluster) prepareNode(id uint64, ids ...uint64) {
	tc.addrs[id], tc.listen[id], tc.dirs[id] = freeUDP(tc.t), freeUDP(tc.t), tc.t.TempDir()
	var peers string
	for i, o := range ids {
		if i > 0 {
			peers += ","
		}
		peers += fmt.Sprintf("%d=%s", o, tc.addrs[o])
	}
	if tc.peersOf == nil {
		tc.peersOf, tc.join = map[uint64]string{}, map[uint64]bool{}
	}
	tc.peersOf[id], tc.join[id] = peers, true
}

// status is node id's ClusterStatus.
func (tc *testCluster) status(id uint64) ClusterStatus {
	tc.t.Helper()
	st, ok, err := tc.nodes[id].ClusterStatus(context.Background())
	if err != nil || !ok {
		tc.t.Fatalf("node %d's cluster status: %v", id, err)
	}
	return st
}

// waitStatus polls every running node's ClusterStatus until ok holds for
// each.
func (tc *testCluster) waitStatus(what string, ok func(id uint64, st ClusterStatus) bool) {
	tc.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var bad string
		for id := range tc.nodes {
			if st := tc.status(id); !ok(id, st) {
				bad = fmt.Sprintf("node %d: members %+v, metadata %+v, peers %d", id, st.Members, st.Meta, len(st.Peers))
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("waiting for %s: %s", what, bad)
		}
		time.Sleep(20 * time.Millisecond) // polling the nodes' state
	}
}

// metricOf is the value of the one series of metric name on n whose
// labels hold every one of labels (-1: none, or several).
func metricOf(t *testing.T, n *Node, name string, labels ...string) float64 {
	t.Helper()
	all := scrapeSeries(t, n)
	if v, ok := all[name]; ok && len(labels) == 0 {
		return v
	}
	s := series(all, name, labels...)
	if len(s) != 1 {
		return -1
	}
	for _, v := range s {
		return v
	}
	return -1
}

// memberIDs are st's members' ids.
func memberIDs(st ClusterStatus) []uint64 {
	var out []uint64
	for _, m := range st.Members {
		out = append(out, m.NodeID)
	}
	return out
}

// placedAsReplicas waits until every running node places every shard of
// name on the same replicas, and each node holding a replica sees the
// shard with voters exactly those replicas, no learner, a leader, and (on
// the leader) every replica at lag 0; it returns the replicas by shard.
func (tc *testCluster) placedAsReplicas(name wire.StreamName, what string) map[int][]uint64 {
	tc.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ds := tc.describeAll(name, what, func(id uint64, d StreamDescription) bool {
			for _, s := range d.Shard {
				if !slices.Contains(s.Replicas, id) {
					continue // not held here: it knows no more
				}
				if !slices.Equal(slices.Sorted(slices.Values(s.Replicas)), s.Voters) || len(s.Learners) > 0 || s.Leader == 0 {
					return false
				}
				if s.Leader == id {
					for _, r := range s.Replicas {
						if lag, ok := s.Lag[r]; !ok || lag > 0 {
							return false
						}
					}
				}
			}
			return true
		})
		var out map[int][]uint64
		agree := true
		for _, d := range ds {
			placed := map[int][]uint64{}
			for i, s := range d.Shard {
				placed[i] = slices.Sorted(slices.Values(s.Replicas))
			}
			if out == nil {
				out = placed
			}
			for i := range placed {
				agree = agree && slices.Equal(out[i], placed[i])
			}
		}
		if agree {
			return out
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("waiting for %s: the nodes place the shards differently", what)
		}
	}
}

// A cluster grows and shrinks under an idempotent publisher: node 4 is
// started with --join (it waits, not a member, until it is added), added,
// takes the cluster's state from the metadata group's snapshot, and
// becomes a voter of it; the shards it now outweighs in placement get a
// replica there (added as a learner, promoted, the displaced one removed).
// Node 1 is then removed: its replicas move off it, it leaves, the others
// drop their links to it, and its id cannot be added again. Restarted on
// their data, the joined node and a node whose --peers never named node 4
// find each other from the stored membership. No publish fails, and every
// acknowledged record is in the stream once.
func TestReplicatedClusterAddAndRemoveNodes(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	const shards = 6
	// (A first stream, so that this one's id places replicas on node 4
	// once it is added: placement is a function of the stream's id.)
	tc.replicatedStream(ctx, "first", 1)
	_, name := tc.replicatedStream(ctx, "members", shards)
	for shard := range shards {
		tc.leaderOf(name, shard)
	}
	before := tc.placedAsReplicas(name, "three replicas")
	// Node 4 first, waiting to be added. The publisher is given the first
	// three nodes' addresses only (and every node's CA: each dev node
	// makes its own): it learns node 4's from the cluster when node 4
	// leads a shard.
	tc.prepareNode(4, 1, 2, 3, 4)
	tc.start(4)
	addrs, _ := tc.addrs3()
	cc, err := client.DialCluster(ctx, addrs, client.WithCAFile(fmt.Sprintf("%s,%s,%s,%s",
		tc.nodes[1].CAFile(), tc.nodes[2].CAFile(), tc.nodes[3].CAFile(), tc.nodes[4].CAFile())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	dp := startDrainPublisher(ctx, cc.NewProducer(name, 11))
	if st := tc.status(4); len(st.Members) != 0 {
		t.Fatalf("node 4, not added yet, says the members are %+v", st.Members)
	}
	if _, err := tc.nodes[4].ChangeCluster(ctx, actors.ClusterDrain, ClusterChange{Node: 1}); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("a change asked of node 4, not added yet: %v, want invalid_request", err)
	}
	if j, m := metricOf(t, tc.nodes[4], "herald_cluster_node_state", `state="joining"`), metricOf(t, tc.nodes[4], "herald_cluster_members"); j != 1 || m != 0 {
		t.Fatalf("node 4, not added yet: herald_cluster_node_state{state=joining} %v, herald_cluster_members %v", j, m)
	}

	// Refusals first: a bad address, an id in use, a removal that would
	// leave too few nodes for the stream's three replicas, a node that is
	// up forced out.
	for _, c := range []struct {
		op   actors.ClusterOp
		ch   ClusterChange
		want string
	}{
		{actors.ClusterAdd, ClusterChange{Node: 4, Addr: "nowhere"}, "is not host:port"},
		{actors.ClusterAdd, ClusterChange{Node: 2, Addr: tc.addrs[2]}, "is a node of this cluster already"},
		{actors.ClusterRemove, ClusterChange{Node: 3}, "would leave 2 nodes for a stream of 3 replicas"},
		{actors.ClusterRemove, ClusterChange{Node: 3, Force: true}, "node 3 is up"},
	} {
		if _, err := tc.nodes[1].ChangeCluster(ctx, c.op, c.ch); !isCode(err, wire.CodeInvalidRequest) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s %+v: %v, want invalid_request: %s", c.op, c.ch, err, c.want)
		}
	}

	for dp.count() < 50 {
		dp.check(t)
		time.Sleep(10 * time.Millisecond) // polling the publisher's progress
	}
	start := time.Now()
	m, err := tc.nodes[2].ChangeCluster(ctx, actors.ClusterAdd, ClusterChange{Node: 4, Addr: tc.addrs[4]})
	if err != nil || !slices.Equal(m.IDs(), []uint64{1, 2, 3, 4}) {
		t.Fatalf("add 4: %+v, %v", m, err)
	}
	tc.waitStatus("node 4 a voter of the metadata group", func(_ uint64, st ClusterStatus) bool {
		return slices.Equal(st.Meta.Voters, []uint64{1, 2, 3, 4}) && len(st.Meta.Learners) == 0 &&
			slices.Equal(memberIDs(st), []uint64{1, 2, 3, 4}) && len(st.Peers) == 3
	})
	if n := tc.nodes[4].stats.MetaSnapshotsInstalled.Load(); n != 1 {
		t.Fatalf("node 4 joined having installed %d metadata snapshots, want 1", n)
	}
	joined := time.Since(start)
	after := tc.placedAsReplicas(name, "replicas placed over four nodes")
	moved := 0
	for i, r := range after {
		if slices.Contains(r, 4) {
			moved++
			if slices.Equal(r, before[i]) {
				t.Fatalf("shard %d: replicas %v did not change", i, r)
			}
		}
	}
	if moved == 0 {
		t.Fatalf("no replica moved to node 4: %v", after)
	}
	for id, n := range tc.nodes {
		if a, m := metricOf(t, n, "herald_cluster_node_state", `state="active"`), metricOf(t, n, "herald_cluster_members"); a != 1 || m != 4 {
			t.Fatalf("node %d: herald_cluster_node_state{state=active} %v, herald_cluster_members %v", id, a, m)
		}
	}
	if r := metricOf(t, tc.nodes[4], "herald_raft_replicas"); r != float64(moved) {
		t.Fatalf("node 4 holds %d replicas, herald_raft_replicas says %v", moved, r)
	}
	// Node 4 leads its preferred shards, and the publisher, never given
	// its address, publishes to them: it learned it from the cluster.
	for deadline := time.Now().Add(20 * time.Second); ; {
		d, err := tc.nodes[4].DescribeStream(ctx, name)
		led := err == nil && slices.ContainsFunc(d.Shard, func(s ShardDescription) bool { return s.Leader == 4 })
		if led {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4 leads no shard: %+v, %v", d.Shard, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for n, deadline := dp.count()+100, time.Now().Add(20*time.Second); dp.count() < n; {
		dp.check(t)
		if time.Now().After(deadline) {
			t.Fatalf("the publisher, not given node 4's address, stalled at %d publishes once node 4 led a shard", dp.count())
		}
		time.Sleep(10 * time.Millisecond) // polling the publisher's progress
	}
	dp.check(t)
	t.Logf("node 4 joined the metadata group %v after its add; %d of %d shards have a replica there %v after the add; slowest publish meanwhile %v; %d acknowledged so far",
		joined.Round(time.Millisecond), moved, shards, time.Since(start).Round(time.Millisecond), dp.resetSlowest().Round(time.Millisecond), dp.count())

	// Remove node 1: its replicas move to the others, then it leaves.
	start = time.Now()
	if m, err := tc.nodes[3].ChangeCluster(ctx, actors.ClusterRemove, ClusterChange{Node: 1}); err != nil || !m.IsLeaving(1) {
		t.Fatalf("remove 1: %+v, %v", m, err)
	}
	n1 := tc.nodes[1]
	tc.waitStatus("node 1 gone", func(id uint64, st ClusterStatus) bool {
		if id == 1 {
			return true // it knows it left; its own view does not matter
		}
		return slices.Equal(memberIDs(st), []uint64{2, 3, 4}) && slices.Equal(st.Meta.Voters, []uint64{2, 3, 4}) && len(st.Peers) == 2
	})
	if held, left := metricOf(t, n1, "herald_raft_replicas"), metricOf(t, n1, "herald_cluster_node_state", `state="left"`); held != 0 || left != 1 {
		t.Fatalf("node 1 left holding %v replicas (herald_raft_replicas), herald_cluster_node_state{state=left} %v", held, left)
	}
	if m, l := metricOf(t, tc.nodes[2], "herald_cluster_members"), metricOf(t, tc.nodes[2], "herald_cluster_leaving"); m != 3 || l != 0 {
		t.Fatalf("node 2: herald_cluster_members %v, herald_cluster_leaving %v", m, l)
	}
	if _, err := n1.ChangeCluster(ctx, actors.ClusterDrain, ClusterChange{Node: 2}); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("a change asked of node 1, which left: %v, want invalid_request", err)
	}
	tc.stop(1)
	final := tc.placedAsReplicas(name, "replicas on nodes 2, 3 and 4")
	for i, r := range final {
		if !slices.Equal(r, []uint64{2, 3, 4}) {
			t.Fatalf("shard %d: voters %v after node 1 left", i, r)
		}
	}
	t.Logf("node 1 removed: its replicas moved and it left %v after the remove; slowest publish meanwhile %v; %d acknowledged so far",
		time.Since(start).Round(time.Millisecond), dp.resetSlowest().Round(time.Millisecond), dp.count())
	if _, err := tc.nodes[2].ChangeCluster(ctx, actors.ClusterAdd, ClusterChange{Node: 1, Addr: tc.addrs[1]}); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("adding node 1 back: %v, want invalid_request", err)
	}

	// Restarts: node 4 (joined) and node 2 (whose --peers never named 4).
	for _, id := range []uint64{4, 2} {
		tc.stop(id)
		tc.start(id)
		tc.waitStatus(fmt.Sprintf("node %d back", id), func(_ uint64, st ClusterStatus) bool {
			up := 0
			for _, p := range st.Peers {
				if p.Up {
					up++
				}
			}
			return slices.Equal(memberIDs(st), []uint64{2, 3, 4}) && up == 2
		})
		tc.placedAsReplicas(name, "every replica caught up")
	}
	dp.finish(t, ctx, tc.dial(3), name, shards)
}

// Restoring from a lost node: node 3 is gone for good (stopped, never
// started again). A node that is up cannot be forced out; the lost one
// can, once the nodes left can hold the stream's replicas: a fourth node
// is added (with --join), node 3 is removed with force, and every shard's
// leader places its third replica on node 4 (a learner, caught up from the
// two live replicas, promoted) and drops node 3. No publish fails, and
// every acknowledged record is in the stream once.
func TestReplicatedClusterReplacesALostNode(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	const shards = 3
	_, name := tc.replicatedStream(ctx, "lost", shards)
	for shard := range shards {
		tc.leaderOf(name, shard)
	}
	tc.prepareNode(4, 1, 2, 3, 4)
	tc.start(4)
	cc, err := client.DialCluster(ctx, fmt.Sprintf("%s,%s,%s,%s", tc.nodes[1].Addr(), tc.nodes[2].Addr(), tc.nodes[3].Addr(), tc.nodes[4].Addr()),
		client.WithCAFile(fmt.Sprintf("%s,%s,%s,%s", tc.nodes[1].CAFile(), tc.nodes[2].CAFile(), tc.nodes[3].CAFile(), tc.nodes[4].CAFile())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	dp := startDrainPublisher(ctx, cc.NewProducer(name, 12))
	for dp.count() < 50 {
		dp.check(t)
		time.Sleep(10 * time.Millisecond) // polling the publisher's progress
	}
	tc.stop(3) // lost
	if _, err := tc.nodes[1].ChangeCluster(ctx, actors.ClusterRemove, ClusterChange{Node: 3, Force: true}); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("forcing node 3 out of three nodes with a stream of three replicas: %v, want invalid_request", err)
	}
	if _, err := tc.nodes[1].ChangeCluster(ctx, actors.ClusterAdd, ClusterChange{Node: 4, Addr: tc.addrs[4]}); err != nil {
		t.Fatalf("add 4: %v", err)
	}
	if _, err := tc.nodes[1].ChangeCluster(ctx, actors.ClusterRemove, ClusterChange{Node: 2, Force: true}); !isCode(err, wire.CodeInvalidRequest) ||
		!strings.Contains(err.Error(), "is up") {
		t.Fatalf("forcing node 2, which is up, out: %v, want invalid_request", err)
	}
	start := time.Now()
	m, err := tc.nodes[2].ChangeCluster(ctx, actors.ClusterRemove, ClusterChange{Node: 3, Force: true})
	if err != nil || !slices.Equal(m.IDs(), []uint64{1, 2, 4}) || !slices.Equal(m.Removed, []uint64{3}) {
		t.Fatalf("remove 3 with force: %+v, %v", m, err)
	}
	tc.waitStatus("node 3 gone, node 4 a voter", func(_ uint64, st ClusterStatus) bool {
		return slices.Equal(memberIDs(st), []uint64{1, 2, 4}) && slices.Equal(st.Meta.Voters, []uint64{1, 2, 4}) && len(st.Peers) == 2
	})
	for i, r := range tc.placedAsReplicas(name, "every shard on nodes 1, 2 and 4") {
		if !slices.Equal(r, []uint64{1, 2, 4}) {
			t.Fatalf("shard %d: replicas %v", i, r)
		}
	}
	t.Logf("node 3 replaced by node 4 %v after its forced removal; slowest publish meanwhile %v", time.Since(start).Round(time.Millisecond), dp.resetSlowest().Round(time.Millisecond))
	dp.finish(t, ctx, tc.dial(4), name, shards)
}

// A node behind the metadata group's first entry catches up from its
// snapshot: node 3 is down while a stream is created and node 4 is added
// (a configuration change, where every replica takes a snapshot), and
// nodes 1 and 2 restart (their logs then start after the snapshot). Node 3,
// started again, is sent the snapshot, keeps the stream it had, creates
// the one it missed (its shards' replicas included) and takes the members.
func TestReplicatedMetaSnapshotCatchesUpALaggard(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, had := tc.replicatedStream(ctx, "had", 1)
	tc.leaderOf(had, 0)
	tc.stop(3)
	c1 := tc.dial(1)
	missed := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "missed"}
	for {
		_, err := c1.CreateStream(ctx, missed, client.StreamConfig{Shards: 2, Durable: true, Replicas: 2})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create with node 3 down: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	addr4 := freeUDP(t)
	if _, err := tc.nodes[1].ChangeCluster(ctx, actors.ClusterAdd, ClusterChange{Node: 4, Addr: addr4}); err != nil {
		t.Fatalf("add 4: %v", err)
	}
	tc.waitStatus("node 4 a learner of the metadata group", func(_ uint64, st ClusterStatus) bool {
		return slices.Equal(st.Meta.Learners, []uint64{4})
	})
	for _, id := range []uint64{1, 2} {
		tc.stop(id)
		tc.start(id)
		tc.waitStatus(fmt.Sprintf("node %d back", id), func(_ uint64, st ClusterStatus) bool { return st.Meta.Leader != 0 })
	}
	tc.start(3)
	tc.waitStatus("node 3 caught up", func(_ uint64, st ClusterStatus) bool {
		return slices.Equal(memberIDs(st), []uint64{1, 2, 3, 4}) && st.Meta.Leader != 0
	})
	for _, name := range []wire.StreamName{had, missed} {
		tc.describeAll(name, "the stream on every node, each shard led", func(_ uint64, d StreamDescription) bool {
			for _, s := range d.Shard {
				if s.Leader == 0 && len(s.Voters) > 0 {
					return false
				}
			}
			return len(d.Shard) > 0
		})
	}
	d, err := tc.nodes[3].DescribeStream(ctx, missed)
	if err != nil || d.Replicas != 2 || len(d.Shard) != 2 {
		t.Fatalf("node 3's view of the stream it missed: %+v, %v", d, err)
	}
	if n := tc.nodes[3].stats.MetaSnapshotsInstalled.Load(); n != 1 {
		t.Fatalf("node 3 installed %d metadata snapshots, want 1", n)
	}
}
