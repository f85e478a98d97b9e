package supervisors

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// publishBlock publishes one batch of n records ("r<i>") on shard 0.
func (r *rawConn) publishBlock(name wire.StreamName, n int) {
	r.t.Helper()
	recs := make([]wire.Record, n)
	for i := range recs {
		recs[i] = wire.Record{Payload: []byte("r" + itoa(i))}
	}
	pub := r.stream()
	r.write(pub, wire.AppendPublish(nil, 1, wire.Publish{Name: name, Ack: wire.AckPerBatch, Count: uint32(n), Records: wire.AppendRecords(nil, recs)}))
	if f := r.read(pub); f.Header.Type != wire.TypePublishAck {
		r.t.Fatalf("publish: %s %s", f.Header.Type, errFrame(f))
	}
}

// A push of thousands of scattered records (every other one owed) stays a
// valid frame: the cursor is bounded, the rest goes in later pushes.
func TestGroupPushOfScatteredRecordsKeepsCursorBounded(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.GroupMaxPoll, c.GroupMaxInFlight = 10000, 20000 })
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	const total = 9000
	c.publishBlock(jobs, total)
	g := decodeRecords(t, c.call(10, wire.AppendGroupPoll(nil, 10, wire.GroupPoll{Name: jobs, Group: "g", Max: total})))
	if len(g.Records) != total {
		t.Fatalf("polled %d", len(g.Records))
	}
	var odd, even []uint64
	for i := uint64(0); i < total; i++ {
		if i%2 == 1 {
			odd = append(odd, i)
		} else {
			even = append(even, i)
		}
	}
	for i, step := range []struct {
		nack bool
		offs []uint64
	}{{false, odd}, {true, even}} {
		id := uint64(11 + i)
		if f := c.call(id, wire.AppendGroupAck(nil, id, step.nack, wire.GroupAck{Name: jobs, Group: "g", Offsets: step.offs})); f.Header.Type != wire.TypeGroupDone {
			t.Fatal(errFrame(f))
		}
	}
	s, _ := joinRaw(t, c, 20, "g", "m", 10000)
	got, pushes := 0, 0
	for got < total/2 {
		g := decodeRecords(t, c.read(s))
		if len(g.Cursor) > wire.MaxCursorBytes {
			t.Fatalf("cursor of %d bytes", len(g.Cursor))
		}
		got += len(g.Records)
		pushes++
		c.write(s, wire.AppendGroupStreamAck(nil, uint64(100+pushes), wire.GroupStreamAck{Cursor: g.Cursor, Count: uint32(len(g.Records))}))
	}
	if pushes < 2 {
		t.Fatalf("%d scattered records came in %d push(es): the cursor bound did not split them", got, pushes)
	}
	deadline := time.Now().Add(10 * time.Second)
	for id := uint64(5000); ; id++ {
		info, err := wire.DecodeGroupInfo(c.call(id, wire.AppendDescribeGroup(nil, id, wire.DescribeGroup{Name: jobs, Group: "g"})).Body)
		if err != nil {
			t.Fatal(err)
		}
		if info.Shards[0].Committed == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed %d of %d", info.Shards[0].Committed, total)
		}
	}
}

// The largest record the node accepts fits a group push too; one byte more
// is refused at publish.
func TestGroupPushOfTheLargestRecord(t *testing.T) {
	const frame = 64 << 10
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.MaxFrameBytes, c.ReadMaxBytes = frame, 32<<10 })
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	block := func(size int) ([]byte, uint32) {
		// One record, no key or headers: 1 + 1 + uvarint(len) + payload.
		p := make([]byte, size-2-3)
		b := wire.AppendRecords(nil, []wire.Record{{Payload: p}})
		if len(b) != size {
			t.Fatalf("block of %d bytes, want %d", len(b), size)
		}
		return b, 1
	}
	pub := c.stream()
	limit := frame - 93
	b, count := block(limit + 1)
	c.write(pub, wire.AppendPublish(nil, 1, wire.Publish{Name: jobs, Ack: wire.AckPerBatch, Count: count, Records: b}))
	wantErrCode(t, c.read(pub), wire.CodeBatchTooLarge)
	b, count = block(limit)
	c.write(pub, wire.AppendPublish(nil, 2, wire.Publish{Name: jobs, Ack: wire.AckPerBatch, Count: count, Records: b}))
	if f := c.read(pub); f.Header.Type != wire.TypePublishAck {
		t.Fatal(errFrame(f))
	}
	s, _ := joinRaw(t, c, 10, "g", "m", 1)
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := wire.ReadFrame(s, frame)
	if err != nil {
		t.Fatalf("push of the largest record: %v", err)
	}
	if g := decodeRecords(t, f); len(g.Records) != 1 || len(g.Records[0].Record) != limit {
		t.Fatalf("push: %d records", len(g.Records))
	}
}

// After the catalog restarts (new shard actors), a push member is told to
// join again (not that its stream was deleted), and joining again works.
func TestGroupMemberAfterCatalogRestart(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.CatalogProps = panicOnce(&armed, "*actors.ListStreamsRequest")
		o.RequestTimeout = time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n)
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "jobs"}
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	gs, err := c.Group(stream, "g").Subscribe(ctx, client.WithMember("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	armed.Store(true)
	if _, err := c.ListStreams(ctx, "acme", ""); err == nil {
		t.Fatal("the list whose handling panicked succeeded")
	}
	if _, err := gs.Next(ctx); !errors.Is(err, client.ErrSubscriptionAborted) {
		t.Fatalf("member after the catalog restart: %v", err)
	}
	gs2, err := c.Group(stream, "g").Subscribe(ctx, client.WithMember("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer gs2.Close()
	if _, err := c.Publish(ctx, stream, []byte("after")); err != nil {
		t.Fatal(err)
	}
	d, err := gs2.Next(ctx)
	if err != nil || len(d.Records) != 1 || string(d.Records[0].Payload) != "after" {
		t.Fatalf("after rejoining: %+v %v", d, err)
	}
	if err := gs2.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
}

// A coordinator that panics restarts from storage: the request it failed on
// is answered internal (outcome unknown), its members join again,
// acknowledged records stay settled, unacked ones come back.
func TestGroupCoordinatorRestart(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.CoordinatorProps = panicOnce(&armed, "*actors.GroupDescribeRequest")
	})
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	c.publishN(jobs, 0, 4)
	g := decodeRecords(t, c.call(10, wire.AppendGroupPoll(nil, 10, wire.GroupPoll{Name: jobs, Group: "g", Max: 4})))
	if len(g.Records) != 4 {
		t.Fatalf("polled %d", len(g.Records))
	}
	if f := c.call(11, wire.AppendGroupAck(nil, 11, false, wire.GroupAck{Name: jobs, Group: "g", Offsets: []uint64{0, 2}})); f.Header.Type != wire.TypeGroupDone {
		t.Fatal(errFrame(f))
	}
	armed.Store(true)
	f := c.call(12, wire.AppendDescribeGroup(nil, 12, wire.DescribeGroup{Name: jobs, Group: "g"}))
	if werr, err := wire.DecodeError(f.Body); f.Header.Type != wire.TypeError || err != nil || werr.Code != wire.CodeInternal {
		t.Fatalf("the request the coordinator failed on: %s %v", f.Header.Type, errFrame(f))
	}
	g = decodeRecords(t, c.call(13, wire.AppendGroupPoll(nil, 13, wire.GroupPoll{Name: jobs, Group: "g", Max: 4})))
	if len(g.Records) != 2 || g.Records[0].Offset != 1 || g.Records[1].Offset != 3 || g.Records[0].Attempts != 2 {
		t.Fatalf("after the coordinator restart: %+v", g.Records)
	}
}

// A poll waiting for work whose connection closes is dropped: the next
// record goes to a consumer that is there, not to a claim for no one that
// would wait out the visibility timeout and use up an attempt.
func TestWaitingPollOfClosedConnectionClaimsNothing(t *testing.T) {
	n := testNode(t, t.TempDir())
	a := dialRaw(t, n)
	a.publishBlock(orders, 1)
	a.write(a.control, wire.AppendGroupPoll(nil, 2, wire.GroupPoll{Name: orders, Group: "g", Max: 10}))
	if recs, err := wire.DecodeGroupRecords(a.read(a.control).Body); err != nil || len(recs.Records) != 1 {
		t.Fatalf("first poll: %d records, %v", len(recs.Records), err)
	}
	a.write(a.control, wire.AppendGroupAck(nil, 3, false, wire.GroupAck{Name: orders, Group: "g", Shard: 0, Offsets: []uint64{0}}))
	a.read(a.control)

	// A poll that waits at the tail; the describe after it is answered
	// once the coordinator holds the poll (both go to it in order).
	a.write(a.control, wire.AppendGroupPoll(nil, 4, wire.GroupPoll{Name: orders, Group: "g", Max: 10, WaitMillis: 60_000}))
	a.write(a.control, wire.AppendDescribeGroup(nil, 5, wire.DescribeGroup{Name: orders, Group: "g"}))
	if f := a.read(a.control); f.Header.RequestID != 5 {
		t.Fatalf("got an answer to request %d (%s), want the describe's", f.Header.RequestID, f.Header.Type)
	}
	_ = a.conn.CloseWithError(0, "gone")
	// The connection actor stops after its lanes: by then the lane's
	// Terminated is in the coordinator's mailbox, ahead of what follows.
	waitFor(t, "the closed connection to go", func() bool { return n.Metric("herald_connections") == 0 })

	b := dialRaw(t, n)
	b.publishBlock(orders, 1)
	b.write(b.control, wire.AppendGroupPoll(nil, 6, wire.GroupPoll{Name: orders, Group: "g", Max: 10, WaitMillis: 5_000}))
	recs, err := wire.DecodeGroupRecords(b.read(b.control).Body)
	if err != nil || len(recs.Records) != 1 || recs.Records[0].Offset != 1 {
		t.Fatalf("poll after the waiting poller left: %+v, %v; want offset 1", recs.Records, err)
	}
	b.write(b.control, wire.AppendDescribeGroup(nil, 7, wire.DescribeGroup{Name: orders, Group: "g"}))
	info, err := wire.DecodeGroupInfo(b.read(b.control).Body)
	if err != nil || info.Shards[0].Claims != 1 {
		t.Fatalf("group after the poll: %+v, %v; want the one claim of b's poll", info.Shards, err)
	}
}
