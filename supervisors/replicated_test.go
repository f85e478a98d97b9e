package supervisors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// testCluster is three in-process nodes with each other as peers (dev
// peer TLS), each on its own data directory, with fast elections.
type testCluster struct {
	t     *testing.T
	addrs map[uint64]string
	// listen are the nodes' client addresses, kept across restarts.
	listen map[uint64]string
	dirs   map[uint64]string
	peers  string
	nodes  map[uint64]*Node
	// wrap wraps a node's durable log (a disk that fails).
	wrap map[uint64]func(storage.Log) storage.Log
	// mutate changes every node's config (nil: none); options every
	// node's options.
	mutate  func(*Config)
	options func(*Options)
	// peersOf is a node's --peers when it is not peers (a node added
	// later); join marks the nodes started with --join.
	peersOf map[uint64]string
	join    map[uint64]bool
}

func newTestCluster(t *testing.T, wrap ...map[uint64]func(storage.Log) storage.Log) *testCluster {
	return newTestClusterWith(t, nil, wrap...)
}

func newTestClusterWith(t *testing.T, mutate func(*Config), wrap ...map[uint64]func(storage.Log) storage.Log) *testCluster {
	return newTestClusterOf(t, mutate, nil, wrap...)
}

// newTestClusterOf is newTestClusterWith, with options changing every
// node's Options too.
func newTestClusterOf(t *testing.T, mutate func(*Config), options func(*Options), wrap ...map[uint64]func(storage.Log) storage.Log) *testCluster {
	tc := &testCluster{t: t, mutate: mutate, options: options, addrs: map[uint64]string{}, listen: map[uint64]string{}, dirs: map[uint64]string{}, nodes: map[uint64]*Node{}}
	for id := uint64(1); id <= 3; id++ {
		tc.addrs[id], tc.listen[id], tc.dirs[id] = freeUDP(t), freeUDP(t), t.TempDir()
	}
	tc.peers = fmt.Sprintf("1=%s,2=%s,3=%s", tc.addrs[1], tc.addrs[2], tc.addrs[3])
	if len(wrap) > 0 {
		tc.wrap = wrap[0]
	}
	for id := uint64(1); id <= 3; id++ {
		tc.start(id)
	}
	return tc
}

func (tc *testCluster) start(id uint64) *Node {
	n := testNode(tc.t, tc.dirs[id], func(c *Config, o *Options) {
		o.WrapDurableLog = tc.wrap[id]
		c.NodeID, c.Peers, c.ClusterListen, c.Listen = id, tc.peers, tc.addrs[id], tc.listen[id]
		if p, ok := tc.peersOf[id]; ok {
			c.Peers = p
		}
		c.ClusterJoin = tc.join[id]
		c.RaftElectionTimeoutMillis = 300
		c.LeaderBalanceIntervalMillis = 600 // two election timeouts, as the default's
		c.ReplicationTimeoutMillis = 3000
		if tc.mutate != nil {
			tc.mutate(c)
		}
		if tc.options != nil {
			tc.options(o)
		}
	})
	tc.nodes[id] = n
	return n
}

func (tc *testCluster) stop(id uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.nodes[id].Shutdown(ctx); err != nil {
		tc.t.Fatalf("stop node %d: %v", id, err)
	}
	delete(tc.nodes, id)
}

func (tc *testCluster) dial(id uint64) *client.Client {
	tc.t.Helper()
	return dialTestClient(tc.t, tc.nodes[id])
}

// describeAll waits until every running node describes name and ok holds
// for each description; it returns them by node.
func (tc *testCluster) describeAll(name wire.StreamName, what string, ok func(id uint64, d StreamDescription) bool) map[uint64]StreamDescription {
	tc.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := map[uint64]StreamDescription{}
		var last error
		for id, n := range tc.nodes {
			d, err := n.DescribeStream(context.Background(), name)
			if err != nil {
				last = fmt.Errorf("node %d: %w", id, err)
				break
			}
			if !ok(id, d) {
				last = fmt.Errorf("node %d: %+v", id, d)
				break
			}
			out[id] = d
		}
		if last == nil {
			return out
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("waiting for %s: %v", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderOf waits for the running nodes to agree on shard's leader, and for
// it to be the shard's preferred leader if that one runs (so that no
// handover is to come).
func (tc *testCluster) leaderOf(name wire.StreamName, shard int) uint64 {
	tc.t.Helper()
	var lead uint64
	tc.describeAll(name, "one leader", func(id uint64, d StreamDescription) bool {
		l, pref := d.Shard[shard].Leader, d.Shard[shard].Preferred
		if _, up := tc.nodes[l]; !up {
			return false
		}
		if _, up := tc.nodes[pref]; up && l != pref {
			return false
		}
		if lead == 0 || lead == l {
			lead = l
			return true
		}
		lead = 0
		return false
	})
	return lead
}

// addrs and cas are every node's client address and CA file, as a
// ClusterClient (or a Client with seeds) takes them.
func (tc *testCluster) addrs3() (addrs string, cas client.Option) {
	return fmt.Sprintf("%s,%s,%s", tc.nodes[1].Addr(), tc.nodes[2].Addr(), tc.nodes[3].Addr()),
		client.WithCAFile(fmt.Sprintf("%s,%s,%s", tc.nodes[1].CAFile(), tc.nodes[2].CAFile(), tc.nodes[3].CAFile()))
}

// dialCluster dials a ClusterClient to the three nodes.
func (tc *testCluster) dialCluster(ctx context.Context) *client.ClusterClient {
	tc.t.Helper()
	addrs, cas := tc.addrs3()
	cc, err := client.DialCluster(ctx, addrs, cas)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func dialTestClient(t *testing.T, n *Node) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.Addr(), client.WithCAFile(n.CAFile()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A replicated stream's create goes through the metadata group and every
// node gets the stream; its shard's leader takes publishes (a follower
// refuses them, naming the leader) and acknowledges each at the offset
// every replica stores it at. When the leader stops, the other two elect
// a new one, which goes on at the next offset; the old one, started again
// on its data, catches up to the same log.
func TestReplicatedStreamFailsOver(t *testing.T) {
	tc := newTestCluster(t)
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "orders"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c1 := tc.dial(1)
	for {
		_, err := c1.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true, Replicas: 3})
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrNotLeader) && !errors.Is(err, client.ErrReplicationTimeout) {
			t.Fatalf("create: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("create: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A single node refuses a replicated stream; so does a cluster asked
	// for more replicas than it has nodes.
	if _, err := c1.CreateStream(ctx, wire.StreamName{Tenant: "default", Namespace: "default", Stream: "five"},
		client.StreamConfig{Shards: 1, Durable: true, Replicas: 5}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("five replicas of three nodes: %v", err)
	}
	tc.describeAll(name, "the stream on every node", func(_ uint64, d StreamDescription) bool {
		return d.Replicas == 3 && len(d.Shard) == 1 && len(d.Shard[0].Replicas) == 3
	})

	publish := func(lead uint64, from, n int) {
		t.Helper()
		c := tc.dial(lead)
		for i := from; i < from+n; i++ {
			ack, err := c.Publish(ctx, name, fmt.Appendf(nil, "r%d", i))
			if err != nil {
				t.Fatalf("publish %d to node %d: %v", i, lead, err)
			}
			if ack.Offset != uint64(i) {
				t.Fatalf("publish %d acked at offset %d", i, ack.Offset)
			}
		}
	}
	lead := tc.leaderOf(name, 0)
	publish(lead, 0, 49)
	// An idempotent producer's batch, deduplicated at apply: its re-send
	// to the next leader finds it at its first offset.
	if ack, err := tc.dial(lead).NewProducer(name, 7).PublishSequence(ctx, 1, [][]byte{[]byte("r49")}); err != nil || ack.Offset != 49 || ack.Duplicate {
		t.Fatalf("producer's first send: %+v, %v", ack, err)
	}

	follower := lead%3 + 1
	_, err := tc.dial(follower).Publish(ctx, name, []byte("x"))
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Code != wire.CodeNotLeader || werr.Detail != lead {
		t.Fatalf("publish to follower %d: %v, want not_leader naming %d", follower, err, lead)
	}
	tc.describeAll(name, "50 records on every replica", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 50 })
	checkRecords(t, ctx, tc.dial(follower), name, 0, 50)

	tc.stop(lead)
	newLead := tc.leaderOf(name, 0)
	if newLead == lead {
		t.Fatalf("the stopped node %d still leads", lead)
	}
	if ack, err := tc.dial(newLead).NewProducer(name, 7).PublishSequence(ctx, 1, [][]byte{[]byte("r49")}); err != nil || ack.Offset != 49 || !ack.Duplicate {
		t.Fatalf("producer's re-send to the new leader: %+v, %v", ack, err)
	}
	// The old leader's no-op took no offset: a conditional writer's
	// expected tail is still right, and of two only one wins.
	cn := tc.dial(newLead)
	if res, err := cn.PublishIf(ctx, name, [][]byte{[]byte("r50")}, 50); err != nil || !res.Written || res.Offset != 50 {
		t.Fatalf("conditional publish at 50: %+v, %v", res, err)
	}
	if res, err := cn.PublishIf(ctx, name, [][]byte{[]byte("x")}, 50); err != nil || res.Written || res.Tail != 51 {
		t.Fatalf("second conditional publish at 50: %+v, %v", res, err)
	}
	publish(newLead, 51, 49)
	tc.start(lead)
	tc.describeAll(name, "100 records on every replica", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 100 })
	checkRecords(t, ctx, tc.dial(lead), name, 0, 100)
}

// checkRecords reads [0, n) of shard 0 from c and checks each record is
// "r<offset>".
func checkRecords(t *testing.T, ctx context.Context, c *client.Client, name wire.StreamName, shard uint32, n int) {
	t.Helper()
	next := uint64(0)
	for next < uint64(n) {
		page, err := c.Read(ctx, name, shard, next, uint64(n))
		if err != nil {
			t.Fatalf("read from %d: %v", next, err)
		}
		if len(page.Records) == 0 {
			t.Fatalf("read from %d: no records", next)
		}
		for _, r := range page.Records {
			if r.Offset != next || string(r.Payload) != fmt.Sprintf("r%d", next) {
				t.Fatalf("record at %d: offset %d %q", next, r.Offset, r.Payload)
			}
			next++
		}
	}
}

// A ClusterClient's idempotent producers publish to a three-shard
// replicated stream through each shard's leader while one leader after
// another is stopped (and started again): every batch is acknowledged
// exactly once, at consecutive offsets of its shard, and reading each shard
// back from its leader gives every record once, in order.
func TestClusterClientFollowsTheLeaders(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "events", 3)
	tc.describeAll(name, "the stream on every node", func(_ uint64, d StreamDescription) bool { return len(d.Shard) == 3 })

	p := cc.NewProducer(name, 42)
	want := map[uint32][]string{}
	publish := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			payload := fmt.Sprintf("e%d", i)
			ack, err := p.Publish(ctx, [][]byte{[]byte(payload)}, client.WithKey(fmt.Appendf(nil, "k%d", i)))
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
			if ack.Duplicate || ack.Offset != uint64(len(want[ack.Shard])) {
				t.Fatalf("publish %d: acked %+v, shard %d has %d records", i, ack, ack.Shard, len(want[ack.Shard]))
			}
			want[ack.Shard] = append(want[ack.Shard], payload)
		}
	}
	publish(0, 60)
	for round := 0; round < 2; round++ {
		lead := tc.leaderOf(name, round)
		tc.stop(lead)
		publish(60+round*60, 30)
		tc.start(lead)
		publish(90+round*60, 30)
	}
	for shard, recs := range want {
		tc.describeAll(name, "every replica caught up", func(_ uint64, d StreamDescription) bool {
			return d.Shard[shard].Tail == uint64(len(recs))
		})
		var got []string
		for next := uint64(0); next < uint64(len(recs)); {
			page, err := cc.Read(ctx, name, shard, next, uint64(len(recs)))
			if err != nil {
				t.Fatalf("read shard %d from %d: %v", shard, next, err)
			}
			for _, r := range page.Records {
				got = append(got, string(r.Payload))
			}
			if page.Next == next {
				t.Fatalf("read shard %d: no progress at %d", shard, next)
			}
			next = page.Next
		}
		if fmt.Sprint(got) != fmt.Sprint(recs) {
			t.Fatalf("shard %d holds %v, acked %v", shard, got, recs)
		}
	}
}

// A replicated stream's leaders spread over the nodes: with three shards
// on three nodes each node leads one once elections settle (a leader that
// is not its shard's preferred replica hands over to it when that one is
// caught up). With a node down the others lead its shard; started again,
// it leads its shard again.
func TestReplicatedLeadersSpread(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, name := tc.replicatedStream(ctx, "spread", 3)
	spread := func(what string, up int) {
		t.Helper()
		tc.describeAll(name, what, func(_ uint64, d StreamDescription) bool {
			leads := map[uint64]int{}
			for _, s := range d.Shard {
				if _, ok := tc.nodes[s.Leader]; !ok {
					return false
				}
				leads[s.Leader]++
			}
			if len(leads) != up {
				return false
			}
			for _, n := range leads {
				if n > (3+up-1)/up {
					return false
				}
			}
			return true
		})
	}
	spread("one leader per node", 3)
	tc.stop(2)
	spread("node 2's shard led by another", 2)
	tc.start(2)
	spread("one leader per node again", 3)
}

// failingDisk fails every commit once broken, as a disk whose sync fails.
type failingDisk struct {
	storage.Log
	broken atomic.Bool
}

func (d *failingDisk) Commit(a []storage.Append, m []storage.MetaPut) error {
	if d.broken.Load() {
		return errors.New("injected: sync failed")
	}
	return d.Log.Commit(a, m)
}

// When the disk of a shard's leader fails, that node stops serving its
// replicas (its publishes fail with storage_failure, or not_leader) and the
// other two go on as a quorum: an idempotent producer's publishes are all
// acknowledged, once each, at consecutive offsets, through the failover the
// failure forces, even from a quiet group.
func TestReplicatedShardSurvivesADiskFailure(t *testing.T) {
	disks := map[uint64]*failingDisk{1: {}, 2: {}, 3: {}}
	wrap := map[uint64]func(storage.Log) storage.Log{}
	for id, d := range disks {
		wrap[id] = func(l storage.Log) storage.Log { d.Log = l; return d }
	}
	tc := newTestCluster(t, wrap)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "disk", 1)
	tc.describeAll(name, "a leader", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Leader != 0 })
	p := cc.NewProducer(name, 5)
	publish := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)})
			if err != nil || ack.Offset != uint64(i) || ack.Duplicate {
				t.Fatalf("publish %d: %+v, %v", i, ack, err)
			}
		}
	}
	publish(0, 20)
	lead := tc.leaderOf(name, 0)
	// The group is quiet when the disk fails: its leader's node beats on,
	// so the followers learn of the loss from the leader's replica itself
	// (a wake it sends when it stops), and elect.
	tc.describeAll(name, "the group quiet", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Quiesced })
	disks[lead].broken.Store(true)
	// Only the leader hears of it (a publish there); nothing touches the
	// followers, which elect all the same.
	_, err := tc.dial(lead).Publish(ctx, name, []byte("x"))
	if !errors.Is(err, client.ErrStorageFailure) && !errors.Is(err, client.ErrNotLeader) && !errors.Is(err, client.ErrReplicationTimeout) {
		t.Fatalf("a publish to node %d, whose disk failed: %v, want storage_failure (or not_leader, replication_timeout)", lead, err)
	}
	delete(tc.nodes, lead) // left out of the checks below (its Shutdown is the test's cleanup)
	tc.describeAll(name, "another leader", func(_ uint64, d StreamDescription) bool {
		return d.Shard[0].Leader != 0 && d.Shard[0].Leader != lead
	})
	publish(20, 20)
	tc.describeAll(name, "40 records on the healthy replicas", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 40 })
	checkRecords(t, ctx, tc.dial(lead%3+1), name, 0, 40)
}

// A subscription to a replicated stream through a client dialled with every
// node's address resumes, when the node it reads from stops, on another
// replica at the offset after the last record it delivered: every record
// published through the failover arrives once, in order.
func TestReplicatedSubscriptionResumesOnAnotherReplica(t *testing.T) {
	tc := newTestCluster(t)
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "feed"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := tc.dialCluster(ctx)
	addrs, cas := tc.addrs3()
	if _, err := cc.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	tc.describeAll(name, "the stream on every node", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Leader != 0 })
	sc, err := client.Dial(ctx, addrs, cas)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sub, err := sc.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	p := cc.NewProducer(name, 9)
	publish := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if _, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	next := 0
	receive := func(upTo int) {
		t.Helper()
		for next < upTo {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("next after %d records: %v", next, err)
			}
			if ev.Offset != uint64(next) || string(ev.Payload) != fmt.Sprintf("r%d", next) {
				t.Fatalf("record %d: offset %d %q", next, ev.Offset, ev.Payload)
			}
			next++
		}
	}
	publish(0, 30)
	receive(30)
	id, _ := strconv.ParseUint(sc.NodeID(), 10, 64)
	tc.stop(id) // the node the subscription reads from
	publish(30, 30)
	receive(60)
	if now, _ := strconv.ParseUint(sc.NodeID(), 10, 64); now == id {
		t.Fatalf("the client is still on node %d", id)
	}
	// A replica asked for an offset past its tail (it is behind the one a
	// subscription read from) waits for it instead of refusing.
	for nid := range tc.nodes {
		ahead, err := tc.dial(nid).Subscribe(ctx, name, client.WithStartOffset(65))
		if err != nil {
			t.Fatalf("node %d: subscribe past its tail: %v", nid, err)
		}
		defer ahead.Close()
		publish(60, 10)
		ev, err := ahead.Next(ctx)
		if err != nil || ev.Offset != 65 || string(ev.Payload) != "r65" {
			t.Fatalf("node %d: first record past the tail: %+v, %v", nid, ev, err)
		}
		break
	}
}

// Every replica's raft log is compacted behind its shard log at the
// indexes the leader puts in the log: with a compaction every 100 entries,
// 600 publishes leave each replica holding a few hundred entries at most,
// and a replica restarted from its compacted log recovers its shard's tail,
// catches up and serves every record.
func TestReplicatedRaftLogIsCompacted(t *testing.T) {
	tc := newTestClusterWith(t, func(c *Config) { c.RaftCompactEntries = 100 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "compact", 1)
	p := cc.NewProducer(name, 3)
	publish := func(from, n int) { t.Helper(); publishRecords(t, ctx, p, from, n) }
	publish(0, 600)
	tc.describeAll(name, "compacted raft logs", func(_ uint64, d StreamDescription) bool {
		s := d.Shard[0]
		return s.Tail == 600 && s.RaftFirst > 300 && s.Commit-s.RaftFirst < 300
	})
	tc.stop(2)
	publish(600, 50)
	tc.start(2)
	publish(650, 50)
	tc.describeAll(name, "700 records everywhere", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 700 })
	checkRecords(t, ctx, tc.dial(2), name, 0, 700)
}

// In a cluster every durable stream is the cluster's: a publish to a name
// no node knows auto-creates it through the metadata group, with one
// replica placed on one node, so every node knows it under one id; a
// publish through another node is refused naming the replica's node, and a
// ClusterClient follows that.
func TestClusterAutoCreatesThroughTheMetadataGroup(t *testing.T) {
	tc := newTestCluster(t)
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "auto"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := tc.dialCluster(ctx)
	p := cc.NewProducer(name, 1)
	for i := range 20 {
		if ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)}); err != nil || ack.Offset != uint64(i) {
			t.Fatalf("publish %d: %+v, %v", i, ack, err)
		}
	}
	ds := tc.describeAll(name, "the stream on every node", func(_ uint64, d StreamDescription) bool {
		return d.ID > 1<<63 && d.Replicas == 1 && len(d.Shard[0].Replicas) == 1
	})
	holder := ds[1].Shard[0].Replicas[0]
	for id, d := range ds {
		if d.ID != ds[1].ID || d.Shard[0].Replicas[0] != holder {
			t.Fatalf("node %d: %+v, node 1: %+v", id, d, ds[1])
		}
	}
	other := holder%3 + 1
	_, err := tc.dial(other).Publish(ctx, name, []byte("x"))
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Code != wire.CodeNotLeader || werr.Detail != holder {
		t.Fatalf("publish through node %d: %v, want not_leader naming %d", other, err, holder)
	}
	checkRecords(t, ctx, tc.dial(holder), name, 0, 20)
}

// A follower that was down while the group compacted its raft log past it
// catches up from a snapshot: it fetches the shard's log from the others in
// pages and goes on from the snapshot, with every record at its offset and
// the idempotent producers' state carried over.
func TestReplicatedFollowerCatchesUpFromASnapshot(t *testing.T) {
	tc := newTestClusterWith(t, func(c *Config) { c.RaftCompactEntries = 50 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "snap", 1)
	p := cc.NewProducer(name, 3)
	publish := func(from, n int) { t.Helper(); publishRecords(t, ctx, p, from, n) }
	publish(0, 40)
	lead := tc.leaderOf(name, 0)
	down := lead%3 + 1
	tc.stop(down)
	publish(40, 400)
	// The live replicas compact past where the stopped one stopped.
	tc.describeAll(name, "raft logs compacted past the stopped replica", func(_ uint64, d StreamDescription) bool {
		return d.Shard[0].Tail == 440 && d.Shard[0].RaftFirst > 200
	})
	n := tc.start(down)
	tc.describeAll(name, "440 records everywhere", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 440 })
	waitInstalled(t, n, down)
	checkRecords(t, ctx, tc.dial(down), name, 0, 440)
	publish(440, 20)
	tc.describeAll(name, "460 records everywhere", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 460 })

	// The idempotent producers' state came with the snapshot: what the
	// restored replica stored of them is what the leader stored.
	id := tc.describeAll(name, "the stream's id", func(uint64, StreamDescription) bool { return true })[down].ID
	other := down%3 + 1
	tc.stop(down)
	tc.stop(other)
	producers := func(node uint64) map[string]string {
		log, err := storage.OpenBadger(storage.DefaultBadgerOptions(filepath.Join(tc.dirs[node], "badger")))
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		out := map[string]string{}
		if err := log.ScanMeta(actors.ProducerPrefix(storage.ShardKey{Stream: id, Shard: 0}), func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got, want := producers(down), producers(other)
	if len(want) == 0 || !maps.Equal(got, want) {
		t.Fatalf("node %d stored %d producers, node %d %d (equal: %v)", down, len(got), other, len(want), maps.Equal(got, want))
	}
}

// slowReads delays every read of the shard log while slow is set, as a
// busy disk would.
type slowReads struct {
	storage.Log
	slow *atomic.Bool
}

func (l *slowReads) Read(k storage.ShardKey, from uint64, maxBatches, maxBytes int) ([]storage.Batch, error) {
	if l.slow.Load() {
		time.Sleep(150 * time.Millisecond)
	}
	return l.Log.Read(k, from, maxBatches, maxBytes)
}

// A snapshot's log comes in pages; a replica stopped halfway through them
// resumes the install when it starts again, from the offset its log
// reached, and ends with every record once.
func TestReplicatedSnapshotInstallResumesAfterARestart(t *testing.T) {
	var slow atomic.Bool
	wrap := map[uint64]func(storage.Log) storage.Log{}
	for id := uint64(1); id <= 3; id++ {
		wrap[id] = func(l storage.Log) storage.Log { return &slowReads{Log: l, slow: &slow} }
	}
	tc := newTestClusterWith(t, func(c *Config) { c.RaftCompactEntries = 50 }, wrap)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "pages", 1)
	payload := func(i int) []byte { return append(fmt.Appendf(nil, "r%d|", i), bytes.Repeat([]byte{'x'}, 16<<10)...) }
	p := cc.NewProducer(name, 3)
	const total = 400
	for i := range total {
		if i == 20 {
			tc.stop(tc.leaderOf(name, 0)%3 + 1)
		}
		if ack, err := p.Publish(ctx, [][]byte{payload(i)}); err != nil || ack.Offset != uint64(i) {
			t.Fatalf("publish %d: %+v, %v", i, ack, err)
		}
	}
	var down uint64
	for id := uint64(1); id <= 3; id++ {
		if tc.nodes[id] == nil {
			down = id
		}
	}
	tc.describeAll(name, "raft logs compacted past the stopped replica", func(_ uint64, d StreamDescription) bool {
		return d.Shard[0].Tail == total && d.Shard[0].RaftFirst > 100
	})
	slow.Store(true) // about 6.5 MiB in 1 MiB pages, 150 ms each
	n := tc.start(down)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := n.DescribeStream(ctx, name)
		if err == nil && d.Shard[0].Tail > 20 && d.Shard[0].Tail < total {
			break // some pages are in
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d: no page arrived: %+v, %v", down, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc.stop(down)
	slow.Store(false)
	n = tc.start(down)
	tc.describeAll(name, "every record everywhere", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == total })
	waitInstalled(t, n, down)
	c := tc.dial(down)
	next := uint64(0)
	for next < total {
		page, err := c.Read(ctx, name, 0, next, total)
		if err != nil || len(page.Records) == 0 {
			t.Fatalf("read from %d: %v", next, err)
		}
		for _, r := range page.Records {
			if r.Offset != next || !bytes.Equal(r.Payload, payload(int(next))) {
				t.Fatalf("record at %d: offset %d %.10q", next, r.Offset, r.Payload)
			}
			next++
		}
	}
	// It serves as a replica again: it takes part in what comes next.
	if ack, err := p.Publish(ctx, [][]byte{payload(total)}); err != nil || ack.Offset != total {
		t.Fatalf("publish after: %+v, %v", ack, err)
	}
	tc.describeAll(name, "the next record everywhere", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == total+1 })
}

// A read's tail is linearizable: a read that starts after a publish was
// acknowledged sees its record, even from a follower that has not applied
// it yet (the follower confirms the tail with the leader and waits for
// it). Without that, a follower answers with a tail older than the ack.
func TestReplicatedReadsAreLinearizable(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, name := tc.replicatedStream(ctx, "linear", 1)
	lead := tc.leaderOf(name, 0)
	pub := tc.dial(lead)
	var followers []*client.Client
	for id := uint64(1); id <= 3; id++ {
		if id != lead {
			followers = append(followers, tc.dial(id))
		}
	}
	for i := range 300 {
		ack, err := pub.Publish(ctx, name, fmt.Appendf(nil, "r%d", i))
		if err != nil || ack.Offset != uint64(i) {
			t.Fatalf("publish %d: %+v, %v", i, ack, err)
		}
		page, err := followers[i%2].Read(ctx, name, 0, ack.Offset, ack.Offset+1)
		if err != nil {
			t.Fatalf("read %d from a follower right after its ack: %v", i, err)
		}
		if page.Tail <= ack.Offset || len(page.Records) != 1 || string(page.Records[0].Payload) != fmt.Sprintf("r%d", i) {
			t.Fatalf("read %d from a follower right after its ack: tail %d, %d records", i, page.Tail, len(page.Records))
		}
	}
	// Without a quorum the tail cannot be confirmed: the read fails with a
	// typed error, within the replication timeout, rather than answer
	// what may be stale.
	for id := uint64(1); id <= 3; id++ {
		if id != lead {
			tc.stop(id)
		}
	}
	start := time.Now()
	_, err := pub.Read(ctx, name, 0, 0, 10)
	var werr *wire.Error
	if !errors.As(err, &werr) || (werr.Code != wire.CodeReplicationTimeout && werr.Code != wire.CodeNotLeader && werr.Code != wire.CodeReplicaBehind) {
		t.Fatalf("read without a quorum: %v, want replication_timeout, not_leader or replica_behind", err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("read without a quorum took %s", took)
	}
}

// Idle groups go quiet: once nothing happens, every replica of every
// shard quiesces and the links carry no raft message, only the node pair's
// beats. A publish wakes its group; a quiet group whose leader's node stops
// elects another leader (its followers learn of the loss from the link,
// not from heartbeats) and takes publishes again; it goes quiet again
// after.
func TestIdleReplicatedGroupsQuiesce(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "quiet", 3)
	p := cc.NewProducer(name, 3)
	for i := range 30 {
		if _, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)}, client.WithKey(fmt.Appendf(nil, "k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	quiet := func(what string) {
		t.Helper()
		tc.describeAll(name, what, func(_ uint64, d StreamDescription) bool {
			for _, s := range d.Shard {
				if !s.Quiesced {
					return false
				}
			}
			return true
		})
	}
	quiet("every replica quiet")
	messages := func() uint64 {
		var n uint64
		for _, node := range tc.nodes {
			st, _, err := node.ClusterStatus(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range st.Peers {
				n += p.Messages
			}
		}
		return n
	}
	before := messages()
	time.Sleep(time.Second) // ten election timeouts of silence
	if after := messages(); after != before {
		t.Fatalf("quiet groups sent %d messages in a second", after-before)
	}
	ack, err := p.Publish(ctx, [][]byte{[]byte("wake")}, client.WithKey([]byte("k0")))
	if err != nil {
		t.Fatal(err)
	}
	quiet("quiet again after a publish")

	lead := tc.leaderOf(name, int(ack.Shard))
	tc.stop(lead)
	start := time.Now()
	if _, err := p.Publish(ctx, [][]byte{[]byte("after")}, client.WithKey([]byte("k0"))); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("a quiet group's publish after its leader's node stopped took %s", took) // logged: a timed bound would flake
	tc.start(lead)
	quiet("quiet with every node back")
}

// replicatedStream creates stream, with shards shards and three replicas,
// through a ClusterClient of tc.
func (tc *testCluster) replicatedStream(ctx context.Context, stream string, shards int) (*client.ClusterClient, wire.StreamName) {
	tc.t.Helper()
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: stream}
	cc := tc.dialCluster(ctx)
	if _, err := cc.CreateStream(ctx, name, client.StreamConfig{Shards: shards, Durable: true, Replicas: 3}); err != nil {
		tc.t.Fatal(err)
	}
	return cc, name
}

// publishRecords publishes "r<i>" for i in [from, from+n) through p, each
// at offset i.
func publishRecords(t *testing.T, ctx context.Context, p *client.ClusterProducer, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)}); err != nil || ack.Offset != uint64(i) {
			t.Fatalf("publish %d: %+v, %v", i, ack, err)
		}
	}
}

// waitInstalled waits until node n (id) counts an installed snapshot: its
// last write follows the pages that bring the shard's tail.
func waitInstalled(t *testing.T, n *Node, id uint64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); n.stats.RaftSnapshotsInstalled.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("node %d caught up without installing a snapshot", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
