package supervisors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// followersOf returns the running nodes of tc other than lead, in id order.
func (tc *testCluster) followersOf(lead uint64) []uint64 {
	var out []uint64
	for id := uint64(1); id <= 3; id++ {
		if _, up := tc.nodes[id]; up && id != lead {
			out = append(out, id)
		}
	}
	return out
}

// dialWith dials node id with opts.
func (tc *testCluster) dialWith(id uint64, opts ...client.Option) *client.Client {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := tc.nodes[id]
	c, err := client.Dial(ctx, n.Addr(), append([]client.Option{client.WithCAFile(n.CAFile())}, opts...)...)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { _ = c.Close() })
	return c
}

// receiveInOrder reads next() until it has the records "r<from>" ..
// "r<to-1>" at offsets from .. to-1, each once and in order.
func receiveInOrder(t *testing.T, what string, next func() (client.Event, error), from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		ev, err := next()
		if err != nil {
			t.Fatalf("%s: record %d: %v", what, i, err)
		}
		if ev.Offset != uint64(i) || string(ev.Payload) != fmt.Sprintf("r%d", i) {
			t.Fatalf("%s: record %d: offset %d %q (a gap or a duplicate)", what, i, ev.Offset, ev.Payload)
		}
	}
}

// A subscriber connected to a follower keeps up with a publisher and gets
// every record once, in order; a range read there sees each acknowledged
// record at once. Asked for the leader, the follower refuses, naming it,
// and a ClusterClient goes there. Cut off from the rest of the group (the
// other two nodes stopped), the follower says it is behind: a read is
// refused with replica_behind and its subscriptions end with it, rather
// than go on serving a tail that no longer moves while the others may.
// Once the others are back, the subscriber (which has only that node's
// address) goes on where it was, with no gap and no duplicate.
func TestFollowerReads(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "follow", 1)
	lead := tc.leaderOf(name, 0)
	f := tc.followersOf(lead)
	follower, other := f[0], f[1]

	// Subscribed at the follower: it keeps up under publishing.
	fc := tc.dialWith(follower)
	sub, err := fc.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	once := tc.dialWith(follower, client.WithoutReconnect())
	subOnce, err := once.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer subOnce.Close()
	p := cc.NewProducer(name, 5)
	const n = 400
	var pubErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)}); err != nil || ack.Offset != uint64(i) {
				pubErr = fmt.Errorf("publish %d: %+v, %w", i, ack, err)
				return
			}
			if i%50 == 49 {
				// Every acknowledged record is in a read of the follower.
				page, err := fc.Read(ctx, name, 0, uint64(i), uint64(i)+1)
				if err != nil || len(page.Records) != 1 || page.Tail <= uint64(i) {
					pubErr = fmt.Errorf("read %d at the follower right after its ack: %+v, %w", i, page, err)
					return
				}
			}
		}
	}()
	receiveInOrder(t, "the follower's subscriber", func() (client.Event, error) { return sub.Next(ctx) }, 0, n)
	receiveInOrder(t, "the follower's other subscriber", func() (client.Event, error) { return subOnce.Next(ctx) }, 0, n)
	wg.Wait()
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	if id, _ := strconv.ParseUint(fc.NodeID(), 10, 64); id != follower {
		t.Fatalf("the follower's subscriber moved to node %d", id)
	}

	// Asked for the leader, the follower refuses and names it.
	lc := tc.dialWith(follower, client.WithReplica(client.ReplicaLeader))
	_, err = lc.Read(ctx, name, 0, 0, 10)
	var werr *wire.Error
	if !errors.Is(err, client.ErrNotLeader) || !errors.As(err, &werr) || werr.Detail != lead {
		t.Fatalf("a read of the leader at a follower: %v, want not_leader naming node %d", err, lead)
	}
	if _, err := lc.Subscribe(ctx, name, client.WithStartEarliest()); !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("a subscription to the leader at a follower: %v, want not_leader", err)
	}
	// A ClusterClient asked for the leader goes there, whatever node it
	// reaches first.
	addrs, cas := tc.addrs3()
	lcc, err := client.DialCluster(ctx, addrs, cas, client.WithReplica(client.ReplicaLeader))
	if err != nil {
		t.Fatal(err)
	}
	defer lcc.Close()
	lsub, err := lcc.Subscribe(ctx, name, client.WithStartOffset(n-10))
	if err != nil {
		t.Fatal(err)
	}
	defer lsub.Close()
	receiveInOrder(t, "the leader's subscriber", func() (client.Event, error) { return lsub.Next(ctx) }, n-10, n)
	if by := lsub.ServedBy()[0]; by != lead {
		t.Fatalf("the leader's subscription is served by node %d, want %d", by, lead)
	}
	if page, err := lcc.Read(ctx, name, 0, 0, 5); err != nil || len(page.Records) != 5 {
		t.Fatalf("a read of the leader through the cluster: %+v, %v", page, err)
	}

	// Cut off: the follower is alone. (A graceful stop hands leadership
	// over first; the follower may then lead for an election timeout,
	// until CheckQuorum steps it down.)
	tc.stop(other)
	tc.stop(lead)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		page, err := fc.Read(rctx, name, 0, 0, client.ReadToTail)
		rcancel()
		if err == nil {
			t.Fatalf("a read at a follower without a quorum answered %d records, tail %d", len(page.Records), page.Tail)
		}
		if errors.Is(err, client.ErrReplicaBehind) {
			break
		}
		if !errors.Is(err, client.ErrReplicationTimeout) && !errors.Is(err, client.ErrNotLeader) {
			t.Fatalf("a read at a follower without a quorum: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cut-off follower never said it is behind: %v", err)
		}
	}
	// Its live subscription ends saying so (this client does not
	// reconnect, so it sees the error).
	if ev, err := subOnce.Next(ctx); !errors.Is(err, client.ErrReplicaBehind) {
		t.Fatalf("the cut-off follower's subscription: %+v, %v; want replica_behind", ev, err)
	}
	for {
		all := scrapeSeries(t, tc.nodes[follower])
		b := series(all, "herald_raft_group_behind", `stream="default/default/follow"`)
		if len(b) == 1 && b[`herald_raft_group_behind{shard="0",stream="default/default/follow"}`] == 1 &&
			all["herald_raft_replica_behind_total"] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cut-off follower's behind gauge: %v", b)
		}
		time.Sleep(20 * time.Millisecond) // the gauges follow raft's ticks
	}
	d, err := tc.nodes[follower].DescribeStream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if d.Shard[0].Tail != n {
		t.Fatalf("the follower's tail is %d, want %d", d.Shard[0].Tail, n)
	}

	// The others come back: the subscriber, which has only the follower's
	// address, goes on there where it was.
	tc.start(lead)
	tc.start(other)
	tc.leaderOf(name, 0)
	publishRecords(t, ctx, cc.NewProducer(name, 6), n, 50)
	receiveInOrder(t, "the follower's subscriber after the cut", func() (client.Event, error) { return sub.Next(ctx) }, n, n+50)
	if ended := tc.nodes[follower].stats.SubscriptionsEnded.Load(); ended == 0 {
		t.Fatal("no subscription was ended as behind")
	}
}

// A ClusterClient's subscription reads each shard from the nearest
// replica (the first address: node 1); when that node stops, each shard
// moves to another replica and goes on from the offset after the last
// record it delivered, with no gap and no duplicate.
func TestClusterSubscriptionMovesWhenItsNodeStops(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "moves", 2)
	tc.leaderOf(name, 0)
	tc.leaderOf(name, 1)
	sub, err := cc.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if by := sub.ServedBy(); by[0] != 1 || by[1] != 1 {
		t.Fatalf("served by %v, want node 1 (the first address) for both shards", by)
	}
	p := cc.NewProducer(name, 8)
	sent := map[uint32][]string{}
	publish := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			payload := fmt.Sprintf("m%d", i)
			ack, err := p.Publish(ctx, [][]byte{[]byte(payload)}, client.WithKey([]byte(strconv.Itoa(i))))
			if err != nil || ack.Offset != uint64(len(sent[ack.Shard])) {
				t.Fatalf("publish %d: %+v, %v", i, ack, err)
			}
			sent[ack.Shard] = append(sent[ack.Shard], payload)
		}
	}
	got := map[uint32][]string{}
	receive := func(total int) {
		t.Helper()
		for n := len(got[0]) + len(got[1]); n < total; n++ {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("next after %d records: %v", n, err)
			}
			if ev.Offset != uint64(len(got[ev.Shard])) {
				t.Fatalf("shard %d: offset %d after %d records (a gap or a duplicate)", ev.Shard, ev.Offset, len(got[ev.Shard]))
			}
			got[ev.Shard] = append(got[ev.Shard], string(ev.Payload))
		}
	}
	publish(0, 60)
	receive(60)
	tc.stop(1)
	publish(60, 60)
	receive(120)
	for shard := range uint32(2) {
		if fmt.Sprint(got[shard]) != fmt.Sprint(sent[shard]) {
			t.Fatalf("shard %d: got %v, sent %v", shard, got[shard], sent[shard])
		}
	}
	if by := sub.ServedBy(); by[0] == 1 || by[1] == 1 {
		t.Fatalf("served by %v after node 1 stopped", by)
	}
	if sub.Moves() < 2 {
		t.Fatalf("%d moves, want one per shard at least", sub.Moves())
	}
}

// On a shard's leader, each replica's lag is known in records and records
// bytes as well as in raft entries: a follower that is down lacks exactly
// the records published meanwhile, and their bytes, in describe, in the
// StreamInfo a client gets and in the per-group metrics; once it is back
// and caught up, it lacks nothing.
func TestReplicaLagInRecordsAndBytes(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "lagging", 1)
	publishRecords(t, ctx, cc.NewProducer(name, 4), 0, 10)
	lead := tc.leaderOf(name, 0)
	down := tc.followersOf(lead)[0]
	tc.describeAll(name, "every replica caught up", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 10 })
	tc.stop(down)
	streamLabel := `stream="default/default/lagging"`
	bytesBefore := series(scrapeSeries(t, tc.nodes[lead]), "herald_publish_bytes_total", streamLabel)
	p := cc.NewProducer(name, 5)
	const batches, perBatch = 25, 3
	for i := range batches {
		payloads := make([][]byte, perBatch)
		for j := range payloads {
			payloads[j] = fmt.Appendf(nil, "record %d of batch %d, padded to a few dozen bytes", j, i)
		}
		if _, err := p.Publish(ctx, payloads); err != nil {
			t.Fatal(err)
		}
	}
	var bytes float64
	for s, v := range series(scrapeSeries(t, tc.nodes[lead]), "herald_publish_bytes_total", streamLabel) {
		bytes = v - bytesBefore[s]
	}
	if bytes <= 0 {
		t.Fatalf("the leader counted %v bytes published", bytes)
	}
	wantRecords := uint64(batches * perBatch)
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := tc.nodes[lead].DescribeStream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		s := d.Shard[0]
		all := scrapeSeries(t, tc.nodes[lead])
		replica := fmt.Sprintf(`replica="%d"`, down)
		metricRecords := series(all, "herald_raft_group_lag_records", streamLabel, replica)
		metricBytes := series(all, "herald_raft_group_lag_bytes", streamLabel, replica)
		var problems []string
		if s.LagRecords[down] != wantRecords || float64(s.LagBytes[down]) != bytes || s.Lag[down] < batches {
			problems = append(problems, fmt.Sprintf("describe: lag %d entries, %d records, %d bytes; want %d+, %d, %v", s.Lag[down], s.LagRecords[down], s.LagBytes[down], batches, wantRecords, bytes))
		}
		for _, up := range tc.followersOf(lead) {
			if s.LagRecords[up] != 0 || s.LagBytes[up] != 0 {
				problems = append(problems, fmt.Sprintf("replica %d, up, lacks %d records, %d bytes", up, s.LagRecords[up], s.LagBytes[up]))
			}
		}
		for _, v := range metricRecords {
			if v != float64(wantRecords) {
				problems = append(problems, fmt.Sprintf("metric lag_records %v", v))
			}
		}
		for _, v := range metricBytes {
			if v != bytes {
				problems = append(problems, fmt.Sprintf("metric lag_bytes %v, want %v", v, bytes))
			}
		}
		if len(metricRecords) != 1 || len(metricBytes) != 1 {
			problems = append(problems, fmt.Sprintf("lag series: %v %v", metricRecords, metricBytes))
		}
		if len(problems) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(problems)
		}
		time.Sleep(50 * time.Millisecond) // the gauges follow raft's ticks
	}
	// A client that announced follower_reads gets the same from the
	// leader's StreamInfo.
	info, err := cc.DescribeStream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	r := info.Replication[0]
	if !r.LagDetail || r.Leader != lead {
		t.Fatalf("replication %+v: want the leader's, with lag detail", r)
	}
	for _, rs := range r.Replicas {
		if rs.Node == down && (rs.LagRecords != wantRecords || float64(rs.LagBytes) != bytes) {
			t.Fatalf("StreamInfo: replica %d lacks %d records, %d bytes; want %d, %v", down, rs.LagRecords, rs.LagBytes, wantRecords, bytes)
		}
	}
	tc.start(down)
	tc.describeAll(name, "the replica back and caught up", func(id uint64, d StreamDescription) bool {
		s := d.Shard[0]
		return s.Tail == 10+wantRecords && (id != lead || (s.LagRecords[down] == 0 && s.LagBytes[down] == 0))
	})
}

// A follower's subscriber keeps up under load from several publishers at
// once: it gets every record once, in order, and the follower never takes
// itself for behind (no subscription ended, no read refused).
func TestFollowerSubscriberKeepsUpUnderLoad(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "busy", 1)
	lead := tc.leaderOf(name, 0)
	follower := tc.followersOf(lead)[0]
	sub, err := tc.dialWith(follower, client.WithoutReconnect()).Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const publishers, batches, perBatch = 8, 150, 16
	errs := make(chan error, publishers)
	for w := range publishers {
		go func() {
			p := cc.NewProducer(name, uint64(100+w))
			for i := range batches {
				payloads := make([][]byte, perBatch)
				for j := range payloads {
					payloads[j] = fmt.Appendf(nil, "w%d-%d-%d", w, i, j)
				}
				if _, err := p.Publish(ctx, payloads); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	const total = publishers * batches * perBatch
	seen := map[string]bool{}
	for off := range uint64(total) {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("record %d: %v", off, err)
		}
		if ev.Offset != off || seen[string(ev.Payload)] {
			t.Fatalf("record %d: offset %d %q (a gap or a duplicate)", off, ev.Offset, ev.Payload)
		}
		seen[string(ev.Payload)] = true
	}
	for range publishers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := tc.nodes[follower].stats
	if ended, refused := st.SubscriptionsEnded.Load(), st.ReplicaBehind.Load(); ended != 0 || refused != 0 {
		t.Fatalf("the follower took itself for behind under load: %d subscriptions ended, %d refused", ended, refused)
	}
}

// A quiet group's follower that wakes for a reason of its own (a publish
// it refuses, sent to it by mistake) does not take its quiet leader's
// silence for a loss: it asks the leader to wake, hears its heartbeats,
// and keeps serving its subscribers; the group then goes quiet again.
func TestQuietFollowerWokenAloneStaysFresh(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "calm", 1)
	publishRecords(t, ctx, cc.NewProducer(name, 2), 0, 5)
	lead := tc.leaderOf(name, 0)
	follower := tc.followersOf(lead)[0]
	sub, err := tc.dialWith(follower, client.WithoutReconnect()).Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	receiveInOrder(t, "the follower's subscriber", func() (client.Event, error) { return sub.Next(ctx) }, 0, 5)
	quiet := func(what string) {
		t.Helper()
		tc.describeAll(name, what, func(_ uint64, d StreamDescription) bool { return d.Shard[0].Quiesced })
	}
	quiet("the group quiet")
	misdirected := tc.dialWith(follower)
	for range 5 {
		if _, err := misdirected.Publish(ctx, name, []byte("to a follower")); !errors.Is(err, client.ErrNotLeader) {
			t.Fatalf("a publish to a follower: %v, want not_leader", err)
		}
		// Three election timeouts (300 ms each) of the follower awake.
		time.Sleep(900 * time.Millisecond)
		if ended, refused := tc.nodes[follower].stats.SubscriptionsEnded.Load(), tc.nodes[follower].stats.ReplicaBehind.Load(); ended != 0 || refused != 0 {
			t.Fatalf("the woken follower took itself for behind: %d subscriptions ended, %d refused", ended, refused)
		}
	}
	quiet("the group quiet again")
	publishRecords(t, ctx, cc.NewProducer(name, 3), 5, 5)
	receiveInOrder(t, "the follower's subscriber", func() (client.Event, error) { return sub.Next(ctx) }, 5, 10)
}
