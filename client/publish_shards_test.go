package client

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// keyFor returns a key that routing maps to shard of shards.
func keyFor(t *testing.T, shard, shards uint32, routing wire.Routing) []byte {
	t.Helper()
	for i := range 100000 {
		k := []byte(fmt.Sprint("key-", i))
		if wire.ShardFor(k, shards, routing) == shard {
			return k
		}
	}
	t.Fatalf("no key for shard %d of %d", shard, shards)
	return nil
}

// shardNode scripts a node that acks every publish at once with its shard
// and the shard's next offsets, recording which QUIC stream carried each
// shard and the payloads in arrival order. Publishes to a shard in hold are
// read but not answered until release is closed.
type shardNode struct {
	t           *testing.T
	hold        map[uint32]bool
	release     chan struct{}
	releaseOnce sync.Once

	mu struct {
		sync.Mutex
		// streams maps a shard to the QUIC streams that carried it.
		streams map[uint32]map[quic.StreamID]bool
		// payloads are each shard's payloads in arrival order.
		payloads map[uint32][]string
		// tails are each shard's next offset.
		tails map[uint32]uint64
		// publishes are every Publish received.
		publishes []wire.Publish
	}
	// held receives each publish withheld.
	held chan wire.Publish
}

func newShardNode(t *testing.T, srv *testServer, hold ...uint32) *shardNode {
	n := &shardNode{t: t, hold: map[uint32]bool{}, release: make(chan struct{}), held: make(chan wire.Publish, 16)}
	for _, h := range hold {
		n.hold[h] = true
	}
	// Registered after the server's own cleanup, so it runs first.
	t.Cleanup(n.unhold)
	n.mu.streams = map[uint32]map[quic.StreamID]bool{}
	n.mu.payloads = map[uint32][]string{}
	n.mu.tails = map[uint32]uint64{}
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		for {
			p, err := wire.DecodePublish(f.Body)
			if err != nil {
				t.Errorf("decode publish: %v", err)
				return
			}
			ack := n.record(st.StreamID(), p, f.Header.RequestID)
			if n.hold[p.Shard] {
				// The shard's storage stalls: this stream is not served
				// until release.
				n.held <- p
				<-n.release
			}
			if _, err := st.Write(ack); err != nil {
				return
			}
			if f, err = wire.ReadFrame(st, wire.DefaultMaxFrameBytes); err != nil {
				return
			}
		}
	}
	return n
}

// unhold lets the node answer the withheld publishes.
func (n *shardNode) unhold() { n.releaseOnce.Do(func() { close(n.release) }) }

// record notes p and returns its ack.
func (n *shardNode) record(id quic.StreamID, p wire.Publish, reqID uint64) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.publishes = append(n.mu.publishes, p)
	if n.mu.streams[p.Shard] == nil {
		n.mu.streams[p.Shard] = map[quic.StreamID]bool{}
	}
	n.mu.streams[p.Shard][id] = true
	it := wire.NewRecordIter(p.Records)
	var r wire.Record
	for it.Next(&r) {
		n.mu.payloads[p.Shard] = append(n.mu.payloads[p.Shard], string(r.Payload))
	}
	off := n.mu.tails[p.Shard]
	n.mu.tails[p.Shard] += uint64(p.Count)
	return wire.AppendPublishAck(nil, reqID, wire.PublishAck{Shard: p.Shard, Offset: off, Count: p.Count})
}

// streamOf returns the one QUIC stream that carried shard.
func (n *shardNode) streamOf(t *testing.T, shard uint32) quic.StreamID {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.mu.streams[shard]) != 1 {
		t.Fatalf("shard %d came on streams %v, want exactly one", shard, n.mu.streams[shard])
	}
	for id := range n.mu.streams[shard] {
		return id
	}
	return 0
}

// TestPublishShardStreams: the client picks the shard from the key with the
// stream's routing and sends it explicitly; the first four shards it
// publishes to get a QUIC stream each, a fifth shares one; a shard's
// publishes stay on one stream in issue order; the stream is described once.
func TestPublishShardStreams(t *testing.T) {
	for _, routing := range []wire.Routing{wire.RoutingHash, wire.RoutingJump} {
		t.Run(routing.String(), func(t *testing.T) {
			srv := newTestServer(t)
			const shards = 8
			srv.addStream(orders, wire.StreamConfig{Shards: shards, Durable: true, Routing: routing})
			node := newShardNode(t, srv)
			srv.start()
			c := srv.dial(t)
			ctx := testCtx(t)

			order := []uint32{5, 2, 7, 0, 3} // the fifth shard (3) shares the first's stream
			keys := map[uint32][]byte{}
			for _, sh := range order {
				keys[sh] = keyFor(t, sh, shards, routing)
			}
			// Interleave publishes to the shards, several in flight at once.
			var futs []*PublishFuture
			var want []uint32
			for round := range 3 {
				for _, sh := range order {
					f, err := c.PublishAsync(ctx, orders, [][]byte{[]byte(fmt.Sprint(sh, "-", round))}, WithKey(keys[sh]))
					if err != nil {
						t.Fatal(err)
					}
					futs = append(futs, f)
					want = append(want, sh)
				}
			}
			// Unkeyed publishes go to shard 0.
			if ack, err := c.Publish(ctx, orders, []byte("0-x")); err != nil || ack.Shard != 0 {
				t.Fatalf("unkeyed publish = %+v, %v", ack, err)
			}
			for i, f := range futs {
				ack, err := f.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ack.Shard != want[i] || ack.Offset != uint64(i/len(order)) {
					t.Fatalf("publish %d: ack %+v, want shard %d offset %d", i, ack, want[i], i/len(order))
				}
			}

			if n := srv.describeCount(orders); n != 1 {
				t.Fatalf("stream described %d times, want once", n)
			}
			ids := map[quic.StreamID]uint32{}
			for _, sh := range order[:4] {
				id := node.streamOf(t, sh)
				if other, ok := ids[id]; ok {
					t.Fatalf("shards %d and %d share stream %d", other, sh, id)
				}
				ids[id] = sh
			}
			if got, first := node.streamOf(t, order[4]), node.streamOf(t, order[0]); got != first {
				t.Fatalf("fifth shard on stream %d, want the first pooled stream %d", got, first)
			}
			if node.streamOf(t, 0) != node.streamOf(t, order[3]) {
				t.Fatal("shard 0 (unkeyed) moved to another stream")
			}
			node.mu.Lock()
			defer node.mu.Unlock()
			for _, p := range node.mu.publishes {
				if p.Shard == wire.AnyShard || string(p.Key) != "" && wire.ShardFor(p.Key, shards, routing) != p.Shard {
					t.Fatalf("publish with key %q sent to shard %d", p.Key, p.Shard)
				}
			}
			for _, sh := range order {
				if got := fmt.Sprint(node.mu.payloads[sh]); sh != 0 && got != fmt.Sprintf("[%d-0 %d-1 %d-2]", sh, sh, sh) {
					t.Fatalf("shard %d payloads %s, out of issue order", sh, got)
				}
			}
		})
	}
}

// TestStalledShardDoesNotHoldOthers: the node withholds the acks of one
// shard's publish stream; a publish to another shard, on its own stream,
// still completes.
func TestStalledShardDoesNotHoldOthers(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 2, Durable: true})
	node := newShardNode(t, srv, 0)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	k0, k1 := keyFor(t, 0, 2, wire.RoutingHash), keyFor(t, 1, 2, wire.RoutingHash)

	stalled, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("stuck")}, WithKey(k0))
	if err != nil {
		t.Fatal(err)
	}
	<-node.held // the node has it and is not answering
	if ack, err := c.Publish(ctx, orders, []byte("free"), WithKey(k1)); err != nil || ack.Shard != 1 {
		t.Fatalf("publish to the other shard = %+v, %v", ack, err)
	}
	if st := c.shardPublishStats(t, orders, 0); st.inflight != 1 {
		t.Fatalf("stalled shard holds %+v, want its publish in flight", st)
	}
	select {
	case <-stalled.req.settled:
		t.Fatal("the stalled publish resolved before its ack")
	default:
	}
	node.unhold()
	if ack, err := stalled.Wait(ctx); err != nil || ack.Shard != 0 {
		t.Fatalf("stalled publish after release = %+v, %v", ack, err)
	}
}

// TestPublishAutoCreate: a publish to a stream the node does not know goes
// with AnyShard; once it is answered the client describes the stream again
// and, now that it exists, routes explicitly.
func TestPublishAutoCreate(t *testing.T) {
	srv := newTestServer(t)
	name := StreamName{Tenant: "t", Namespace: "n", Stream: "fresh"}
	var mu sync.Mutex
	var shards []uint32
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		for {
			p, err := wire.DecodePublish(f.Body)
			if err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			mu.Lock()
			shards = append(shards, p.Shard)
			mu.Unlock()
			// The node auto-creates the stream, one shard.
			srv.addStream(name, wire.StreamConfig{Shards: 1, Durable: true})
			_, _ = st.Write(wire.AppendPublishAck(nil, f.Header.RequestID, wire.PublishAck{Shard: 0, Count: p.Count}))
			if f, err = wire.ReadFrame(st, wire.DefaultMaxFrameBytes); err != nil {
				return
			}
		}
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	for range 2 {
		if _, err := c.Publish(ctx, name, []byte("x"), WithKey([]byte("k"))); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(shards) != fmt.Sprint([]uint32{wire.AnyShard, 0}) {
		t.Fatalf("publishes went to shards %v, want AnyShard then 0", shards)
	}
	if n := srv.describeCount(name); n != 2 {
		t.Fatalf("described %d times, want 2 (before the first publish and after it)", n)
	}
}

// TestPublishRefreshesStaleShards: a cached description that no longer
// holds (the stream was re-created with fewer shards) makes the node refuse
// with invalid_shard; the client describes again and re-sends once.
func TestPublishRefreshesStaleShards(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 4, Durable: true})
	var mu sync.Mutex
	var got []uint32
	refuseAll := false
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		for {
			p, err := wire.DecodePublish(f.Body)
			if err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			mu.Lock()
			got = append(got, p.Shard)
			refuse := refuseAll
			mu.Unlock()
			var answer []byte
			if p.Shard >= 2 || refuse {
				answer = wire.AppendError(nil, f.Header.RequestID, wire.Errorf(wire.CodeInvalidShard, "shard %d", p.Shard))
			} else {
				answer = wire.AppendPublishAck(nil, f.Header.RequestID, wire.PublishAck{Shard: p.Shard, Count: p.Count})
			}
			_, _ = st.Write(answer)
			if f, err = wire.ReadFrame(st, wire.DefaultMaxFrameBytes); err != nil {
				return
			}
		}
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	if _, err := c.DescribeStream(ctx, orders); err != nil { // caches 4 shards
		t.Fatal(err)
	}
	srv.addStream(orders, wire.StreamConfig{Shards: 2, Durable: true}) // re-created
	key := keyFor(t, 3, 4, wire.RoutingHash)
	ack, err := c.Publish(ctx, orders, []byte("x"), WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if want := wire.ShardFor(key, 2, wire.RoutingHash); ack.Shard != want {
		t.Fatalf("re-sent to shard %d, want %d", ack.Shard, want)
	}
	mu.Lock()
	if len(got) != 2 || got[0] != 3 {
		t.Fatalf("publishes went to shards %v, want 3 then the refreshed shard", got)
	}
	got, refuseAll = nil, true
	mu.Unlock()

	// A refusal after a fresh description is not retried again.
	srv.addStream(orders, wire.StreamConfig{Shards: 4, Durable: true})
	_, err = c.Publish(ctx, orders, []byte("y"), WithKey(key))
	if !errors.Is(err, ErrInvalidShard) {
		t.Fatalf("publish refused twice: %v, want ErrInvalidShard", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[1 3]" {
		t.Fatalf("publishes went to shards %v, want 1 (cached 2 shards), then 3 (described again)", got)
	}
}
