package supervisors

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/net/wire"
)

// limitHits reads herald_limit_hits_total for one limit.
func limitHits(t *testing.T, n *Node, key string) float64 {
	t.Helper()
	return scrapeSeries(t, n)[`herald_limit_hits_total{limit="`+key+`"}`]
}

// max_connections: connections that never finish their handshake do not
// take its places; one authenticated connection more is refused as
// overloaded at its handshake, counted, and the node serves the others;
// once one closes, a new one gets in.
func TestLimitMaxConnections(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.MaxConnections = 2 })
	tlsConf, err := transport.ClientTLSConfig(transport.ClientTLSOptions{CAFile: n.CAFile(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	// A QUIC connection that never sends a Hello: it is not among the two
	// (the listener's own bound, twice max_connections, is not reached).
	for range 1 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := quic.DialAddr(ctx, n.Addr(), tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.CloseWithError(0, "done") })
	}
	waitFor(t, "the mute connection to be accepted", func() bool { return n.Metric("herald_connections") == 1 })
	a := dialClient(t, n)
	b := dialClient(t, n)
	if err := dialErr(n); !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("third connection: %v, want overloaded", err)
	}
	if got := limitHits(t, n, "max_connections"); got != 1 {
		t.Errorf("max_connections hits = %v, want 1", got)
	}
	ctx := context.Background()
	s := client.StreamName{Tenant: "t", Namespace: "n", Stream: "s"}
	if _, err := a.CreateStream(ctx, s, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	waitFor(t, "the closed connection to go", func() bool { return n.Metric("herald_connections") == 2 })
	if err := dialErr(n); err != nil {
		t.Fatalf("after one closed: %v", err)
	}
}

// max_subscriptions_per_connection: subscriptions and group push members
// share the bound; one more is refused as overloaded on its own stream,
// the connection's other subscriptions and other connections go on.
func TestLimitMaxSubscriptionsPerConnection(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.MaxSubscriptionsPerConnection = 2 })
	ctx := context.Background()
	c := dialClient(t, n)
	s := client.StreamName{Tenant: "t", Namespace: "n", Stream: "s"}
	if _, err := c.CreateStream(ctx, s, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	sub1, err := c.Subscribe(ctx, s, client.WithShard(0), client.WithStartOffset(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Group(s, "g").Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, s, client.WithShard(0)); !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("third subscription: %v, want overloaded", err)
	}
	if _, err := c.Group(s, "g2").Subscribe(ctx); !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("third, a group member: %v, want overloaded", err)
	}
	if got := limitHits(t, n, "max_subscriptions_per_connection"); got != 2 {
		t.Errorf("hits = %v, want 2", got)
	}
	// The first subscription still gets records; another connection may
	// subscribe.
	if _, err := c.PublishBatch(ctx, s, [][]byte{[]byte("r")}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if ev, err := sub1.Next(rctx); err != nil || string(ev.Payload) != "r" {
		t.Fatalf("first subscription: %+v, %v", ev, err)
	}
	if _, err := dialClient(t, n).Subscribe(ctx, s, client.WithShard(0)); err != nil {
		t.Fatalf("another connection: %v", err)
	}
	// Closing one frees its place.
	if err := sub1.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a place to free", func() bool {
		sub, err := c.Subscribe(ctx, s, client.WithShard(0))
		if err == nil {
			_ = sub.Close()
		}
		return err == nil
	})
}

// max_streams_per_tenant: a create beyond it is refused as quota_exceeded
// (not retryable: waiting does not make room),
// auto-create by publish too; other tenants are not affected; deleting a
// stream makes room.
func TestLimitMaxStreamsPerTenant(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.MaxStreamsPerTenant = 2 })
	ctx := context.Background()
	c := dialClient(t, n)
	name := func(tenant, stream string) client.StreamName {
		return client.StreamName{Tenant: tenant, Namespace: "n", Stream: stream}
	}
	for _, s := range []string{"a", "b"} {
		if _, err := c.CreateStream(ctx, name("acme", s), client.StreamConfig{Shards: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateStream(ctx, name("acme", "c"), client.StreamConfig{Shards: 1}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("third stream: %v, want quota exceeded", err)
	}
	if _, err := c.PublishBatch(ctx, name("acme", "auto"), [][]byte{[]byte("x")}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("auto-create beyond the limit: %v, want quota exceeded", err)
	}
	if _, err := c.CreateStream(ctx, name("globex", "a"), client.StreamConfig{Shards: 1}); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if got := limitHits(t, n, "max_streams_per_tenant"); got != 2 {
		t.Errorf("hits = %v, want 2", got)
	}
	if err := c.DeleteStream(ctx, name("acme", "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateStream(ctx, name("acme", "c"), client.StreamConfig{Shards: 1}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

// A client that connects and never speaks (no control stream, or a control
// stream without a Hello, or a data stream without a first frame) is cut
// off after handshake_timeout, counted, and costs the node nothing after.
func TestSilentClientsTimedOut(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.HandshakeTimeout = 300 * time.Millisecond })
	tlsConf, err := transport.ClientTLSConfig(transport.ClientTLSOptions{CAFile: n.CAFile(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	dial := func() *quic.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := quic.DialAddr(ctx, n.Addr(), tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.CloseWithError(0, "done") })
		return conn
	}
	// No control stream at all.
	mute := dial()
	// A control stream that never sends its Hello (a stream is only seen by
	// the node once something is written on it: a partial header).
	halfHello := dial()
	s, err := halfHello.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte{0, 0}); err != nil {
		t.Fatal(err)
	}
	for name, conn := range map[string]*quic.Conn{"no control stream": mute, "no hello": halfHello} {
		select {
		case <-conn.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: connection not closed", name)
		}
		var appErr *quic.ApplicationError
		if err := context.Cause(conn.Context()); !errors.As(err, &appErr) || wire.Code(appErr.ErrorCode) != wire.CodeProtocolViolation {
			t.Errorf("%s: closed with %v, want protocol_violation", name, err)
		}
	}
	// A data stream that never sends its first frame is reset; the
	// connection stays.
	r := dialRaw(t, n)
	ds := r.stream()
	if _, err := ds.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	_ = ds.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := ds.Read(make([]byte, 1)); err == nil {
		t.Fatal("silent data stream not reset")
	}
	if r.conn.Context().Err() != nil {
		t.Fatal("the connection was closed with its silent stream")
	}
	if got := limitHits(t, n, "handshake_timeout"); got != 3 {
		t.Errorf("handshake_timeout hits = %v, want 3", got)
	}
	waitFor(t, "the silent connections to go", func() bool { return n.Metric("herald_connections") == 1 })
}

// A flood of streams: a client may have at most max_streams_per_connection
// open; opening more waits for QUIC stream credit (the node grants none),
// so the node's goroutines stay bounded, and once the client closes some,
// it may open more.
func TestStreamFloodBounded(t *testing.T) {
	const max = 20
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
		c.MaxStreamsPerConnection = max
		c.MaxSubscriptionsPerConnection = 0 // the streams alone bound them
	})
	r := dialRaw(t, n) // its control stream is one of the max
	before := runtime.NumGoroutine()
	var open []*quic.Stream
	for range max - 1 {
		s, err := r.conn.OpenStream()
		if err != nil {
			t.Fatalf("stream %d: %v", len(open), err)
		}
		// Each says nothing after a partial header: the node holds it
		// until handshake_timeout.
		if _, err := s.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	if _, err := r.conn.OpenStream(); err == nil {
		t.Fatal("opened a stream beyond max_streams_per_connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.conn.OpenStreamSync(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("OpenStreamSync beyond the bound: %v, want to wait", err)
	}
	if grown := runtime.NumGoroutine() - before; grown > 2*max+10 {
		t.Errorf("%d goroutines for %d streams", grown, max)
	}
	// Closing them returns the credit.
	for _, s := range open {
		s.CancelWrite(0)
		s.CancelRead(0)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	s, err := r.conn.OpenStreamSync(ctx2)
	if err != nil {
		t.Fatalf("after closing the flood: %v", err)
	}
	s.CancelWrite(0)
	// The connection still answers.
	r.write(r.control, wire.AppendListStreams(nil, 9, wire.ListStreams{Tenant: "t"}))
	if f := r.read(r.control); f.Header.Type != wire.TypeStreamList {
		t.Fatalf("after the flood: %s", f.Header.Type)
	}
}

// idle_timeout: a client connection that falls silent (no keep-alives) is
// closed by the node after the idle timeout, and counted; a client that
// keeps its connection alive is not.
func TestIdleConnectionClosed(t *testing.T) {
	// The shortest idle_timeout: the client's keep-alives go every half of
	// it (TestIdleTimeoutFloor shows why shorter ones are refused).
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.IdleTimeout = MinIdleTimeout })
	live := dialClient(t, n) // the client sends keep-alives
	silent := dialRaw(t, n)  // a raw connection without keep-alives
	select {
	case <-silent.conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the silent connection was not closed")
	}
	var idle *quic.IdleTimeoutError
	if err := context.Cause(silent.conn.Context()); !errors.As(err, &idle) {
		t.Fatalf("silent connection closed with %v, want an idle timeout", err)
	}
	waitFor(t, "the idle close to be counted", func() bool {
		got := limitHits(t, n, "idle_timeout")
		if got > 1 {
			t.Fatalf("idle_timeout hits = %v: the live client timed out too", got)
		}
		return got == 1
	})
	if _, err := live.ListStreams(context.Background(), "", ""); err != nil {
		t.Fatalf("the live client after the idle timeout: %v", err)
	}
}

// idle_timeout below 5 s is refused: quic-go clients would pace their
// keep-alives by 5 s and be closed while alive.
func TestIdleTimeoutFloor(t *testing.T) {
	cfg := DefaultConfig()
	cfg.IdleTimeout = 2 * time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "idle_timeout") {
		t.Fatalf("idle_timeout 2s: %v", err)
	}
	cfg.IdleTimeout = MinIdleTimeout
	if err := cfg.Validate(); err != nil {
		t.Fatalf("idle_timeout %s: %v", MinIdleTimeout, err)
	}
}

// group_max_per_stream: a poll that would create one group too many on a
// stream is refused with quota_exceeded and counted; the stream's groups go
// on, other streams are not affected, and the bound holds across a restart
// (the node reads a stream's groups from storage).
func TestLimitGroupsPerStream(t *testing.T) {
	dir := t.TempDir()
	limit := func(c *Config, _ *Options) { c.GroupMaxPerStream = 2 }
	n := testNode(t, dir, limit)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n)
	jobs := client.StreamName{Tenant: "t", Namespace: "n", Stream: "jobs"}
	other := client.StreamName{Tenant: "t", Namespace: "n", Stream: "other"}
	for _, s := range []client.StreamName{jobs, other} {
		if _, err := c.CreateStream(ctx, s, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
			t.Fatal(err)
		}
	}
	poll := func(c *client.Client, s client.StreamName, group string) error {
		_, err := c.Group(s, group).Poll(ctx, 0, 1, 0)
		return err
	}
	for _, g := range []string{"g1", "g2", "g1"} {
		if err := poll(c, jobs, g); err != nil {
			t.Fatalf("poll %s: %v", g, err)
		}
	}
	if err := poll(c, jobs, "g3"); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("third group: %v, want quota_exceeded", err)
	}
	if got := limitHits(t, n, "group_max_per_stream"); got != 1 {
		t.Errorf("group_max_per_stream hits = %v, want 1", got)
	}
	if err := poll(c, other, "g3"); err != nil {
		t.Fatalf("a group on another stream: %v", err)
	}

	_ = c.Close()
	shut, cancelShut := context.WithTimeout(ctx, 10*time.Second)
	_ = n.Shutdown(shut)
	cancelShut()
	n2 := testNode(t, dir, limit)
	c2 := dialClient(t, n2)
	if err := poll(c2, jobs, "g3"); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("third group after a restart: %v, want quota_exceeded", err)
	}
	for _, g := range []string{"g2", "g1"} {
		if err := poll(c2, jobs, g); err != nil {
			t.Fatalf("poll %s after a restart: %v", g, err)
		}
	}
	// Deleting the stream frees its groups.
	if err := c2.DeleteStream(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.CreateStream(ctx, jobs, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if err := poll(c2, jobs, "g3"); err != nil {
		t.Fatalf("a group on the re-created stream: %v", err)
	}
}

// handshake_timeout bounds how long a new data stream may go without
// sending, not how long its first frame takes: a first publish that keeps
// arriving for longer than the timeout (a large batch on a slow or busy
// link) is read and answered, while one that stalls midway is reset.
func TestSlowFirstFrameNotTimedOut(t *testing.T) {
	const timeout = time.Second
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.HandshakeTimeout = timeout })
	r := dialRaw(t, n)
	payload := bytes.Repeat([]byte("s"), 64<<10)
	block, count := records(string(payload))
	frame := wire.AppendPublish(nil, 1, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block})

	// 40 parts 50 ms apart: 2 s in all, twice the timeout, each gap a
	// twentieth of it.
	pub := r.stream()
	part := len(frame)/40 + 1
	for off := 0; off < len(frame); off += part {
		r.write(pub, frame[off:min(off+part, len(frame))])
		time.Sleep(50 * time.Millisecond)
	}
	if f := r.read(pub); f.Header.Type != wire.TypePublishAck {
		t.Fatalf("a first publish sent over twice the handshake timeout: %s %s, want its ack", f.Header.Type, errFrame(f))
	}

	// Half a frame, then silence: reset once the timeout passes.
	stalled := r.stream()
	r.write(stalled, frame[:len(frame)/2])
	_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := stalled.Read(make([]byte, 1)); err == nil {
		t.Fatal("a data stream that stalled in its first frame was not reset")
	}
	if r.conn.Context().Err() != nil {
		t.Fatal("the connection was closed with its stalled stream")
	}
}

// With the default limits a client that subscribes past
// max_subscriptions_per_connection on one connection is refused with
// overloaded: the refusal comes on the subscription's own stream, so the
// QUIC streams the node grants must outnumber the subscriptions it allows
// by the control stream, the publish streams and that one more. (They were
// both 1000: the 999th subscription waited for a stream until its context
// ended, and the documented refusal could never come.)
func TestDefaultLimitsRefuseASubscriptionTooMany(t *testing.T) {
	n := testNode(t, t.TempDir())
	maxSubs := DefaultConfig().MaxSubscriptionsPerConnection
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dialClient(t, n)
	s := client.StreamName{Tenant: "t", Namespace: "n", Stream: "s"}
	if _, err := c.CreateStream(ctx, s, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	// Publish streams are open too (the Go client keeps up to four).
	if _, err := c.PublishBatch(ctx, s, [][]byte{[]byte("r")}); err != nil {
		t.Fatal(err)
	}
	for i := range maxSubs {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Subscribe(sctx, s, client.WithShard(0))
		scancel()
		if err != nil {
			t.Fatalf("subscription %d of %d: %v", i+1, maxSubs, err)
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if _, err := c.Subscribe(sctx, s, client.WithShard(0)); !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("subscription %d: %v, want overloaded", maxSubs+1, err)
	}
}

// max_streams_per_connection must leave StreamsBeyondSubscriptions streams
// beyond max_subscriptions_per_connection, or the refusal of a subscription
// too many could not be answered; 0 subscriptions means no such bound.
func TestStreamsBeyondSubscriptions(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.MaxSubscriptionsPerConnection = 100
	cfg.MaxStreamsPerConnection = 100 + StreamsBeyondSubscriptions - 1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "max_streams_per_connection") {
		t.Fatalf("%d streams for %d subscriptions: %v", cfg.MaxStreamsPerConnection, cfg.MaxSubscriptionsPerConnection, err)
	}
	cfg.MaxStreamsPerConnection++
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%d streams for %d subscriptions: %v", cfg.MaxStreamsPerConnection, cfg.MaxSubscriptionsPerConnection, err)
	}
	cfg.MaxSubscriptionsPerConnection, cfg.MaxStreamsPerConnection = 0, 1
	if err := cfg.Validate(); err != nil {
		t.Fatalf("no subscription bound, one stream: %v", err)
	}
}

// A Subscribe (or a group member's) that waits for a QUIC stream, the
// connection having every stream the node allows open, and gives up when
// its context ends says why: its error matches client.ErrNoStreamCredit
// and the context's error. Once a subscription closes, its stream is free
// again. (Reachable with max_subscriptions_per_connection 0, or with many
// publish streams.)
func TestSubscribeWaitingForAStreamSaysSo(t *testing.T) {
	const streams = 4 // the control stream and three subscriptions
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
		c.MaxStreamsPerConnection = streams
		c.MaxSubscriptionsPerConnection = 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialClient(t, n)
	s := client.StreamName{Tenant: "t", Namespace: "n", Stream: "s"}
	if _, err := c.CreateStream(ctx, s, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	var subs []*client.Subscription
	for range streams - 1 {
		sub, err := c.Subscribe(ctx, s, client.WithShard(0))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := c.Subscribe(short, s, client.WithShard(0))
	scancel()
	if !errors.Is(err, client.ErrNoStreamCredit) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a subscription beyond the streams: %v, want ErrNoStreamCredit and the deadline", err)
	}
	short, scancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Group(s, "g").Subscribe(short)
	scancel()
	if !errors.Is(err, client.ErrNoStreamCredit) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a group member beyond the streams: %v, want ErrNoStreamCredit and the deadline", err)
	}
	if err := subs[0].Close(); err != nil {
		t.Fatal(err)
	}
	// With a stream free, a refusal is the node's, and nothing else.
	if _, err := c.Subscribe(ctx, s, client.WithShard(5)); !errors.Is(err, client.ErrInvalidShard) || errors.Is(err, client.ErrNoStreamCredit) {
		t.Fatalf("a subscription to a shard the stream lacks: %v, want invalid_shard", err)
	}
	sub, err := c.Subscribe(ctx, s, client.WithShard(0))
	if err != nil {
		t.Fatalf("after closing one: %v", err)
	}
	// The subscriptions still deliver (published on another connection:
	// this one has no stream left for publishing).
	if _, err := dialClient(t, n).PublishBatch(ctx, s, [][]byte{[]byte("r")}); err != nil {
		t.Fatal(err)
	}
	for _, sub := range append(subs[1:], sub) {
		if ev, err := sub.Next(ctx); err != nil || string(ev.Payload) != "r" {
			t.Fatalf("next: %+v, %v", ev, err)
		}
	}
}
