package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/supervisors"
)

// Offsets for a time and WithStartTime, against a real node of this module
// started in this process (over real QUIC, with its batch clock set by the
// test), and against the scripted node where the test must see the frames.

// t0 is the test nodes' first batch time: 2027-01-15T08:00:00Z.
var t0 = time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)

// stampClock is a real node's batch clock in a test: batches are stamped
// with what it is set to.
type stampClock struct{ ns atomic.Int64 }

func (c *stampClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

// set sets the clock to t.
func (c *stampClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// realNode is a node of this module running in this process on a data
// directory of the test's, stamping batches with clk.
type realNode struct {
	t   *testing.T
	dir string
	clk *stampClock
	// mutate adjusts the configuration of each start.
	mutate func(*supervisors.Config)
	n      *supervisors.Node
}

// startRealNode starts a node on a fresh data directory with its clock at
// t0; mutate (may be nil) adjusts its configuration. The test's end shuts
// it down.
func startRealNode(t *testing.T, mutate func(*supervisors.Config)) *realNode {
	t.Helper()
	r := &realNode{t: t, dir: t.TempDir(), clk: &stampClock{}, mutate: mutate}
	r.clk.set(t0)
	r.start("127.0.0.1:0")
	t.Cleanup(r.stop)
	return r
}

// start starts the node on listen.
func (r *realNode) start(listen string) {
	r.t.Helper()
	cfg := supervisors.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = r.dir, listen, "127.0.0.1:0"
	// A client that reconnects after the node's GoAway is gone at once;
	// bound the drain all the same.
	cfg.DrainGrace = 500 * time.Millisecond
	if r.mutate != nil {
		r.mutate(&cfg)
	}
	n, err := supervisors.Start(cfg, supervisors.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: r.clk.now})
	if err != nil {
		r.t.Fatalf("start node: %v", err)
	}
	r.n = n
}

// stop shuts the node down (once per start).
func (r *realNode) stop() {
	if r.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.n.Shutdown(ctx); err != nil {
		r.t.Errorf("node shutdown: %v", err)
	}
	r.n = nil
}

// restart stops the node and starts it again on the same address and data
// directory, as an operator's restart does.
func (r *realNode) restart() {
	r.t.Helper()
	addr := r.n.Addr()
	r.stop()
	r.start(addr)
}

// dial connects a client to the node.
func (r *realNode) dial(opts ...Option) *Client {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, r.n.Addr(), append([]Option{WithCAFile(r.n.CAFile()), WithLogger(testLogger())}, opts...)...)
	if err != nil {
		r.t.Fatalf("dial: %v", err)
	}
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// publishAt publishes one batch of n records to shard of name (of shards
// shards) with the node's clock at at, and returns its first offset.
func (r *realNode) publishAt(c *Client, at time.Time, name StreamName, shard, shards uint32, n int) uint64 {
	r.t.Helper()
	r.clk.set(at)
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprintf("%d@%s", i, at.Sub(t0)))
	}
	ack, err := c.PublishBatch(testCtx(r.t), name, payloads, WithAck(AckPerBatch), WithKey(keyFor(r.t, shard, shards, RoutingHash)))
	if err != nil || ack.Shard != shard {
		r.t.Fatalf("publish to shard %d: %+v, %v", shard, ack, err)
	}
	return ack.Offset
}

// nextOffsets returns the (shard, offset) of the next n events.
func nextOffsets(t *testing.T, sub *Subscription, n int) map[uint32][]uint64 {
	t.Helper()
	out := map[uint32][]uint64{}
	for range n {
		ev, err := sub.Next(testCtx(t))
		if err != nil {
			t.Fatalf("Next after %v: %v", out, err)
		}
		out[ev.Shard] = append(out[ev.Shard], ev.Offset)
	}
	return out
}

// OffsetsForTime against a real node: per shard, the first batch stamped
// at or after the time; the first retained offset before everything; the
// tail after everything (the future) and for a shard with nothing that
// recent; the zero time and times outside int64 nanoseconds clamped; an
// ephemeral stream too; and the typed errors.
func TestOffsetsForTimeAgainstNode(t *testing.T) {
	node := startRealNode(t, nil)
	c := node.dial()
	ctx := testCtx(t)
	if _, err := c.CreateStream(ctx, orders, StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	// Shard 0: [0,2)@t0 [2,5)@t0+10s [5,6)@t0+5s (the clock stepped back)
	// [6,7)@t0+20s. Shard 1: [0,3)@t0+15s.
	sec := time.Second
	node.publishAt(c, t0, orders, 0, 2, 2)
	node.publishAt(c, t0.Add(10*sec), orders, 0, 2, 3)
	node.publishAt(c, t0.Add(5*sec), orders, 0, 2, 1)
	node.publishAt(c, t0.Add(20*sec), orders, 0, 2, 1)
	node.publishAt(c, t0.Add(15*sec), orders, 1, 2, 3)

	for _, tc := range []struct {
		name string
		at   time.Time
		want map[uint32]uint64
	}{
		{"the zero time", time.Time{}, map[uint32]uint64{0: 0, 1: 0}},
		{"before 1678", time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), map[uint32]uint64{0: 0, 1: 0}},
		{"before the epoch", time.Unix(-5, 0), map[uint32]uint64{0: 0, 1: 0}},
		{"before everything", t0.Add(-time.Hour), map[uint32]uint64{0: 0, 1: 0}},
		{"the first batch's time", t0, map[uint32]uint64{0: 0, 1: 0}},
		{"just after it", t0.Add(1), map[uint32]uint64{0: 2, 1: 0}},
		{"the stepped-back batch's time", t0.Add(5 * sec), map[uint32]uint64{0: 2, 1: 0}},
		{"past the stepped-back batch", t0.Add(10*sec + 1), map[uint32]uint64{0: 6, 1: 0}},
		{"past shard 1's last batch", t0.Add(16 * sec), map[uint32]uint64{0: 6, 1: 3}},
		{"the last batch's time", t0.Add(20 * sec), map[uint32]uint64{0: 6, 1: 3}},
		{"the future: the tails", t0.Add(time.Hour), map[uint32]uint64{0: 7, 1: 3}},
		{"after 2262", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), map[uint32]uint64{0: 7, 1: 3}},
	} {
		got, err := c.OffsetsForTime(ctx, orders, tc.at)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}

	// A stream with no records at all answers its tails, 0.
	empty := StreamName{Tenant: "acme", Namespace: "shop", Stream: "empty"}
	if _, err := c.CreateStream(ctx, empty, StreamConfig{Shards: 3, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.OffsetsForTime(ctx, empty, t0); err != nil || !maps.Equal(got, map[uint32]uint64{0: 0, 1: 0, 2: 0}) {
		t.Errorf("an empty stream: %v, %v", got, err)
	}
	// An ephemeral stream is answered from its memory log.
	ticks := StreamName{Tenant: "acme", Namespace: "shop", Stream: "ticks"}
	if _, err := c.CreateStream(ctx, ticks, StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	node.publishAt(c, t0, ticks, 0, 1, 3)
	node.publishAt(c, t0.Add(sec), ticks, 0, 1, 3)
	if got, err := c.OffsetsForTime(ctx, ticks, t0.Add(1)); err != nil || got[0] != 3 {
		t.Errorf("an ephemeral stream: %v, %v", got, err)
	}

	_, err := c.OffsetsForTime(ctx, StreamName{Tenant: "acme", Namespace: "shop", Stream: "nope"}, t0)
	wantCode(t, err, wire.CodeStreamNotFound)
	_, err = c.OffsetsForTime(ctx, StreamName{Tenant: "acme", Namespace: "shop", Stream: "bad name"}, t0)
	wantCode(t, err, wire.CodeInvalidStreamName)
}

// WithStartTime against a real node: every shard from its first batch at
// or after the time, one shard, a WithStartOffsets map winning for its
// shards, the last start option winning, a time in the future starting at
// the tails; a stream that does not exist is ErrStreamNotFound, not
// created. Across a node restart the subscription resumes by offset, not
// at the time again.
func TestSubscribeWithStartTimeAgainstNode(t *testing.T) {
	node := startRealNode(t, nil)
	c := node.dial()
	ctx := testCtx(t)
	if _, err := c.CreateStream(ctx, orders, StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	sec := time.Second
	node.publishAt(c, t0, orders, 0, 2, 2)             // shard 0 [0,2)
	node.publishAt(c, t0.Add(10*sec), orders, 0, 2, 2) // shard 0 [2,4)
	node.publishAt(c, t0.Add(2*sec), orders, 1, 2, 1)  // shard 1 [0,1)
	node.publishAt(c, t0.Add(12*sec), orders, 1, 2, 2) // shard 1 [1,3)

	subscribe := func(opts ...SubscribeOption) *Subscription {
		t.Helper()
		sub, err := c.Subscribe(ctx, orders, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		return sub
	}
	fromTime := subscribe(WithStartTime(t0.Add(5 * sec)))
	if got := fromTime.StartOffsets(); !maps.Equal(got, map[uint32]uint64{0: 2, 1: 1}) {
		t.Fatalf("start offsets %v", got)
	}
	if got := nextOffsets(t, fromTime, 4); fmt.Sprint(got) != "map[0:[2 3] 1:[1 2]]" {
		t.Fatalf("from t0+5s: %v", got)
	}

	if sub := subscribe(WithShard(1), WithStartTime(t0.Add(1))); sub.StartOffset() != 0 || fmt.Sprint(sub.Shards()) != "[1]" {
		t.Fatalf("shard 1 from t0+1ns starts at %d", sub.StartOffset())
	}
	if sub := subscribe(WithShard(0), WithStartTime(t0.Add(1))); sub.StartOffset() != 2 {
		t.Fatalf("shard 0 from t0+1ns starts at %d", sub.StartOffset())
	}
	if sub := subscribe(WithStartTime(t0.Add(5*sec)), WithStartOffsets(map[uint32]uint64{0: 1})); !maps.Equal(sub.StartOffsets(), map[uint32]uint64{0: 1, 1: 1}) {
		t.Fatalf("a WithStartOffsets map and a time: %v", sub.StartOffsets())
	}
	if sub := subscribe(WithStartTime(t0.Add(5*sec)), WithStartEarliest()); !maps.Equal(sub.StartOffsets(), map[uint32]uint64{0: 0, 1: 0}) {
		t.Fatalf("a time, then earliest: %v", sub.StartOffsets())
	}
	if sub := subscribe(WithStartLatest(), WithStartTime(t0)); !maps.Equal(sub.StartOffsets(), map[uint32]uint64{0: 0, 1: 0}) {
		t.Fatalf("latest, then a time: %v", sub.StartOffsets())
	}
	future := subscribe(WithStartTime(t0.Add(24 * time.Hour)))
	if got := future.StartOffsets(); !maps.Equal(got, map[uint32]uint64{0: 4, 1: 3}) {
		t.Fatalf("a time in the future starts at the tails: %v", got)
	}

	nope := StreamName{Tenant: "acme", Namespace: "shop", Stream: "nope"}
	_, err := c.Subscribe(ctx, nope, WithStartTime(t0))
	wantCode(t, err, wire.CodeStreamNotFound)
	if _, err := c.DescribeStream(ctx, nope); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("a subscription from a time created the stream: %v", err)
	}

	// Restart the node, then publish: the subscription from t0+5s resumes
	// one past what it received, and the one from the future at the tails
	// it started at. A time resolved again would deliver shard 0's 2 and 3
	// again to the first, and skip what was published to the second.
	node.restart()
	node.publishAt(c, t0.Add(30*sec), orders, 0, 2, 1) // shard 0 [4,5)
	node.publishAt(c, t0.Add(30*sec), orders, 1, 2, 1) // shard 1 [3,4)
	if got := nextOffsets(t, fromTime, 2); fmt.Sprint(got) != "map[0:[4] 1:[3]]" {
		t.Fatalf("from t0+5s after a restart: %v", got)
	}
	if got := nextOffsets(t, future, 2); fmt.Sprint(got) != "map[0:[4] 1:[3]]" {
		t.Fatalf("from the future after a restart: %v", got)
	}
}

// WithStartTime resolves the time once: after records were delivered and
// the connection was lost, the shard resumes one past the last record it
// received, and the node is not asked for the offsets again.
func TestStartTimeResumesByOffset(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	var lookups atomic.Int32
	at := t0.Add(7 * time.Second)
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		if f.Header.Type != wire.TypeOffsetsForTime {
			srv.defaultControl(sc, f)
			return
		}
		lookups.Add(1)
		o, err := wire.DecodeOffsetsForTime(f.Body)
		if err != nil || o.Name != orders || o.Shard != AllShards || o.UnixNano != at.UnixNano() {
			t.Errorf("offsets for time %+v, %v", o, err)
		}
		sc.writeCtl(wire.AppendShardOffsets(nil, f.Header.RequestID, []wire.ShardOffset{{Shard: 0, Offset: 10}}))
	}
	asked := make(chan wire.Subscribe, 4)
	var attempts atomic.Int32
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		asked <- s
		return wire.Subscribed{Offset: s.Offset, QueueCapacity: 8}, nil
	}, func(st *quic.Stream) {
		if attempts.Add(1) == 1 {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{10}, recs(10, 3)))
		} else {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{13}, recs(13, 2)))
		}
		<-st.Context().Done()
	})
	srv.start()
	c := srv.dial(t)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders, WithStartTime(at))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 10 {
		t.Fatalf("first subscribe %+v, want offset 10", s)
	}
	for want := uint64(10); want < 12; want++ {
		if ev, err := sub.Next(ctx); err != nil || ev.Offset != want {
			t.Fatalf("Next = %d, %v; want %d", ev.Offset, err, want)
		}
	}
	drop(first)
	nextConn(t, srv)
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 13 {
		t.Fatalf("resumed subscribe %+v, want offset 13", s)
	}
	for want := uint64(12); want < 15; want++ {
		if ev, err := sub.Next(ctx); err != nil || ev.Offset != want {
			t.Fatalf("Next = %d, %v; want %d", ev.Offset, err, want)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Fatalf("the node was asked for the offsets %d times, want once", n)
	}
}

// A node without offsets_for_time: OffsetsForTime and WithStartTime fail
// with an *UnsupportedError, matching errors.ErrUnsupported and
// ErrInvalidRequest, and send nothing; a ShardOffsets answer naming
// another shard, or a shard twice, is a protocol violation.
func TestOffsetsForTimeUnsupported(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.Features &^= wire.FeatureOffsetsForTime
	srv.addStream(orders, wire.StreamConfig{Shards: 2, Durable: true})
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		if f.Header.Type == wire.TypeOffsetsForTime {
			t.Errorf("an OffsetsForTime went to a node without the feature")
		}
		srv.defaultControl(sc, f)
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	_, err := c.OffsetsForTime(ctx, orders, t0)
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Feature != "offsets_for_time" || !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("OffsetsForTime on an old node: %v (%T)", err, err)
	}
	if _, err := c.Subscribe(ctx, orders, WithStartTime(t0)); !errors.As(err, &ue) {
		t.Fatalf("Subscribe WithStartTime on an old node: %v", err)
	}
}

// The answer must name the shards asked about, each once.
func TestShardOffsetsOf(t *testing.T) {
	for _, tc := range []struct {
		offs  []wire.ShardOffset
		shard uint32
		want  map[uint32]uint64
	}{
		{[]wire.ShardOffset{{Shard: 0, Offset: 5}, {Shard: 1, Offset: 7}}, AllShards, map[uint32]uint64{0: 5, 1: 7}},
		{nil, AllShards, map[uint32]uint64{}},
		{[]wire.ShardOffset{{Shard: 3, Offset: 9}}, 3, map[uint32]uint64{3: 9}},
		{[]wire.ShardOffset{{Shard: 2, Offset: 9}}, 3, nil},
		{[]wire.ShardOffset{{Shard: 3, Offset: 9}, {Shard: 3, Offset: 9}}, 3, nil},
		{nil, 3, nil},
		{[]wire.ShardOffset{{Shard: 0, Offset: 5}, {Shard: 0, Offset: 6}}, AllShards, nil},
	} {
		got, err := shardOffsetsOf(tc.offs, tc.shard, "test")
		if tc.want == nil {
			wantCode(t, err, wire.CodeProtocolViolation)
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%v of shard %d: %v, %v; want %v", tc.offs, tc.shard, got, err, tc.want)
		}
	}
}

// Times outside what int64 nanoseconds hold are clamped.
func TestUnixNanoOf(t *testing.T) {
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{time.Time{}, math.MinInt64},
		{time.Unix(0, math.MinInt64), math.MinInt64},
		{time.Unix(-1, 0), -int64(time.Second)},
		{t0, t0.UnixNano()},
		{time.Unix(0, math.MaxInt64), math.MaxInt64},
		{time.Unix(0, math.MaxInt64).Add(time.Hour), math.MaxInt64},
	} {
		if got := unixNanoOf(tc.at); got != tc.want {
			t.Errorf("unixNanoOf(%v) = %d, want %d", tc.at, got, tc.want)
		}
	}
}
