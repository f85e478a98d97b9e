package client

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// TestWithReplica: the replica choice goes with every Subscribe and Read
// to a node that announces follower_reads (nearest, the default, as no
// byte at all); against a node without the feature, asking for the leader
// fails before anything is sent.
func TestWithReplica(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		want    wire.Replica
		feature bool
	}{
		{"default", nil, wire.ReplicaNearest, true},
		{"nearest", []Option{WithReplica(ReplicaNearest)}, wire.ReplicaNearest, true},
		{"leader", []Option{WithReplica(ReplicaLeader)}, wire.ReplicaLeader, true},
		{"leader of an older node", []Option{WithReplica(ReplicaLeader)}, 0, false},
		{"nearest of an older node", nil, wire.ReplicaNearest, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestServer(t)
			if !tc.feature {
				srv.welcome.Features &^= wire.FeatureFollowerReads
			}
			srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
			subs := make(chan wire.Subscribe, 1)
			reads := make(chan wire.Read, 1)
			subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
				subs <- s
				return wire.Subscribed{Offset: 0, QueueCapacity: 8}, nil
			}, func(st *quic.Stream) { <-st.Context().Done() })
			srv.onRead = func(sc *serverConn, f wire.Frame, r wire.Read) {
				reads <- r
				sc.writeCtl(wire.AppendReadResult(nil, f.Header.RequestID, r.Start, 0, 0, nil))
			}
			srv.start()
			c := srv.dial(t, tc.opts...)
			ctx := testCtx(t)
			sub, err := c.Subscribe(ctx, orders)
			_, rerr := c.Read(ctx, orders, 0, 0, ReadToTail)
			if !tc.feature && tc.want == 0 && len(tc.opts) > 0 {
				if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(rerr, errors.ErrUnsupported) {
					t.Fatalf("subscribe %v, read %v; want unsupported", err, rerr)
				}
				if len(subs)+len(reads) != 0 {
					t.Fatal("a request was sent")
				}
				return
			}
			if err != nil || rerr != nil {
				t.Fatalf("subscribe %v, read %v", err, rerr)
			}
			defer sub.Close()
			if s := <-subs; s.Replica != tc.want {
				t.Fatalf("subscribe asked for %v, want %v", s.Replica, tc.want)
			}
			if r := <-reads; r.Replica != tc.want {
				t.Fatalf("read asked for %v, want %v", r.Replica, tc.want)
			}
		})
	}
}

// behindNode scripts a node whose subscriptions of shard 0 are answered by
// serve, called with the attempt's number (from 1) and the Subscribe; it
// returns the events to send (offsets from..from+n) and whether to end
// the subscription after them with replica_behind (refuse: before any).
type behindScript func(attempt int, s wire.Subscribe) (from uint64, n int, refuse, end bool)

func behindNode(t *testing.T, srv *testServer, script behindScript) *atomic.Int32 {
	var attempts atomic.Int32
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		s, err := wire.DecodeSubscribe(f.Body)
		if err != nil {
			t.Errorf("decode subscribe: %v", err)
			return
		}
		id := f.Header.RequestID
		behind := &wire.Error{Code: wire.CodeReplicaBehind, Message: "cut off from its leader"}
		from, n, refuse, end := script(int(attempts.Add(1)), s)
		if refuse {
			_, _ = st.Write(wire.AppendError(nil, id, behind))
			_ = st.Close()
			return
		}
		if _, err := st.Write(wire.AppendSubscribed(nil, id, wire.Subscribed{Offset: s.Offset, QueueCapacity: 8})); err != nil {
			return
		}
		if n > 0 {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{from}, recs(from, n)))
		}
		if end {
			_, _ = st.Write(wire.AppendError(nil, id, behind))
			_ = st.Close()
			return
		}
		<-st.Context().Done()
	}
	return &attempts
}

// wantOffsets reads offsets from..to-1 from sub, in order.
func wantOffsets(t *testing.T, sub *Subscription, from, to uint64) {
	t.Helper()
	ctx := testCtx(t)
	for want := from; want < to; want++ {
		ev, err := sub.Next(ctx)
		if err != nil || ev.Offset != want || string(ev.Payload) != "p"+strconv.FormatUint(want, 10) {
			t.Fatalf("Next = %d %q, %v; want %d", ev.Offset, ev.Payload, err, want)
		}
	}
}

// TestSubscriptionLeavesABehindReplica: a node that ends a subscription
// with replica_behind (its replica fell behind its leader) is left for the
// next address, where the subscription resumes at the offset after the
// last record received: no gap, no duplicate.
func TestSubscriptionLeavesABehindReplica(t *testing.T) {
	a, b := newTestServer(t), newTestServer(t)
	for _, srv := range []*testServer{a, b} {
		srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	}
	behindNode(t, a, func(int, wire.Subscribe) (uint64, int, bool, bool) { return 0, 3, false, true })
	asked := make(chan wire.Subscribe, 4)
	behindNode(t, b, func(_ int, s wire.Subscribe) (uint64, int, bool, bool) {
		asked <- s
		return 3, 3, false, false
	})
	a.start()
	b.start()
	ctx := testCtx(t)
	c, err := Dial(ctx, a.addr+","+b.addr, WithTLSConfig(a.clientTLS), WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wantOffsets(t, sub, 0, 6)
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 3 {
		t.Fatalf("resumed with %+v, want offset 3", s)
	}
	if c.Addr() != b.addr {
		t.Fatalf("the client is at %s, want %s", c.Addr(), b.addr)
	}
}

// TestSubscriptionWaitsForABehindReplica: with no other address, the
// subscription asks the same node again, waiting longer each time it is
// refused, and resumes there once the replica serves again.
func TestSubscriptionWaitsForABehindReplica(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	asked := make(chan wire.Subscribe, 8)
	attempts := behindNode(t, srv, func(n int, s wire.Subscribe) (uint64, int, bool, bool) {
		asked <- s
		switch n {
		case 1:
			return 0, 3, false, true // three records, then behind
		case 2, 3:
			return 0, 0, true, false // still behind
		}
		return 3, 2, false, false
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wantOffsets(t, sub, 0, 5)
	if n := attempts.Load(); n != 4 {
		t.Fatalf("%d subscribes, want 4", n)
	}
	<-asked
	for range 3 {
		if s := <-asked; s.Start != wire.StartOffset || s.Offset != 3 {
			t.Fatalf("asked again with %+v, want offset 3", s)
		}
	}
	if got := []int{int(behindDelay(1).Milliseconds()), int(behindDelay(2).Milliseconds()), int(behindDelay(3).Milliseconds()), int(behindDelay(20).Milliseconds())}; got[0] != 0 || got[1] != 100 || got[2] != 200 || got[3] != 2000 {
		t.Fatalf("delays %v, want 0, 100, 200 ms, at most 2 s", got)
	}
}

// TestSubscriptionBehindWithoutReconnect: without reconnecting, the shard
// ends with the node's ErrReplicaBehind (a ClusterClient's node clients
// hand it to the ClusterSubscription, which moves the shard).
func TestSubscriptionBehindWithoutReconnect(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	behindNode(t, srv, func(int, wire.Subscribe) (uint64, int, bool, bool) { return 0, 2, false, true })
	srv.start()
	c := srv.dial(t, WithoutReconnect())
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wantOffsets(t, sub, 0, 2)
	_, err = sub.Next(ctx)
	var se *ShardError
	if !errors.Is(err, ErrReplicaBehind) || !errors.As(err, &se) || se.Shard != 0 {
		t.Fatalf("Next = %v, want a *ShardError of ErrReplicaBehind", err)
	}
}

// clusterOfTwo is two scripted nodes, ids 1 and 2, each holding orders,
// and a ClusterClient of both (node 1 first) with opts.
func clusterOfTwo(t *testing.T, opts ...Option) (a, b *testServer, dial func() *ClusterClient) {
	a, b = newTestServer(t), newTestServer(t)
	for i, srv := range []*testServer{a, b} {
		srv.welcome.NodeID = strconv.Itoa(i + 1)
		srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true, Replicas: 2})
	}
	return a, b, func() *ClusterClient {
		a.start()
		b.start()
		cc, err := DialCluster(testCtx(t), a.addr+","+b.addr, append([]Option{WithTLSConfig(a.clientTLS), WithLogger(testLogger())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
}

// nextCluster reads offsets from..to-1 from sub, in order.
func nextCluster(t *testing.T, sub *ClusterSubscription, from, to uint64) {
	t.Helper()
	ctx := testCtx(t)
	for want := from; want < to; want++ {
		ev, err := sub.Next(ctx)
		if err != nil || ev.Offset != want || string(ev.Payload) != "p"+strconv.FormatUint(want, 10) {
			t.Fatalf("Next = %d %q, %v; want %d", ev.Offset, ev.Payload, err, want)
		}
	}
}

// TestClusterSubscriptionMovesOffABehindReplica: a ClusterSubscription's
// shard that its replica ends with replica_behind moves to the other
// node, from the offset after its last record; Close stops it.
func TestClusterSubscriptionMovesOffABehindReplica(t *testing.T) {
	a, b, dial := clusterOfTwo(t)
	behindNode(t, a, func(int, wire.Subscribe) (uint64, int, bool, bool) { return 0, 3, false, true })
	asked := make(chan wire.Subscribe, 4)
	behindNode(t, b, func(_ int, s wire.Subscribe) (uint64, int, bool, bool) {
		asked <- s
		return 3, 3, false, false
	})
	cc := dial()
	sub, err := cc.Subscribe(testCtx(t), orders)
	if err != nil {
		t.Fatal(err)
	}
	nextCluster(t, sub, 0, 6)
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 3 || s.Replica != wire.ReplicaNearest {
		t.Fatalf("moved with %+v, want offset 3 of the nearest replica", s)
	}
	if by, moves := sub.ServedBy()[0], sub.Moves(); by != 2 || moves != 1 {
		t.Fatalf("served by node %d after %d moves, want node 2 after 1", by, moves)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(testCtx(t)); !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

// TestClusterSubscriptionFollowsTheLeader: asked for the leader, a
// follower refuses naming it, and the ClusterClient subscribes there.
func TestClusterSubscriptionFollowsTheLeader(t *testing.T) {
	a, b, dial := clusterOfTwo(t, WithReplica(ReplicaLeader))
	subNode(t, a, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		if s.Replica != wire.ReplicaLeader {
			t.Errorf("node 1 asked for %v", s.Replica)
		}
		return wire.Subscribed{}, &wire.Error{Code: wire.CodeNotLeader, Detail: 2, Message: "node 2 leads shard 0"}
	}, func(*quic.Stream) {})
	behindNode(t, b, func(_ int, s wire.Subscribe) (uint64, int, bool, bool) { return 0, 4, false, false })
	cc := dial()
	sub, err := cc.Subscribe(testCtx(t), orders, WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	nextCluster(t, sub, 0, 4)
	if by := sub.ServedBy()[0]; by != 2 {
		t.Fatalf("served by node %d, want the leader, 2", by)
	}
}
