package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// groupPeer is the scripted node's side of one group stream.
type groupPeer struct {
	t  *testing.T
	st *quic.Stream
	// mu serializes writes: the test and the stream's handler both write.
	mu sync.Mutex
	// join is the client's GroupSubscribe and joinID its request id.
	join   wire.GroupSubscribe
	joinID uint64
	// acks receives every GroupStreamAck the client sends.
	acks chan groupAckFrame
	// ended receives how the client's side of the stream ended: nil for a
	// clean close.
	ended chan error
}

// groupAckFrame is one GroupStreamAck and its request id.
type groupAckFrame struct {
	id  uint64
	ack wire.GroupStreamAck
}

// groupNode scripts the node's side of group streams: join checks each
// GroupSubscribe and returns the assignment to answer with, or the error to
// refuse it with (the node then closes the stream). Each stream's peer is
// sent on the returned channel once the join is answered.
func groupNode(t *testing.T, srv *testServer, join func(wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error)) chan *groupPeer {
	peers := make(chan *groupPeer, 4)
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		if f.Header.Type != wire.TypeGroupSubscribe {
			t.Errorf("%v frame opens a stream", f.Header.Type)
			return
		}
		g, err := wire.DecodeGroupSubscribe(f.Body)
		if err != nil {
			t.Errorf("decode group subscribe: %v", err)
			return
		}
		p := &groupPeer{t: t, st: st, join: g, joinID: f.Header.RequestID,
			acks: make(chan groupAckFrame, 1024), ended: make(chan error, 1)}
		if asg, werr := join(g); werr != nil {
			p.write(wire.AppendError(nil, p.joinID, werr))
			_ = st.Close()
		} else {
			p.write(wire.AppendGroupAssignment(nil, p.joinID, asg))
		}
		peers <- p
		for {
			f, err := wire.ReadFrame(st, wire.DefaultMaxFrameBytes)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				p.ended <- err
				return
			}
			if f.Header.Type != wire.TypeGroupStreamAck {
				t.Errorf("%v frame on a group stream", f.Header.Type)
				continue
			}
			a, err := wire.DecodeGroupStreamAck(f.Body)
			if err != nil {
				t.Errorf("decode group stream ack: %v", err)
				continue
			}
			p.acks <- groupAckFrame{id: f.Header.RequestID, ack: a}
		}
	}
	return peers
}

func (p *groupPeer) write(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.st.Write(b)
}

// push pushes records with cursor.
func (p *groupPeer) push(cursor string, recs ...wire.GroupRecord) {
	p.write(wire.AppendGroupRecords(nil, 0, wire.GroupRecords{Cursor: []byte(cursor), Records: recs}))
}

// answer answers request id with an assignment.
func (p *groupPeer) answer(id uint64, a wire.GroupAssignment) {
	p.write(wire.AppendGroupAssignment(nil, id, a))
}

// refuse answers request id with an error of code.
func (p *groupPeer) refuse(id uint64, code wire.Code) {
	p.write(wire.AppendError(nil, id, wire.Errorf(code, "scripted")))
}

// end ends the member with an error of code (request id 0).
func (p *groupPeer) end(code wire.Code) {
	p.write(wire.AppendError(nil, 0, wire.Errorf(code, "scripted")))
}

// nextAck returns the next GroupStreamAck the client sent.
func (p *groupPeer) nextAck() groupAckFrame {
	p.t.Helper()
	select {
	case a := <-p.acks:
		return a
	case <-time.After(10 * time.Second):
		p.t.Fatal("no group stream ack")
		return groupAckFrame{}
	}
}

// waitClosed waits until the client closed its side of the stream cleanly.
func (p *groupPeer) waitClosed() {
	p.t.Helper()
	select {
	case err := <-p.ended:
		if err != nil {
			p.t.Fatalf("group stream ended with %v, want a clean close by the client", err)
		}
	case <-time.After(10 * time.Second):
		p.t.Fatal("the client did not close the group stream")
	}
}

// assigned is a node's answer to a join or an ack.
func assigned(gen uint64, inFlight uint32, shards ...uint32) wire.GroupAssignment {
	return wire.GroupAssignment{Member: "m1", Generation: gen, Shards: shards, Window: 100, MaxPerPush: 50,
		SessionMillis: 30000, InFlight: inFlight}
}

// nextDelivery returns the next delivery, failing unless its cursor is
// cursor.
func nextDelivery(t *testing.T, gs *GroupMember, cursor string) Delivery {
	t.Helper()
	d, err := gs.Next(testCtx(t))
	if err != nil {
		t.Fatalf("Next (want cursor %s): %v", cursor, err)
	}
	if string(d.Cursor) != cursor {
		t.Fatalf("delivery cursor %q, want %q", d.Cursor, cursor)
	}
	return d
}

// TestGroupSubscribe: a member joins, gets pushes, acks them (the answer
// refreshes its assignment); a refused ack leaves the stream going; the
// node's error with request id 0 ends the member, failing a pending ack.
func TestGroupSubscribe(t *testing.T) {
	srv := newTestServer(t)
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		if g != (wire.GroupSubscribe{Name: orders, Group: "live", Member: "m1", Window: 100, MaxPerPush: 50}) {
			t.Errorf("group subscribe = %+v", g)
		}
		return assigned(3, 0, 0, 2), nil
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	gs, err := c.Group(orders, "live").Subscribe(ctx, WithWindow(100), WithMaxPerPush(50), WithMember("m1"), WithHeartbeat(-1))
	if err != nil {
		t.Fatal(err)
	}
	p := <-peers
	a := gs.Assignment()
	if a.Member != "m1" || a.Generation != 3 || fmt.Sprint(a.Shards) != "[0 2]" || a.Window != 100 || a.MaxPerPush != 50 ||
		a.Session != 30*time.Second || a.InFlight != 0 {
		t.Fatalf("assignment = %+v", a)
	}
	a.Shards[0] = 9
	if gs.Assignment().Shards[0] != 0 {
		t.Fatal("Assignment shares its shards with the caller")
	}

	p.push("c1", groupRec(0, 5, 1), groupRec(0, 6, 2))
	p.push("c2", groupRec(2, 1, 1))
	d1 := nextDelivery(t, gs, "c1")
	if len(d1.Records) != 2 {
		t.Fatalf("%d records, want 2", len(d1.Records))
	}
	checkGroupRecord(t, d1.Records[0], 0, 5, 1)
	checkGroupRecord(t, d1.Records[1], 0, 6, 2)
	d2 := nextDelivery(t, gs, "c2")
	checkGroupRecord(t, d2.Records[0], 2, 1, 1)

	// The ack returns credit and commits; its answer is the new assignment.
	done := goCall(func() error { return gs.Ack(ctx, d1) })
	f := p.nextAck()
	if string(f.ack.Cursor) != "c1" || f.ack.Count != 2 || f.id == 0 || f.id == p.joinID {
		t.Fatalf("ack %d = %+v", f.id, f.ack)
	}
	ans := assigned(4, 1, 2)
	ans.SessionMillis = 0 // an ack's answer may leave the session out
	p.answer(f.id, ans)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a := gs.Assignment(); a.Generation != 4 || fmt.Sprint(a.Shards) != "[2]" || a.InFlight != 1 || a.Session != 30*time.Second {
		t.Fatalf("assignment after the ack = %+v", a)
	}

	// A stale cursor is refused; the stream goes on.
	done = goCall(func() error { return gs.Ack(ctx, d2) })
	f = p.nextAck()
	p.refuse(f.id, wire.CodeStaleCursor)
	if err := <-done; !errors.Is(err, ErrStaleCursor) {
		t.Fatalf("stale ack: %v, want ErrStaleCursor", err)
	}
	p.push("c3", groupRec(2, 2, 1))
	d3 := nextDelivery(t, gs, "c3")

	// The node ends the member: the pending ack and Next fail with its
	// error, and the client closes its side.
	done = goCall(func() error { return gs.Ack(ctx, d3) })
	p.nextAck()
	p.end(wire.CodeSessionExpired)
	if err := <-done; !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("pending ack: %v, want ErrSessionExpired", err)
	}
	for range 2 {
		if _, err := gs.Next(ctx); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("Next: %v, want ErrSessionExpired", err)
		}
	}
	if err := gs.Ack(ctx, d3); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ack after the end: %v, want ErrSessionExpired", err)
	}
	p.waitClosed()

	if err := gs.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.Next(ctx); !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := gs.Ack(ctx, d3); !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Ack after Close: %v", err)
	}
}

// TestGroupAcksPipelined: acks in flight together each get their own
// answer, whatever order the node answers in.
func TestGroupAcksPipelined(t *testing.T) {
	srv := newTestServer(t)
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		if g.Member != "" || g.Window != DefaultGroupWindow || g.MaxPerPush != 0 {
			t.Errorf("group subscribe = %+v, want the defaults", g)
		}
		a := assigned(1, 0, 0)
		a.Member = "node-named"
		return a, nil
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	gs, err := c.Group(orders, "live").Subscribe(ctx, WithHeartbeat(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	p := <-peers
	if gs.Assignment().Member != "node-named" {
		t.Fatalf("member %q, want the node's name", gs.Assignment().Member)
	}
	p.push("c1", groupRec(0, 1, 1))
	p.push("c2", groupRec(0, 2, 1))
	d1 := nextDelivery(t, gs, "c1")
	d2 := nextDelivery(t, gs, "c2")

	done1 := goCall(func() error { return gs.Ack(ctx, d1) })
	done2 := goCall(func() error { return gs.Ack(ctx, d2) })
	byCursor := map[string]groupAckFrame{}
	for range 2 {
		f := p.nextAck()
		byCursor[string(f.ack.Cursor)] = f
	}
	if byCursor["c1"].id == byCursor["c2"].id {
		t.Fatalf("both acks have request id %d", byCursor["c1"].id)
	}
	p.refuse(byCursor["c2"].id, wire.CodeInvalidCursor)
	if err := <-done2; !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("second ack: %v, want ErrInvalidCursor", err)
	}
	select {
	case err := <-done1:
		t.Fatalf("the first ack returned (%v) before its answer", err)
	default:
	}
	p.answer(byCursor["c1"].id, assigned(2, 0, 0))
	if err := <-done1; err != nil {
		t.Fatalf("first ack: %v", err)
	}

	// An explicit heartbeat; bad acks fail before anything is sent.
	done := goCall(func() error { return gs.Heartbeat(ctx) })
	f := p.nextAck()
	if len(f.ack.Cursor) != 0 || f.ack.Count != 0 {
		t.Fatalf("heartbeat = %+v", f.ack)
	}
	p.answer(f.id, assigned(5, 0, 0))
	if err := <-done; err != nil || gs.Assignment().Generation != 5 {
		t.Fatalf("heartbeat: %v, generation %d", err, gs.Assignment().Generation)
	}
	for _, bad := range []Delivery{
		{Records: d1.Records},
		{},
		{Cursor: Cursor(bytes.Repeat([]byte("c"), wire.MaxCursorBytes+1)), Records: d1.Records[:1]},
	} {
		if err := gs.Ack(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Ack(%d-byte cursor, %d records): %v, want ErrInvalidRequest", len(bad.Cursor), len(bad.Records), err)
		}
	}
	select {
	case f := <-p.acks:
		t.Fatalf("a bad ack was sent: %+v", f.ack)
	default:
	}
}

// TestGroupSubscribeRefused: the node's error answering the join is
// Subscribe's error, and the client closes the stream.
func TestGroupSubscribeRefused(t *testing.T) {
	srv := newTestServer(t)
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		return wire.GroupAssignment{}, wire.Errorf(wire.CodeStreamNotDurable, "orders is ephemeral")
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	gs, err := c.Group(orders, "live").Subscribe(ctx)
	if !errors.Is(err, ErrStreamNotDurable) || gs != nil {
		t.Fatalf("Subscribe: %v, want ErrStreamNotDurable", err)
	}
	(<-peers).waitClosed()

	for _, bad := range [][]GroupSubscribeOption{
		{WithWindow(-1)},
		{WithWindow(0)},
		{WithMaxPerPush(-1)},
		{WithMember("no spaces")},
	} {
		if _, err := c.Group(orders, "live").Subscribe(ctx, bad...); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Subscribe with a bad option: %v, want ErrInvalidRequest", err)
		}
	}
	if _, err := c.Group(orders, "").Subscribe(ctx); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Subscribe of an empty group: %v", err)
	}
}

// TestGroupMemberClose: Close ends a waiting Next and closes the
// stream (the node's signal to remove the member); the client's Close ends
// its group subscriptions too.
func TestGroupMemberClose(t *testing.T) {
	srv := newTestServer(t)
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		return assigned(1, 0, 0), nil
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	gs, err := c.Group(orders, "live").Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := <-peers
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := gs.Next(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with an ended context: %v", err)
	}
	next := goCall(func() error { _, err := gs.Next(ctx); return err })
	if err := gs.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-next; !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Next during Close: %v, want ErrSubscriptionClosed", err)
	}
	p.waitClosed()
	_ = gs.Close()

	gs2, err := c.Group(orders, "live").Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-peers
	next = goCall(func() error { _, err := gs2.Next(ctx); return err })
	ack := goCall(func() error { return gs2.Heartbeat(ctx) })
	_ = c.Close()
	if err := <-next; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next during the client's Close: %v, want ErrClosed", err)
	}
	if err := <-ack; !errors.Is(err, ErrClosed) {
		t.Fatalf("Ack during the client's Close: %v, want ErrClosed", err)
	}
	if _, err := gs2.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after the client's Close: %v, want ErrClosed", err)
	}
	_ = gs2.Close()
	if _, err := c.Group(orders, "live").Subscribe(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
}

// TestGroupHeartbeat: with a fake clock, the member heartbeats once it has
// sent nothing for its interval, and an ack puts the next heartbeat off.
func TestGroupHeartbeat(t *testing.T) {
	srv := newTestServer(t)
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		return assigned(1, 0, 0), nil
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	clk := newFakeClock()
	t0 := clk.Now()
	withClock := func(o *groupSubscribeOptions) { o.clock = clk }

	gs, err := c.Group(orders, "live").Subscribe(ctx, WithHeartbeat(10*time.Second), withClock)
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	p := <-peers
	// The join was the last frame sent: the first heartbeat is due 10 s on.
	if due := clk.nextTimer(t); !due.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("first heartbeat due at +%v, want +10s", due.Sub(t0))
	}
	clk.Advance(10 * time.Second)
	f := p.nextAck()
	if len(f.ack.Cursor) != 0 || f.ack.Count != 0 {
		t.Fatalf("heartbeat = %+v", f.ack)
	}
	p.answer(f.id, assigned(2, 0, 0))
	if due := clk.nextTimer(t); !due.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("second heartbeat due at +%v, want +20s", due.Sub(t0))
	}

	// An ack at +15 s: at +20 s nothing is sent, and the heartbeat is put
	// off to +25 s.
	clk.Advance(5 * time.Second)
	p.push("c1", groupRec(0, 1, 1))
	d := nextDelivery(t, gs, "c1")
	done := goCall(func() error { return gs.Ack(ctx, d) })
	f = p.nextAck()
	if string(f.ack.Cursor) != "c1" {
		t.Fatalf("ack = %+v", f.ack)
	}
	p.answer(f.id, assigned(2, 0, 0))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if due := clk.nextTimer(t); !due.Equal(t0.Add(25 * time.Second)) {
		t.Fatalf("after the ack, heartbeat due at +%v, want +25s", due.Sub(t0))
	}
	clk.Advance(5 * time.Second)
	f = p.nextAck()
	if len(f.ack.Cursor) != 0 || f.ack.Count != 0 {
		t.Fatalf("heartbeat = %+v", f.ack)
	}
	p.answer(f.id, assigned(3, 0, 0))
	if due := clk.nextTimer(t); !due.Equal(t0.Add(35 * time.Second)) {
		t.Fatalf("third heartbeat due at +%v, want +35s", due.Sub(t0))
	}
}

// TestGroupHeartbeatDefault: without Heartbeat, the member heartbeats every
// third of the session timeout the node granted (here 60 ms, on the real
// clock).
func TestGroupHeartbeatDefault(t *testing.T) {
	srv := newTestServer(t)
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		a := assigned(1, 0, 0)
		a.SessionMillis = 60
		return a, nil
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	gs, err := c.Group(orders, "live").Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := <-peers
	for range 3 {
		f := p.nextAck()
		if len(f.ack.Cursor) != 0 || f.ack.Count != 0 {
			t.Fatalf("heartbeat = %+v", f.ack)
		}
		p.answer(f.id, assigned(1, 0, 0))
	}
	_ = gs.Close()
	p.waitClosed()
}

// fakeClock is a clock that moves only when the test advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// started receives the due time of every timer started.
	started chan time.Time
}

type fakeTimer struct {
	due time.Time
	ch  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_700_000_000, 0), started: make(chan time.Time, 64)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{due: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		tm.ch <- c.now
	} else {
		c.timers = append(c.timers, tm)
	}
	c.started <- tm.due
	return tm.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.timers {
			if x == tm {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Advance moves the clock on by d and fires the timers due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.due.After(c.now) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.now
	}
	c.timers = kept
}

// nextTimer returns the due time of the next timer started.
func (c *fakeClock) nextTimer(t *testing.T) time.Time {
	t.Helper()
	select {
	case due := <-c.started:
		return due
	case <-time.After(10 * time.Second):
		t.Fatal("no timer started")
		return time.Time{}
	}
}

// TestGroupStreamEndedByNode: however the node ends a group stream, Next
// returns a typed error and the client closes its side.
func TestGroupStreamEndedByNode(t *testing.T) {
	tests := []struct {
		name string
		end  func(p *groupPeer)
		want error
	}{
		{"error frame", func(p *groupPeer) { p.end(wire.CodeShuttingDown) }, ErrShuttingDown},
		{"reset", func(p *groupPeer) {
			p.st.CancelWrite(quic.StreamErrorCode(wire.CodeSubscriptionAborted))
		}, ErrSubscriptionAborted},
		{"clean close", func(p *groupPeer) { _ = p.st.Close() }, ErrSubscriptionAborted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestServer(t)
			peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
				return assigned(1, 0, 0), nil
			})
			srv.start()
			// Without reconnecting: reconnecting, a member whose stream
			// the node ends with shutting_down (it is draining) rejoins
			// on the next connection (TestReconnectGroupMemberRejoins).
			c := srv.dial(t, WithoutReconnect())
			ctx := testCtx(t)
			gs, err := c.Group(orders, "live").Subscribe(ctx, WithHeartbeat(-1))
			if err != nil {
				t.Fatal(err)
			}
			defer gs.Close()
			p := <-peers
			tc.end(p)
			if _, err := gs.Next(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Next: %v, want %v", err, tc.want)
			}
			if err := gs.Heartbeat(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Ack: %v, want %v", err, tc.want)
			}
			p.waitClosed()
			// The connection is fine.
			if _, err := c.Group(orders, "live").Subscribe(ctx, WithHeartbeat(-1)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// joinAndDeliverOne starts srv, whose group streams are scripted by the
// groupNode that made peers, and joins member m1 (no heartbeats, no
// reconnecting); the node pushes it one delivery, cursor "c1". It returns
// the member, the node's side of its stream and the test's context.
func joinAndDeliverOne(t *testing.T, srv *testServer, peers chan *groupPeer) (*GroupMember, *groupPeer, context.Context) {
	t.Helper()
	srv.start()
	c := srv.dial(t, WithoutReconnect())
	ctx := testCtx(t)
	gs, err := c.Group(orders, "live").Subscribe(ctx, WithHeartbeat(-1), WithMember("m1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gs.Close() })
	p := <-peers
	p.push("c1", groupRec(0, 1, 1))
	return gs, p, ctx
}

// TestGroupMemberJoinsAgainWhenItsCoordinatorMoves: a member whose stream
// the node ends with not_leader (a cluster's coordinator moved) joins
// again on the same connection, as the same member, and keeps trying while
// its joins are refused with not_leader (no coordinator known yet); a
// delivery from before fails its ack with ErrStaleCursor, and Next goes on
// with the new membership's.
func TestGroupMemberJoinsAgainWhenItsCoordinatorMoves(t *testing.T) {
	srv := newTestServer(t)
	var joins atomic.Int32
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		if n := joins.Add(1); n == 2 || n == 3 {
			return wire.GroupAssignment{}, wire.Errorf(wire.CodeNotLeader, "no coordinator known yet")
		}
		return assigned(uint64(joins.Load()), 0, 0), nil
	})
	gs, p, ctx := joinAndDeliverOne(t, srv, peers)
	old := nextDelivery(t, gs, "c1")
	p.end(wire.CodeNotLeader)
	var last *groupPeer
	for last == nil {
		select {
		case q := <-peers: // joins 2 and 3 refused, 4 accepted
			if joins.Load() == 4 {
				last = q
			}
		case <-ctx.Done():
			t.Fatalf("the member joined %d times, never a fourth", joins.Load())
		}
	}
	if last.join.Member != "m1" {
		t.Fatalf("joined again as %q, want m1", last.join.Member)
	}
	if err := gs.Ack(ctx, old); !errors.Is(err, ErrStaleCursor) {
		t.Fatalf("ack of a delivery from before the move: %v, want ErrStaleCursor", err)
	}
	last.push("c2", groupRec(0, 2, 1))
	checkGroupRecord(t, nextDelivery(t, gs, "c2").Records[0], 0, 2, 1)
}

// TestGroupMemberRejoinsWhenTheNodeStopsReadingFirst: a node relaying a
// member to a coordinator that moved sends not_leader and stops reading the
// stream. An ack or heartbeat written once the node stopped reading fails
// with an unknown outcome, and the member still joins again when the
// not_leader arrives: it used to end on the failed write, whichever came
// first (a flaky TestReplicatedGroupSurvivesItsCoordinator).
func TestGroupMemberRejoinsWhenTheNodeStopsReadingFirst(t *testing.T) {
	srv := newTestServer(t)
	var joins atomic.Int32
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		return assigned(uint64(joins.Add(1)), 0, 0), nil
	})
	gs, p, ctx := joinAndDeliverOne(t, srv, peers)
	nextDelivery(t, gs, "c1")
	p.st.CancelRead(0) // STOP_SENDING, before the not_leader
	select {
	case <-p.ended:
	case <-ctx.Done():
		t.Fatal("the node's read of the stream did not end")
	}
	// A heartbeat written before the STOP_SENDING arrived waits for an
	// answer that never comes; one written after it fails at once.
	for {
		hctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := gs.Heartbeat(hctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("heartbeat on a stream the node stopped reading: %v, want ErrOutcomeUnknown", err)
		}
		break
	}
	p.end(wire.CodeNotLeader)
	_ = p.st.Close()
	var q *groupPeer
	select {
	case q = <-peers:
	case <-ctx.Done():
		t.Fatal("the member did not join again")
	}
	if q.join.Member != "m1" {
		t.Fatalf("joined again as %q, want m1", q.join.Member)
	}
	q.push("c2", groupRec(0, 2, 1))
	checkGroupRecord(t, nextDelivery(t, gs, "c2").Records[0], 0, 2, 1)
}
