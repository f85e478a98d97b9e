package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// pubFrame is a Publish frame the scripted node received.
type pubFrame struct {
	st *quic.Stream
	h  wire.Header
	p  wire.Publish
	// size is the frame's size on the wire.
	size int
}

// ack answers the frame with a PublishAck.
func (f pubFrame) ack(t *testing.T, shard uint32, offset uint64) {
	t.Helper()
	if _, err := f.st.Write(wire.AppendPublishAck(nil, f.h.RequestID, wire.PublishAck{Shard: shard, Offset: offset, Count: f.p.Count})); err != nil {
		t.Errorf("write ack: %v", err)
	}
}

// records decodes the frame's records.
func (f pubFrame) records(t *testing.T) []wire.Record {
	t.Helper()
	var out []wire.Record
	it := wire.NewRecordIter(f.p.Records)
	for {
		var r wire.Record
		if !it.Next(&r) {
			break
		}
		out = append(out, r)
	}
	if it.Err() != nil || len(out) != int(f.p.Count) {
		t.Fatalf("records block: %d records (count %d), %v", len(out), f.p.Count, it.Err())
	}
	return out
}

// publishNode scripts the node to hand every Publish frame to the test;
// orders exists with one shard.
func publishNode(t *testing.T, srv *testServer) chan pubFrame {
	srv.addStream(orders, wire.StreamConfig{Shards: 1, Durable: true})
	frames := make(chan pubFrame, 1024)
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		for {
			if f.Header.Type != wire.TypePublish {
				t.Errorf("%v frame on a publish stream", f.Header.Type)
				return
			}
			p, err := wire.DecodePublish(f.Body)
			if err != nil {
				t.Errorf("decode publish: %v", err)
				return
			}
			frames <- pubFrame{st: st, h: f.Header, p: p, size: wire.HeaderSize + len(f.Body)}
			if f, err = wire.ReadFrame(st, wire.DefaultMaxFrameBytes); err != nil {
				return
			}
		}
	}
	return frames
}

// recv returns the next Publish frame the node received.
func recv(t *testing.T, frames chan pubFrame) pubFrame {
	t.Helper()
	select {
	case f := <-frames:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no publish frame arrived")
		return pubFrame{}
	}
}

// publishStats asks the publish-stream actor carrying shard 0 of name what
// it holds.
func (c *Client) publishStats(t *testing.T, name StreamName) publishStats {
	t.Helper()
	return c.shardPublishStats(t, name, 0)
}

// shardPublishStats asks the publish-stream actor carrying shard of name
// what it holds.
func (c *Client) shardPublishStats(t *testing.T, name StreamName, shard uint32) publishStats {
	t.Helper()
	req := &publishStatsRequest{route: publishRoute{name: name, shard: shard}, reply: make(chan publishStats, 1)}
	c.send(c.conn, req)
	select {
	case s := <-req.reply:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no publish stats")
		return publishStats{}
	}
}

// waitFor polls cond until it holds (it is for state that another
// goroutine reaches; nothing is asserted about how long it takes).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

var orders = StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}

// TestPublishPipelined: many acked publishes are in flight at once on one
// stream, in issue order, and each future resolves with its own ack.
func TestPublishPipelined(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.PublishWindow = 16
	frames := publishNode(t, srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	const n = 10
	futs := make([]*PublishFuture, n)
	for i := range futs {
		var err error
		futs[i], err = c.PublishAsync(ctx, orders, [][]byte{[]byte(fmt.Sprint("a", i)), []byte(fmt.Sprint("b", i))},
			WithKey([]byte("k")), WithHeaders(Header{Key: "z", Value: []byte("1")}),
			WithHeaders(Header{Key: "a", Value: []byte("2")}, Header{Key: "z", Value: []byte("3")}))
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every publish reaches the node before any is acked, in issue order;
	// publishes queued behind one being written share its frame.
	var got []pubFrame
	var recs []wire.Record
	for len(recs) < 2*n {
		f := recv(t, frames)
		if len(got) > 0 && f.st != got[0].st {
			t.Fatalf("frame %d came on another stream", len(got))
		}
		if len(got) > 0 && f.h.RequestID <= got[len(got)-1].h.RequestID {
			t.Fatalf("request ids not increasing: %d after %d", f.h.RequestID, got[len(got)-1].h.RequestID)
		}
		if f.p.Name != orders || f.p.Ack != wire.AckPerBatch || string(f.p.Key) != "k" || f.p.Count%2 != 0 {
			t.Fatalf("frame %d = %+v", len(got), f.p)
		}
		got = append(got, f)
		recs = append(recs, f.records(t)...)
	}
	for i := range n {
		if string(recs[2*i].Payload) != fmt.Sprint("a", i) || string(recs[2*i+1].Payload) != fmt.Sprint("b", i) {
			t.Fatalf("publish %d out of issue order: %q %q", i, recs[2*i].Payload, recs[2*i+1].Payload)
		}
		// Headers keep the order given, a repeated name included.
		if hs := fmt.Sprintf("%s", recs[2*i+1].Headers); string(recs[2*i+1].Key) != "k" || hs != "[{z 1} {a 2} {z 3}]" {
			t.Fatalf("record key/headers = %q %+v", recs[2*i+1].Key, recs[2*i+1].Headers)
		}
	}
	off := uint64(100)
	for _, f := range got {
		f.ack(t, 3, off)
		off += uint64(f.p.Count)
	}
	for i, fut := range futs {
		ack, err := fut.Wait(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if want := (PublishAck{Shard: 3, Offset: uint64(100 + 2*i), Count: 2}); !equalAck(ack, want) {
			t.Fatalf("publish %d ack = %+v, want %+v", i, ack, want)
		}
		again, err := fut.Wait(ctx) // Wait may be called again
		if err != nil || !equalAck(again, ack) {
			t.Fatalf("second Wait = %+v, %v", again, err)
		}
	}
}

func equalAck(a, b PublishAck) bool {
	if a.Shard != b.Shard || a.Offset != b.Offset || a.Count != b.Count || a.Duplicate != b.Duplicate || len(a.Offsets) != len(b.Offsets) {
		return false
	}
	for i := range a.Offsets {
		if a.Offsets[i] != b.Offsets[i] {
			return false
		}
	}
	return true
}

func TestPublishAckModes(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	srv.start()
	// Without reconnecting: reconnecting, a frame refused with
	// shutting_down is sent again on the next connection instead of
	// failing (TestReconnectResendsDrainRefusedPublish).
	c := srv.dial(t, WithoutReconnect())
	ctx := testCtx(t)

	t.Run("per-message", func(t *testing.T) {
		res := make(chan PublishAck, 1)
		go func() {
			ack, err := c.PublishBatch(ctx, orders, [][]byte{[]byte("x"), []byte("y"), []byte("z")}, WithAck(AckPerMessage))
			if err != nil {
				t.Errorf("PublishBatch: %v", err)
			}
			res <- ack
		}()
		for i := range 3 {
			f := recv(t, frames)
			if f.p.Ack != wire.AckPerMessage || f.p.Count != 1 || string(f.records(t)[0].Payload) != string("xyz"[i]) {
				t.Fatalf("frame %d = %+v", i, f.p)
			}
			f.ack(t, 0, uint64(10+2*i))
		}
		want := PublishAck{Offset: 10, Count: 3, Offsets: []uint64{10, 12, 14}}
		if ack := <-res; !equalAck(ack, want) {
			t.Fatalf("ack = %+v, want %+v", ack, want)
		}
	})

	t.Run("per-message, partly written", func(t *testing.T) {
		// The first record is acked, the second refused with a retryable
		// code: the publish is half written, so its error must not invite
		// a re-send of the whole.
		res := make(chan error, 1)
		go func() {
			_, err := c.PublishBatch(ctx, orders, [][]byte{[]byte("x"), []byte("y")}, WithAck(AckPerMessage))
			res <- err
		}()
		f := recv(t, frames)
		f.ack(t, 0, 20)
		f = recv(t, frames)
		_, _ = f.st.Write(wire.AppendError(nil, f.h.RequestID, wire.Errorf(wire.CodeShuttingDown, "draining")))
		err := <-res
		if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrShuttingDown) {
			t.Fatalf("half-written publish: %v, want outcome unknown and not shutting_down", err)
		}
	})

	t.Run("refused", func(t *testing.T) {
		res := make(chan error, 1)
		go func() {
			_, err := c.Publish(ctx, orders, []byte("x"))
			res <- err
		}()
		f := recv(t, frames)
		_, _ = f.st.Write(wire.AppendError(nil, f.h.RequestID, wire.Errorf(wire.CodePermissionDenied, "not yours")))
		if err := <-res; !errors.Is(err, ErrPermissionDenied) {
			t.Fatalf("Publish: %v, want ErrPermissionDenied", err)
		}
	})

	t.Run("none", func(t *testing.T) {
		ack, err := c.Publish(ctx, orders, []byte("fire"), WithAck(AckNone))
		if err != nil || !equalAck(ack, PublishAck{}) {
			t.Fatalf("AckNone publish = %+v, %v", ack, err)
		}
		f := recv(t, frames)
		if f.p.Ack != wire.AckNone {
			t.Fatalf("ack mode %d", f.p.Ack)
		}
		// A failure of an AckNone publish is only counted.
		_, _ = f.st.Write(wire.AppendError(nil, f.h.RequestID, wire.Errorf(wire.CodeStorageFailure, "disk")))
		waitFor(t, "the async error to be counted", func() bool { return c.s.asyncPublishErrors.Load() == 1 })
		// The stream still works.
		fut, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("after")})
		if err != nil {
			t.Fatal(err)
		}
		recv(t, frames).ack(t, 0, 99)
		if ack, err := fut.Wait(ctx); err != nil || ack.Offset != 99 {
			t.Fatalf("publish after async error = %+v, %v", ack, err)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		if _, err := c.PublishBatch(ctx, orders, nil); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("empty batch: %v", err)
		}
		if _, err := c.Publish(ctx, StreamName{Stream: "x"}, []byte("x")); !errors.Is(err, ErrInvalidStreamName) {
			t.Fatalf("bad name: %v", err)
		}
	})
}

// TestPublishWindow: no more than the node's publish window of acked
// publishes is unanswered on a publish stream.
func TestPublishWindow(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.PublishWindow = 2
	frames := publishNode(t, srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	const n = 5
	futs := make([]*PublishFuture, n)
	for i := range futs {
		var err error
		// Each its own key, so that none shares a frame with another.
		if futs[i], err = c.PublishAsync(ctx, orders, [][]byte{[]byte{byte(i)}}, WithKey([]byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "2 in flight and 3 queued", func() bool {
		st := c.publishStats(t, orders)
		if st.inflight > 2 {
			t.Fatalf("publish stream holds %+v, window is 2", st)
		}
		return st.inflight == 2 && st.queued == 3
	})
	var pending []pubFrame
	received, acked := 0, 0
	for acked < n {
		for received < n && len(pending) < 2 {
			pending = append(pending, recv(t, frames))
			received++
			if out := received - acked; out > 2 {
				t.Fatalf("%d publishes unanswered, window is 2", out)
			}
		}
		pending[0].ack(t, 0, uint64(acked))
		pending = pending[1:]
		acked++
	}
	for i, f := range futs {
		if ack, err := f.Wait(ctx); err != nil || ack.Offset != uint64(i) {
			t.Fatalf("publish %d = %+v, %v", i, ack, err)
		}
	}
}

// TestPublishInflightBytes: a publisher waits for the byte budget, holds it
// until its ack arrives, and a batch larger than the budget goes alone.
func TestPublishInflightBytes(t *testing.T) {
	const limit = 10000
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	srv.start()
	c := srv.dial(t, WithPublishInflightBytes(limit))
	ctx := testCtx(t)
	payload := bytes.Repeat([]byte("p"), 4000)

	// outstanding is what the node has received and not yet answered.
	outstanding := 0
	receive := func() pubFrame {
		f := recv(t, frames)
		outstanding += f.size
		if outstanding > limit {
			t.Fatalf("%d bytes unanswered at the node, the budget is %d", outstanding, limit)
		}
		return f
	}
	ack := func(f pubFrame) {
		outstanding -= f.size
		f.ack(t, 0, 0)
	}

	// Each publish has its own key, so that none shares a frame with
	// another (TestPublishCoalescedBudget covers merged frames).
	f1, err := c.PublishAsync(ctx, orders, [][]byte{payload}, WithKey([]byte("1")))
	if err != nil {
		t.Fatal(err)
	}
	f2, err := c.PublishAsync(ctx, orders, [][]byte{payload}, WithKey([]byte("2")))
	if err != nil {
		t.Fatal(err)
	}
	r1, r2 := receive(), receive()

	third := make(chan *PublishFuture, 1)
	go func() {
		f, err := c.PublishAsync(ctx, orders, [][]byte{payload}, WithKey([]byte("3")))
		if err != nil {
			t.Errorf("third publish: %v", err)
		}
		third <- f
	}()
	waitFor(t, "the third publish to wait for budget", func() bool { _, w := c.s.budget.state(); return w == 1 })
	if used, _ := c.s.budget.state(); used != int64(outstanding) {
		t.Fatalf("client holds %d bytes, the node has %d unanswered", used, outstanding)
	}

	// A waiter whose context ends gives up without holding anything.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.PublishAsync(cctx, orders, [][]byte{[]byte("small")})
		gaveUp <- err
	}()
	waitFor(t, "the fourth publish to wait", func() bool { _, w := c.s.budget.state(); return w == 2 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}

	// Writing is not enough: the budget comes back with the ack.
	ack(r1)
	if _, err := f1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	r3 := receive()
	f3 := <-third
	ack(r2)
	ack(r3)
	for _, f := range []*PublishFuture{f2, f3} {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if used, waiting := c.s.budget.state(); used != 0 || waiting != 0 {
		t.Fatalf("budget after all acks: %d held, %d waiting", used, waiting)
	}

	// A batch larger than the whole budget goes alone.
	done := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, orders, bytes.Repeat([]byte("B"), 3*limit))
		done <- err
	}()
	big := recv(t, frames)
	if big.size <= limit {
		t.Fatalf("big frame is %d bytes", big.size)
	}
	big.ack(t, 0, 0)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPublishMalformedAck: an ack that does not decode closes the
// connection with CodeMalformedFrame; the publish, whose answer could not
// be read, fails as outcome unknown with that cause.
func TestPublishMalformedAck(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	srv.start()
	// Without reconnecting, so that later calls fail with the cause too
	// (reconnecting, they go to the next connection).
	c := srv.dial(t, WithoutReconnect())
	ctx := testCtx(t)
	res := make(chan error, 1)
	go func() { _, err := c.Publish(ctx, orders, []byte("x")); res <- err }()
	f := recv(t, frames)
	_, _ = f.st.Write(wire.AppendFrame(nil, wire.TypePublishAck, 0, f.h.RequestID, []byte{0xff}))
	err := <-res
	var ou *OutcomeUnknownError
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &ou) {
		t.Fatalf("publish: %v, want outcome unknown", err)
	}
	wantCode(t, ou.Cause, wire.CodeMalformedFrame)
	if errors.Is(err, ErrMalformedFrame) {
		t.Fatal("an outcome-unknown error matches its cause's code")
	}
	if _, err := c.DescribeStream(ctx, orders); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("call after the malformed ack: %v", err)
	}
}

func TestPublishWithdrawnBeforeWrite(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.PublishWindow = 1
	frames := publishNode(t, srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	first, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	r1 := recv(t, frames)
	// The window is full: the second publish waits in the actor's queue
	// until its context ends, and is then withdrawn.
	cctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { _, err := c.Publish(cctx, orders, []byte("2")); res <- err }()
	waitFor(t, "the second publish to queue", func() bool { return c.publishStats(t, orders).queued == 1 })
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn publish: %v", err)
	}
	waitFor(t, "the withdrawn publish to leave the queue", func() bool { return c.publishStats(t, orders).queued == 0 })
	r1.ack(t, 0, 0)
	if _, err := first.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The next publish is the next frame: the withdrawn one was never sent.
	third, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("3")})
	if err != nil {
		t.Fatal(err)
	}
	r3 := recv(t, frames)
	if p := r3.records(t)[0].Payload; string(p) != "3" {
		t.Fatalf("frame after the withdrawal carries %q", p)
	}
	r3.ack(t, 0, 1)
	if ack, err := third.Wait(ctx); err != nil || ack.Offset != 1 {
		t.Fatalf("publish after withdrawal = %+v, %v", ack, err)
	}
	if used, _ := c.s.budget.state(); used != 0 {
		t.Fatalf("budget holds %d bytes", used)
	}
}

// TestCloseDeliversUnackedPublishes: Close lets AckNone publishes already
// handed to QUIC reach the node: it closes the publish stream's send side
// and waits for the node to end the stream before closing the connection.
func TestCloseDeliversUnackedPublishes(t *testing.T) {
	srv := newTestServer(t)
	const n = 200
	received := make(chan int, 1)
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		count := 0
		for {
			if _, err := wire.DecodePublish(f.Body); err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			count++
			var err error
			if f, err = wire.ReadFrame(st, wire.DefaultMaxFrameBytes); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("publish stream ended with %v, want the client's clean close", err)
				}
				_ = st.Close() // the node ends its side once it has read everything
				received <- count
				return
			}
		}
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	payload := bytes.Repeat([]byte("n"), 1000)
	for range n {
		if _, err := c.Publish(ctx, orders, payload, WithAck(AckNone)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := <-received; got != n {
		t.Fatalf("node read %d publishes, want %d", got, n)
	}
}

// When the node allows no more streams on the connection, the
// publish-stream actor waits for one off its mailbox: it keeps answering
// (what it holds, a withdrawn publish), the queued publish goes out once a
// stream closes, and Close fails a publish whose stream never came.
func TestPublishWaitsForAStreamWithoutBlocking(t *testing.T) {
	srv := newTestServerStreams(t, 2) // the control stream and one more
	frames := publishNode(t, srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	// Another stream takes the one left.
	held, err := c.session().conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Write([]byte{0}); err != nil { // the node learns of it
		t.Fatal(err)
	}
	fut, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("waits")})
	if err != nil {
		t.Fatal(err)
	}
	withdrawn, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { _, err := c.Publish(withdrawn, orders, []byte("withdrawn")); res <- err }()
	waitFor(t, "both publishes to queue", func() bool { return c.publishStats(t, orders).queued == 2 })
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn publish: %v", err)
	}
	waitFor(t, "the withdrawn publish to leave the queue", func() bool { return c.publishStats(t, orders).queued == 1 })

	// The held stream goes: its credit comes back and the publish is written.
	held.CancelWrite(0)
	held.CancelRead(0)
	f := recv(t, frames)
	if recs := f.records(t); len(recs) != 1 || string(recs[0].Payload) != "waits" {
		t.Fatalf("written: %+v", recs)
	}
	f.ack(t, 0, 7)
	if ack, err := fut.Wait(ctx); err != nil || ack.Offset != 7 {
		t.Fatalf("ack %+v, %v", ack, err)
	}

	// A second client whose publish never gets a stream: Close waits for it
	// at most its linger (closeLinger), then fails it.
	c2 := srv.dial(t)
	held2, err := c2.session().conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held2.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	fut2, err := c2.PublishAsync(ctx, orders, [][]byte{[]byte("never")})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the publish to queue", func() bool { return c2.publishStats(t, orders).queued == 1 })
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fut2.Wait(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("the publish that never got a stream: %v, want ErrClosed", err)
	}
}
