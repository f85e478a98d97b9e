package supervisors

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// panicOnce returns props that panic once, inside the actor's own message
// handling, when armed and a message of type typeName arrives.
func panicOnce(armed *atomic.Bool, typeName string) func(*actor.Props) *actor.Props {
	return func(p *actor.Props) *actor.Props {
		return p.Configure(actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
			return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
				if fmt.Sprintf("%T", env.Message) == typeName && armed.CompareAndSwap(true, false) {
					panic("injected failure")
				}
				next(c, env)
			}
		}))
	}
}

// subscribeRaw opens a subscription stream and waits for Subscribed.
func (r *rawConn) subscribeRaw(name wire.StreamName, start wire.StartKind) *quic.Stream {
	r.t.Helper()
	s := r.stream()
	r.write(s, wire.AppendSubscribe(nil, 99, wire.Subscribe{Name: name, Start: start}))
	if f := r.read(s); f.Header.Type != wire.TypeSubscribed {
		r.t.Fatalf("want subscribed, got %s", f.Header.Type)
	}
	return s
}

// nextBatch reads the next event batch's first offset, or the stream error.
func nextBatch(s *quic.Stream) (uint64, error) {
	f, err := wire.ReadFrame(s, 1<<20)
	if err != nil {
		return 0, err
	}
	if f.Header.Type != wire.TypeEventBatch {
		return 0, fmt.Errorf("got %s", f.Header.Type)
	}
	v, err := wire.DecodeEventBatch(f.Body)
	if err != nil {
		return 0, err
	}
	return v[0].Base, nil
}

func (r *rawConn) publishAcked(s *quic.Stream, id uint64, payload string) uint64 {
	r.t.Helper()
	block, count := records(payload)
	r.write(s, wire.AppendPublish(nil, id, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	f := r.read(s)
	ack, err := wire.DecodePublishAck(f.Body)
	if f.Header.Type != wire.TypePublishAck || err != nil {
		r.t.Fatalf("publish %d: %s %v", id, f.Header.Type, err)
	}
	return ack.Offset
}

// A panic in one subscription actor ends that subscription only: the
// others, the shard and the node carry on.
func TestSubscriptionPanicIsIsolated(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.SubscriptionProps = panicOnce(&armed, "*actors.SectionsPushed")
	})
	a, b := dialRaw(t, n), dialRaw(t, n)
	pub := a.stream()
	a.publishAcked(pub, 1, "one")
	subs := []*quic.Stream{a.subscribeRaw(orders, wire.StartEarliest), a.subscribeRaw(orders, wire.StartEarliest), b.subscribeRaw(orders, wire.StartEarliest)}
	for i, s := range subs {
		if off, err := nextBatch(s); err != nil || off != 0 {
			t.Fatalf("sub %d first batch: %d %v", i, off, err)
		}
	}
	armed.Store(true)
	a.publishAcked(pub, 2, "two")
	if off := a.publishAcked(pub, 3, "three"); off != 2 {
		t.Fatalf("shard disturbed: third publish at %d", off)
	}
	aborted := 0
	for i, s := range subs {
		off, err := nextBatch(s)
		var serr *quic.StreamError
		switch {
		case errors.As(err, &serr):
			if wire.Code(serr.ErrorCode) != wire.CodeSubscriptionAborted {
				t.Fatalf("sub %d reset with %d", i, serr.ErrorCode)
			}
			aborted++
		case err != nil:
			t.Fatalf("sub %d: %v", i, err)
		default:
			if off != 1 {
				t.Fatalf("sub %d got offset %d, want 1", i, off)
			}
			if off, err := nextBatch(s); err != nil || off != 2 {
				t.Fatalf("sub %d after the panic: %d %v", i, off, err)
			}
		}
	}
	if aborted != 1 {
		t.Fatalf("%d subscriptions ended, want exactly the one that panicked", aborted)
	}
	if !n.Ready() {
		t.Fatal("node not ready after a subscription panic")
	}
}

// A panic in one connection actor closes that connection only.
func TestConnectionPanicIsIsolated(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.ConnectionProps = panicOnce(&armed, "*actors.openSubscription")
	})
	good := dialRaw(t, n)
	pub := good.stream()
	good.publishAcked(pub, 1, "one")
	sub := good.subscribeRaw(orders, wire.StartEarliest)
	if off, err := nextBatch(sub); err != nil || off != 0 {
		t.Fatalf("first batch: %d %v", off, err)
	}

	armed.Store(true)
	bad := dialRaw(t, n)
	s := bad.stream()
	bad.write(s, wire.AppendSubscribe(nil, 5, wire.Subscribe{Name: orders, Start: wire.StartEarliest}))
	<-bad.conn.Context().Done() // the failed connection actor closed its QUIC connection

	good.publishAcked(pub, 2, "two")
	if off, err := nextBatch(sub); err != nil || off != 1 {
		t.Fatalf("good subscription after the panic: %d %v", off, err)
	}
	if !n.Ready() {
		t.Fatal("node not ready after a connection panic")
	}
}

// A shard that fails restarts, recovers its tail through the storage writer
// (after every append queued before it), and its subscriptions register
// again: they continue with no gap and no duplicate. The failure here hits
// the commit notification of a batch that storage did write: its publisher
// hears "outcome unknown", and the record is there.
func TestShardRestartKeepsSubscriptionsAndOffsets(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.ShardProps = panicOnce(&armed, "*actors.AppendsCommitted")
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "restart"}
	for i := range 10 {
		if _, err := c.Publish(ctx, name, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	next := func(want uint64) {
		t.Helper()
		ev, err := sub.Next(ctx)
		if err != nil || ev.Offset != want || string(ev.Payload) != fmt.Sprint(want) {
			t.Fatalf("want offset %d, got %d %q %v", want, ev.Offset, ev.Payload, err)
		}
	}
	for i := range uint64(10) {
		next(i)
	}
	armed.Store(true)
	_, err = c.Publish(ctx, name, []byte("10"))
	if !errors.Is(err, &wire.Error{Code: wire.CodeInternal}) {
		t.Fatalf("publish whose commit notice was lost: %v, want internal (outcome unknown)", err)
	}
	for i := 11; i < 20; i++ {
		ack, err := c.Publish(ctx, name, []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Offset != uint64(i) {
			t.Fatalf("after restart publish %d landed at %d", i, ack.Offset)
		}
	}
	for i := uint64(10); i < 20; i++ {
		next(i)
	}
}

// A panic while a shard handles a publish answers that publish (outcome
// unknown) instead of leaving it to hang; the shard restarts and goes on.
func TestShardPanicOnPublishAnswersIt(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.ShardProps = panicOnce(&armed, "*actors.PublishRequest")
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "p"}
	if _, err := c.Publish(ctx, name, []byte("0")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if _, err := c.Publish(ctx, name, []byte("lost")); !errors.Is(err, &wire.Error{Code: wire.CodeInternal}) {
		t.Fatalf("publish whose handling panicked: %v", err)
	}
	ack, err := c.Publish(ctx, name, []byte("1"))
	if err != nil || ack.Offset != 1 {
		t.Fatalf("after the restart: %+v %v", ack, err)
	}
}

// A catalog that fails restarts, reloads the streams and serves again.
func TestCatalogRestart(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.CatalogProps = panicOnce(&armed, "*actors.ListStreamsRequest")
		o.RequestTimeout = time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "c"}
	if _, err := c.Publish(ctx, name, []byte("0")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if _, err := c.ListStreams(ctx, "default", ""); err == nil {
		t.Fatal("the list whose handling panicked succeeded")
	}
	list, err := c.ListStreams(ctx, "default", "")
	if err != nil || len(list) != 1 || list[0].Tails[0] != 1 {
		t.Fatalf("after the catalog restart: %+v %v", list, err)
	}
	if ack, err := c.Publish(ctx, name, []byte("1")); err != nil || ack.Offset != 1 {
		t.Fatalf("publish after the catalog restart: %+v %v", ack, err)
	}
}

// A storage writer that fails mid-group answers the group as failed: no
// publish is acknowledged unless its record is stored, and the node turns
// not ready.
func TestStorageWriterFailureNeverAcksUnwrittenRecords(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.WriterProps = panicOnce(&armed, "*actors.commitNow")
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "w"}
	if _, err := c.Publish(ctx, name, []byte("0")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	acked := map[uint64]string{0: "0"}
	for i := 1; i < 20; i++ {
		ack, err := c.Publish(ctx, name, []byte(fmt.Sprint(i)))
		if err == nil {
			acked[ack.Offset] = fmt.Sprint(i)
		} else if !errors.Is(err, &wire.Error{Code: wire.CodeStorageFailure}) {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if n.Ready() {
		t.Fatal("the node is ready after its storage writer failed")
	}
	info, err := c.DescribeStream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.Read(ctx, name, 0, 0, client.ReadToTail)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[uint64]string{}
	for _, ev := range page.Records {
		stored[ev.Offset] = string(ev.Payload)
	}
	for off, p := range acked {
		if stored[off] != p {
			t.Fatalf("offset %d acknowledged as %q, stored %q (tail %d)", off, p, stored[off], info.Tails[0])
		}
	}
}

// A client speaking another protocol version is told so, with a typed code.
func TestUnsupportedVersionIsAnswered(t *testing.T) {
	n := testNode(t, t.TempDir())
	tlsConf, err := transport.ClientTLSConfig(transport.ClientTLSOptions{CAFile: n.CAFile(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, n.Addr(), tlsConf, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	control, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.Write(wire.AppendHello(nil, 1, wire.Hello{Version: 99, MaxFrameBytes: 1 << 20})); err != nil {
		t.Fatal(err)
	}
	// The node writes an Error frame and closes the connection with the same
	// code; the close may overtake the frame, so either is the answer.
	f, err := wire.ReadFrame(control, 1<<20)
	var appErr *quic.ApplicationError
	if errors.As(err, &appErr) {
		if wire.Code(appErr.ErrorCode) != wire.CodeUnsupportedVersion {
			t.Fatalf("closed with %d", appErr.ErrorCode)
		}
		return
	}
	if err != nil {
		t.Fatalf("no answer to a wrong version: %v", err)
	}
	e, err := wire.DecodeError(f.Body)
	if f.Header.Type != wire.TypeError || err != nil || e.Code != wire.CodeUnsupportedVersion || e.Detail != uint64(wire.Version) {
		t.Fatalf("answer %s %v %v", f.Header.Type, e, err)
	}
}

// A storage writer that fails with publishes queued behind its commit
// leaves no hole: the failure sticks across its restart, so nothing is
// written above the lost group, and after a node restart the log is
// contiguous and holds every acknowledged record.
func TestStorageWriterFailureLeavesNoHole(t *testing.T) {
	dir := t.TempDir()
	var armed atomic.Bool
	n := testNode(t, dir, func(_ *Config, o *Options) {
		o.WriterProps = panicOnce(&armed, "*actors.commitNow")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "hole"}
	for i := range 50 {
		if _, err := c.Publish(ctx, name, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	futures := make([]*client.PublishFuture, 400)
	for i := range futures {
		f, err := c.PublishAsync(ctx, name, [][]byte{[]byte(fmt.Sprint(50 + i))})
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = f
	}
	acked := map[uint64]string{}
	for i, f := range futures {
		if ack, err := f.Wait(ctx); err == nil {
			acked[ack.Offset] = fmt.Sprint(50 + i)
		}
	}
	_ = c.Close()
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	_ = n.Shutdown(sctx)
	scancel()

	n2 := testNode(t, dir)
	c2 := dialClient(t, n2)
	info, err := c2.DescribeStream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for start := uint64(0); start < info.Tails[0]; {
		page, err := c2.Read(ctx, name, 0, start, client.ReadToTail)
		if err != nil {
			t.Fatalf("read from %d of %d: %v", start, info.Tails[0], err)
		}
		for _, ev := range page.Records {
			if p, ok := acked[ev.Offset]; ok && p != string(ev.Payload) {
				t.Fatalf("offset %d acknowledged as %q, holds %q", ev.Offset, p, ev.Payload)
			}
			delete(acked, ev.Offset)
		}
		start = page.Next
	}
	for off := range acked {
		if off >= 50 {
			t.Fatalf("acknowledged offset %d is not stored", off)
		}
	}
}

// panickyLog panics in Commit once armed.
type panickyLog struct {
	storage.Log
	armed *atomic.Bool
}

func (l panickyLog) Commit(a []storage.Append, m []storage.MetaPut) error {
	if l.armed.CompareAndSwap(true, false) {
		panic("injected storage panic")
	}
	return l.Log.Commit(a, m)
}

// A panic inside the shard's handling of an admitted publish (here, the
// ephemeral log's Commit) answers that publish as outcome-unknown, and the
// shard serves the connection's next publishes.
func TestShardPanicAfterAdmissionAnswersThePublish(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.WrapMemoryLog = func(l storage.Log) storage.Log { return panickyLog{Log: l, armed: &armed} }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "eph"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if _, err := c.Publish(ctx, name, []byte("lost")); !errors.Is(err, &wire.Error{Code: wire.CodeInternal}) {
		t.Fatalf("publish whose commit panicked: %v", err)
	}
	for i := range 3 {
		if _, err := c.Publish(ctx, name, []byte("after")); err != nil {
			t.Fatalf("publish %d after the restart: %v", i, err)
		}
	}
}
