package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// The reconnecting client against the scripted node: the node drops the
// connection (as a restart does) and the client must come back and resume.

// eventLog collects a client's connection events.
type eventLog struct {
	ch chan ConnectionEvent
}

// newEventLog returns a log and the option that feeds it.
func newEventLog() (*eventLog, Option) {
	l := &eventLog{ch: make(chan ConnectionEvent, 64)}
	return l, WithConnectionEvents(func(ev ConnectionEvent) { l.ch <- ev })
}

// next returns the next event, failing unless it is of kind.
func (l *eventLog) next(t *testing.T, kind ConnectionEventKind) ConnectionEvent {
	t.Helper()
	select {
	case ev := <-l.ch:
		if ev.Kind != kind {
			t.Fatalf("event %v (%v), want %v", ev.Kind, ev.Err, kind)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatalf("no %v event", kind)
		return ConnectionEvent{}
	}
}

// nextConn returns the next connection the scripted node accepted.
func nextConn(t *testing.T, srv *testServer) *serverConn {
	t.Helper()
	select {
	case sc := <-srv.conns:
		return sc
	case <-time.After(20 * time.Second):
		t.Fatal("the client did not connect")
		return nil
	}
}

// drop closes the node's side of sc, as a node that restarts does.
func drop(sc *serverConn) { _ = sc.conn.CloseWithError(0, "restarting") }

// deadAddr returns a UDP address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// helloGate holds the scripted node's answers to Hello while closed, so
// that a test can act while the client is still reconnecting.
type helloGate struct {
	mu   sync.Mutex
	open chan struct{}
	// held counts Hellos waiting.
	held atomic.Int32
}

func newHelloGate(srv *testServer) *helloGate {
	g := &helloGate{open: make(chan struct{})}
	close(g.open)
	srv.onHello = func(wire.Hello) *wire.Error {
		g.mu.Lock()
		ch := g.open
		g.mu.Unlock()
		g.held.Add(1)
		defer g.held.Add(-1)
		<-ch
		return nil
	}
	return g
}

func (g *helloGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *helloGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// TestDialNoNode: a Dial to an address where nothing listens fails within
// the dial timeout (2 s by default), naming the address and saying no node
// answered.
func TestDialNoNode(t *testing.T) {
	addr := deadAddr(t)
	start := time.Now()
	c, err := Dial(context.Background(), addr, WithInsecure())
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("Dial to nothing succeeded")
	}
	t.Logf("Dial %s failed after %v: %v", addr, took.Round(time.Millisecond), err)
	if !errors.Is(err, ErrNoNodeAnswered) {
		t.Fatalf("Dial: %v, want ErrNoNodeAnswered", err)
	}
	var de *DialError
	if !errors.As(err, &de) || de.Addr != addr || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "no node answered") {
		t.Fatalf("Dial: %v, want a *DialError naming %s", err, addr)
	}
	if took > 5*time.Second {
		t.Fatalf("Dial took %v, want about the 2 s dial timeout", took)
	}
}

// TestDialTriesSeedsInTurn: addresses where no node answers are passed
// over, and every one is named when none answers.
func TestDialTriesSeedsInTurn(t *testing.T) {
	srv := newTestServer(t)
	srv.start()
	dead1, dead2 := deadAddr(t), deadAddr(t)
	c, err := Dial(testCtx(t), dead1, WithSeeds(srv.addr), WithTLSConfig(srv.clientTLS), WithDialTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatalf("Dial with a live second seed: %v", err)
	}
	defer c.Close()
	if c.Addr() != srv.addr {
		t.Fatalf("connected to %s, want %s", c.Addr(), srv.addr)
	}

	_, err = Dial(testCtx(t), dead1+","+dead2, WithInsecure(), WithDialTimeout(300*time.Millisecond))
	if !errors.Is(err, ErrNoNodeAnswered) || !strings.Contains(err.Error(), dead1) || !strings.Contains(err.Error(), dead2) {
		t.Fatalf("Dial to two dead seeds: %v, want both named", err)
	}
	if _, err := Dial(testCtx(t), " , "); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Dial to no address: %v", err)
	}
}

// TestReconnectControlCalls: when the node drops the connection the client
// says so, calls made while it reconnects wait and are sent on the new
// connection, and it says when it is back.
func TestReconnectControlCalls(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 2, Durable: true})
	gate := newHelloGate(srv)
	srv.start()
	events, opt := newEventLog()
	c := srv.dial(t, opt)
	first := nextConn(t, srv)
	ctx := testCtx(t)

	gate.shut()
	drop(first)
	ev := events.next(t, ConnectionDisconnected)
	if ev.Addr != srv.addr || ev.NodeID != "test-node" || ev.Err == nil {
		t.Fatalf("disconnected event %+v", ev)
	}
	waitFor(t, "the client to reconnect", func() bool { return gate.held.Load() == 1 })
	// The client is reconnecting: a call waits for the new connection.
	res := make(chan error, 1)
	go func() {
		_, err := c.DescribeStream(ctx, orders)
		res <- err
	}()
	select {
	case err := <-res:
		t.Fatalf("DescribeStream returned while disconnected: %v", err)
	case <-time.After(100 * time.Millisecond): // a call that waits: nothing must happen
	}
	gate.release()
	nextConn(t, srv)
	if err := <-res; err != nil {
		t.Fatalf("DescribeStream across the reconnect: %v", err)
	}
	ev = events.next(t, ConnectionReconnected)
	if ev.Addr != srv.addr || ev.Attempts < 1 || ev.Downtime <= 0 {
		t.Fatalf("reconnected event %+v", ev)
	}
	if srv.describeCount(orders) != 1 {
		t.Fatalf("%d describes reached the node, want 1", srv.describeCount(orders))
	}
	c.Close()
	if ev := events.next(t, ConnectionClosed); ev.Err != nil {
		t.Fatalf("closed event %+v", ev)
	}
}

// TestReconnectPendingControlCalls: a read-only call sent and unanswered
// when the connection is lost is sent again; a change fails in doubt.
func TestReconnectPendingControlCalls(t *testing.T) {
	srv := newTestServer(t)
	var seen atomic.Int32
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		if seen.Add(1) <= 2 {
			return // the first connection answers nothing
		}
		srv.defaultControl(sc, f)
	}
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	srv.start()
	c := srv.dial(t)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	describe, create := make(chan error, 1), make(chan error, 1)
	go func() { _, err := c.DescribeStream(ctx, orders); describe <- err }()
	go func() {
		_, err := c.CreateStream(ctx, StreamName{Tenant: "acme", Namespace: "shop", Stream: "new"}, StreamConfig{Durable: true})
		create <- err
	}()
	waitFor(t, "both calls to reach the node", func() bool { return seen.Load() == 2 })
	drop(first)
	nextConn(t, srv)
	if err := <-describe; err != nil {
		t.Fatalf("DescribeStream sent again: %v", err)
	}
	if err := <-create; !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("CreateStream unanswered at the loss: %v, want ErrOutcomeUnknown", err)
	}
}

// TestReconnectSubscriptionResumes: a subscription resumes each shard one
// past the last record it received, so Next sees every offset once, in
// order.
func TestReconnectSubscriptionResumes(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	var attempts atomic.Int32
	asked := make(chan wire.Subscribe, 4)
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		asked <- s
		return wire.Subscribed{Offset: s.Offset, QueueCapacity: 8}, nil
	}, func(st *quic.Stream) {
		if attempts.Add(1) == 1 {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{0, 3}, recs(0, 3), recs(3, 2)))
			<-st.Context().Done()
			return
		}
		// The resumed shard: the node's batch 4..6 starts before the
		// resume offset.
		_, _ = st.Write(eventBatchAt(0, 1, []uint64{4}, recs(4, 3)))
		<-st.Context().Done()
	})
	srv.start()
	c := srv.dial(t)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if s := <-asked; s.Start != wire.StartEarliest {
		t.Fatalf("first subscribe %+v", s)
	}
	for want := uint64(0); want < 2; want++ {
		if ev, err := sub.Next(ctx); err != nil || ev.Offset != want {
			t.Fatalf("Next = %d, %v; want %d", ev.Offset, err, want)
		}
	}
	drop(first)
	nextConn(t, srv)
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 5 || s.Shard != 0 {
		t.Fatalf("resumed subscribe %+v, want offset 5", s)
	}
	for want := uint64(2); want < 7; want++ {
		ev, err := sub.Next(ctx)
		if err != nil || ev.Offset != want || string(ev.Payload) != "p"+string(rune('0'+want)) {
			t.Fatalf("Next = %d %q, %v; want %d", ev.Offset, ev.Payload, err, want)
		}
	}
}

// TestReconnectSubscriptionGap: when the node no longer has the resume
// offset (an ephemeral shard whose node restarted empty), the subscription
// resumes where the node is and Next reports the gap, then goes on.
func TestReconnectSubscriptionGap(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1})
	var attempts atomic.Int32
	asked := make(chan wire.Subscribe, 4)
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		asked <- s
		if attempts.Load() == 1 && s.Offset == 3 {
			return wire.Subscribed{}, &wire.Error{Code: wire.CodeOffsetOutOfRange, Message: "past the tail", Detail: 0}
		}
		return wire.Subscribed{Offset: s.Offset}, nil
	}, func(st *quic.Stream) {
		if attempts.Add(1) == 1 {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{0}, recs(0, 3)))
		} else {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{0}, recs(0, 2)))
		}
		<-st.Context().Done()
	})
	srv.start()
	c := srv.dial(t)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders, WithShard(0))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	<-asked
	if ev, err := sub.Next(ctx); err != nil || ev.Offset != 0 {
		t.Fatalf("Next = %d, %v", ev.Offset, err)
	}
	drop(first)
	nextConn(t, srv)
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 3 {
		t.Fatalf("resumed subscribe %+v, want offset 3", s)
	}
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 0 {
		t.Fatalf("subscribe after the refusal %+v, want offset 0", s)
	}
	var got []string
	for len(got) < 5 {
		ev, err := sub.Next(ctx)
		var gap *GapError
		switch {
		case errors.As(err, &gap):
			if gap.Shard != 0 || gap.From != 3 || gap.To != 0 || !gap.Reset() {
				t.Fatalf("gap %+v", gap)
			}
			got = append(got, "gap")
		case err != nil:
			t.Fatalf("Next: %v", err)
		default:
			got = append(got, string(ev.Payload))
		}
	}
	if strings.Join(got, " ") != "p1 p2 gap p0 p1" {
		t.Fatalf("delivered %v", got)
	}
}

// TestReconnectGroupMemberRejoins: a member the node named rejoins under
// that name; an Ack of a delivery from before fails with ErrStaleCursor
// without reaching the node; deliveries of the new membership are acked as
// usual.
func TestReconnectGroupMemberRejoins(t *testing.T) {
	srv := newTestServer(t)
	joins := make(chan wire.GroupSubscribe, 4)
	peers := groupNode(t, srv, func(g wire.GroupSubscribe) (wire.GroupAssignment, *wire.Error) {
		joins <- g
		a := assigned(uint64(len(joins)), 0, 0)
		a.Member = "anon-7"
		return a, nil
	})
	srv.start()
	c := srv.dial(t)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	gs, err := c.Group(orders, "live").Subscribe(ctx, WithHeartbeat(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	if g := <-joins; g.Member != "" {
		t.Fatalf("first join as %q", g.Member)
	}
	p := <-peers
	p.push("c1", groupRec(0, 4, 1))
	old := nextDelivery(t, gs, "c1")

	drop(first)
	nextConn(t, srv)
	if g := <-joins; g.Member != "anon-7" || g.Group != "live" {
		t.Fatalf("rejoin %+v, want member anon-7", g)
	}
	p = <-peers
	if err := gs.Ack(ctx, old); !errors.Is(err, ErrStaleCursor) {
		t.Fatalf("Ack of a delivery from before the rejoin: %v, want ErrStaleCursor", err)
	}
	p.push("c2", groupRec(0, 4, 1))
	d := nextDelivery(t, gs, "c2")
	res := make(chan error, 1)
	go func() { res <- gs.Ack(ctx, d) }()
	a := p.nextAck()
	if string(a.ack.Cursor) != "c2" {
		t.Fatalf("the first ack the node got names %q, want c2 (the stale one must not be sent)", a.ack.Cursor)
	}
	p.answer(a.id, assigned(2, 0, 0))
	if err := <-res; err != nil {
		t.Fatalf("Ack after the rejoin: %v", err)
	}
	if m := gs.Assignment().Member; m != "m1" {
		t.Fatalf("assignment member %q after the ack's answer", m)
	}
}

// TestReconnectPublishes: at a lost connection a plain publish in flight
// fails in doubt; an idempotent one is sent again and the node's dedup
// answers with the original offsets; one made while the client reconnects
// is sent on the new connection.
func TestReconnectPublishes(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	n := newLogNode(t, srv)
	gate := newHelloGate(srv)
	srv.start()
	c := srv.dial(t)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	p := c.NewProducer(orders, 9)

	// The node writes the idempotent batch but its ack is lost; the plain
	// publish after it is never answered either.
	n.mu.Lock()
	n.mu.dropAck = true
	n.mu.Unlock()
	idem := make(chan error, 1)
	var idemAck PublishAck
	go func() {
		var err error
		idemAck, err = p.Publish(ctx, [][]byte{[]byte("i1")})
		idem <- err
	}()
	waitFor(t, "the node to write the idempotent batch", func() bool { n.mu.Lock(); defer n.mu.Unlock(); return len(n.mu.frames) == 1 })
	n.mu.Lock()
	n.mu.dropAck = true
	n.mu.Unlock()
	plain, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("x1")})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plain publish to be written", func() bool { n.mu.Lock(); defer n.mu.Unlock(); return len(n.mu.frames) == 2 })

	gate.shut()
	drop(first)
	if _, err := plain.Wait(ctx); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("plain publish in flight at the loss: %v, want ErrOutcomeUnknown", err)
	}
	waitFor(t, "the client to reconnect", func() bool { return gate.held.Load() == 1 })
	queued, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("q1")})
	if err != nil {
		t.Fatalf("publish while reconnecting: %v", err)
	}
	gate.release()
	nextConn(t, srv)
	if err := <-idem; err != nil {
		t.Fatalf("idempotent publish across the loss: %v", err)
	}
	if !idemAck.Duplicate || idemAck.Offset != 0 {
		t.Fatalf("idempotent ack %+v, want the original offset 0, duplicate", idemAck)
	}
	ack, err := queued.Wait(ctx)
	if err != nil {
		t.Fatalf("publish made while reconnecting: %v", err)
	}
	if ack.Offset != 2 {
		t.Fatalf("queued publish at offset %d, want 2 (after i1 and x1)", ack.Offset)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var seqs []uint64
	for _, f := range n.mu.frames {
		if f.Idempotent {
			seqs = append(seqs, f.Sequence)
		}
	}
	if len(n.mu.frames) != 4 || len(seqs) != 2 || seqs[0] != 1 || seqs[1] != 1 {
		t.Fatalf("node got %d publishes, idempotent sequences %v; want 4 with sequence 1 twice", len(n.mu.frames), seqs)
	}
	if used, waiting := c.s.budget.state(); used != 0 || waiting != 0 {
		t.Fatalf("budget holds %d bytes, %d waiting", used, waiting)
	}
}

// TestReconnectResendsDrainRefusedPublish: a publish the node refuses with
// shutting_down was not applied: the client takes the node for draining,
// closes the connection once its answers are in, and sends the publish
// again on the next connection.
func TestReconnectResendsDrainRefusedPublish(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	srv.start()
	events, opt := newEventLog()
	c := srv.dial(t, opt)
	nextConn(t, srv)
	ctx := testCtx(t)
	res := make(chan error, 1)
	var ack PublishAck
	go func() {
		var err error
		ack, err = c.Publish(ctx, orders, []byte("x"))
		res <- err
	}()
	f := recv(t, frames)
	_, _ = f.st.Write(wire.AppendError(nil, f.h.RequestID, wire.Errorf(wire.CodeShuttingDown, "draining")))
	if ev := events.next(t, ConnectionDisconnected); !errors.Is(ev.Err, ErrShuttingDown) {
		t.Fatalf("disconnected with %v, want ErrShuttingDown", ev.Err)
	}
	nextConn(t, srv)
	f = recv(t, frames)
	if string(f.records(t)[0].Payload) != "x" {
		t.Fatalf("resent %+v", f.p)
	}
	f.ack(t, 0, 41)
	if err := <-res; err != nil || ack.Offset != 41 {
		t.Fatalf("publish = %+v, %v", ack, err)
	}
}

// TestReconnectAfterGoAway: after GoAway the client drains and reconnects,
// and calls made after the GoAway go to the next connection instead of
// failing with ErrShuttingDown.
func TestReconnectAfterGoAway(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	srv.start()
	events, opt := newEventLog()
	c := srv.dial(t, opt)
	first := nextConn(t, srv)
	first.writeCtl(wire.AppendGoAway(nil, "maintenance"))
	if ev := events.next(t, ConnectionDisconnected); !errors.Is(ev.Err, ErrShuttingDown) {
		t.Fatalf("disconnected with %v", ev.Err)
	}
	<-first.conn.Context().Done() // the client closed the drained connection
	nextConn(t, srv)
	if _, err := c.DescribeStream(testCtx(t), orders); err != nil {
		t.Fatalf("DescribeStream after GoAway: %v", err)
	}
	events.next(t, ConnectionReconnected)
}

// TestReconnectGivesUp: once the attempts run out the client is done: the
// application hears why, and every call, subscription and publish fails
// with a *ReconnectError.
func TestReconnectGivesUp(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		return wire.Subscribed{}, nil
	}, func(st *quic.Stream) { <-st.Context().Done() })
	srv.start()
	events, opt := newEventLog()
	c := srv.dial(t, opt, WithDialTimeout(200*time.Millisecond),
		WithReconnect(Reconnect{MaxAttempts: 3, InitialDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}))
	nextConn(t, srv)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	srv.stop() // the node is gone for good
	events.next(t, ConnectionDisconnected)
	ev := events.next(t, ConnectionClosed)
	var re *ReconnectError
	if !errors.As(ev.Err, &re) || re.Attempts != 3 || !errors.Is(ev.Err, ErrNoNodeAnswered) {
		t.Fatalf("closed with %v, want a *ReconnectError after 3 attempts of no answer", ev.Err)
	}
	if _, err := sub.Next(ctx); !errors.As(err, &re) {
		t.Fatalf("Next after giving up: %v", err)
	}
	if _, err := c.Publish(ctx, orders, []byte("x")); !errors.As(err, &re) {
		t.Fatalf("Publish after giving up: %v", err)
	}
	if _, err := c.DescribeStream(ctx, orders); !errors.As(err, &re) {
		t.Fatalf("DescribeStream after giving up: %v", err)
	}
}

// TestCloseWhileReconnecting: Close during a reconnect that would go on for
// minutes returns promptly, and what waited fails with ErrClosed.
func TestCloseWhileReconnecting(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	srv.start()
	events, opt := newEventLog()
	c := srv.dial(t, opt)
	nextConn(t, srv)
	srv.stop()
	events.next(t, ConnectionDisconnected)
	ctx := testCtx(t)
	res := make(chan error, 2)
	go func() { _, err := c.DescribeStream(ctx, orders); res <- err }()
	go func() { _, err := c.Publish(ctx, orders, []byte("x")); res <- err }()
	start := time.Now()
	c.Close()
	took := time.Since(start)
	t.Logf("Close while reconnecting took %v", took)
	if took > 3*time.Second {
		t.Fatalf("Close took %v while reconnecting", took)
	}
	for range 2 {
		if err := <-res; !errors.Is(err, ErrClosed) {
			t.Fatalf("call waiting for the reconnect: %v, want ErrClosed", err)
		}
	}
	if ev := events.next(t, ConnectionClosed); ev.Err != nil {
		t.Fatalf("closed event %+v", ev)
	}
}

// TestWithoutReconnect: the connection is lost for good; calls fail with
// its error and the application hears ConnectionClosed after
// ConnectionDisconnected.
func TestWithoutReconnect(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	srv.start()
	events, opt := newEventLog()
	c := srv.dial(t, opt, WithoutReconnect())
	drop(nextConn(t, srv))
	events.next(t, ConnectionDisconnected)
	if ev := events.next(t, ConnectionClosed); ev.Err == nil {
		t.Fatal("closed event without the loss")
	}
	if _, err := c.DescribeStream(testCtx(t), orders); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("DescribeStream after the loss: %v", err)
	}
	select {
	case <-srv.conns:
		t.Fatal("the client reconnected WithoutReconnect")
	default:
	}
}

// udpRelay forwards UDP datagrams between clients and a node, one upstream
// socket per client address, and can black-hole them both ways: a node that
// dies, or a network that stops carrying packets, without anyone closing
// anything.
type udpRelay struct {
	t    *testing.T
	pc   net.PacketConn
	node *net.UDPAddr
	// blocked drops every datagram while set.
	blocked atomic.Bool
	mu      sync.Mutex
	// ups maps a client's address to its upstream socket.
	ups map[string]*net.UDPConn
	wg  sync.WaitGroup
}

func newUDPRelay(t *testing.T, node string) *udpRelay {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	na, err := net.ResolveUDPAddr("udp", node)
	if err != nil {
		t.Fatal(err)
	}
	r := &udpRelay{t: t, pc: pc, node: na, ups: map[string]*net.UDPConn{}}
	r.wg.Add(1)
	go r.run()
	t.Cleanup(r.close)
	return r
}

func (r *udpRelay) addr() string { return r.pc.LocalAddr().String() }

// run forwards client datagrams upstream until the relay closes.
func (r *udpRelay) run() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if r.blocked.Load() {
			continue
		}
		r.mu.Lock()
		up, ok := r.ups[from.String()]
		if !ok {
			up, err = net.DialUDP("udp", nil, r.node)
			if err != nil {
				r.mu.Unlock()
				continue
			}
			r.ups[from.String()] = up
			r.wg.Add(1)
			go r.back(up, from)
		}
		r.mu.Unlock()
		_, _ = up.Write(buf[:n])
	}
}

// back forwards the node's datagrams on up to the client at to.
func (r *udpRelay) back(up *net.UDPConn, to net.Addr) {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if err != nil {
			return
		}
		if !r.blocked.Load() {
			_, _ = r.pc.WriteTo(buf[:n], to)
		}
	}
}

func (r *udpRelay) close() {
	_ = r.pc.Close()
	r.mu.Lock()
	for _, up := range r.ups {
		_ = up.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// TestDeadNodeNoticed: a node that stops answering under a live connection
// (it died, or the network dropped it) is noticed within about the idle
// timeout (5 s), not the node's 30; once packets flow again the client
// reconnects and its subscription resumes with no gap and no duplicate.
func TestDeadNodeNoticed(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	var attempts atomic.Int32
	asked := make(chan wire.Subscribe, 4)
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		asked <- s
		return wire.Subscribed{Offset: s.Offset}, nil
	}, func(st *quic.Stream) {
		if attempts.Add(1) == 1 {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{0}, recs(0, 2)))
		} else {
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{2}, recs(2, 2)))
		}
		<-st.Context().Done()
	})
	srv.start()
	relay := newUDPRelay(t, srv.addr)
	events, opt := newEventLog()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c, err := Dial(ctx, relay.addr(), WithTLSConfig(srv.clientTLS), WithLogger(testLogger()), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nextConn(t, srv)
	sub, err := c.Subscribe(ctx, orders, WithShard(0))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	<-asked
	for want := uint64(0); want < 2; want++ {
		if ev, err := sub.Next(ctx); err != nil || ev.Offset != want {
			t.Fatalf("Next = %d, %v", ev.Offset, err)
		}
	}

	relay.blocked.Store(true)
	died := time.Now()
	ev := events.next(t, ConnectionDisconnected)
	noticed := time.Since(died)
	t.Logf("a silent node was noticed after %v: %v", noticed.Round(time.Millisecond), ev.Err)
	var it *quic.IdleTimeoutError
	if !errors.As(ev.Err, &it) {
		t.Fatalf("disconnected with %v, want an idle timeout", ev.Err)
	}
	if noticed > 7*time.Second {
		t.Fatalf("a silent node was noticed after %v, want about 5 s", noticed)
	}
	relay.blocked.Store(false)
	events.next(t, ConnectionReconnected)
	nextConn(t, srv)
	if s := <-asked; s.Start != wire.StartOffset || s.Offset != 2 {
		t.Fatalf("resumed subscribe %+v", s)
	}
	for want := uint64(2); want < 4; want++ {
		if ev, err := sub.Next(ctx); err != nil || ev.Offset != want {
			t.Fatalf("Next = %d, %v; want %d", ev.Offset, err, want)
		}
	}
}
