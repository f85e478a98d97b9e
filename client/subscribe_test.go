package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// subNode scripts the node's side of subscriptions: it checks the
// Subscribe frame with check, answers Subscribed (or the error check
// returns) and then runs script on the stream.
func subNode(t *testing.T, srv *testServer, check func(wire.Subscribe) (wire.Subscribed, *wire.Error), script func(st *quic.Stream)) {
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		if f.Header.Type != wire.TypeSubscribe {
			t.Errorf("%v frame opens a stream", f.Header.Type)
			return
		}
		s, err := wire.DecodeSubscribe(f.Body)
		if err != nil {
			t.Errorf("decode subscribe: %v", err)
			return
		}
		ans, werr := check(s)
		if werr != nil {
			_, _ = st.Write(wire.AppendError(nil, f.Header.RequestID, werr))
			_ = st.Close()
			return
		}
		if _, err := st.Write(wire.AppendSubscribed(nil, f.Header.RequestID, ans)); err != nil {
			return
		}
		script(st)
	}
}

// recs returns records whose payloads are "p<first>"… for offsets first on.
func recs(first uint64, n int) []wire.Record {
	out := make([]wire.Record, n)
	for i := range out {
		out[i] = wire.Record{Key: []byte("key"), Headers: []wire.RecordHeader{{Key: "h", Value: []byte("v")}},
			Payload: []byte(fmt.Sprint("p", first+uint64(i)))}
	}
	return out
}

// waitEOF reads st until the client closes its send side.
func waitEOF(t *testing.T, st *quic.Stream) {
	if _, err := io.Copy(io.Discard, st); err != nil {
		t.Errorf("stream ended with %v, want a clean close by the client", err)
	}
}

// TestSubscribeDelivery: records below the start offset and repeated ones
// are dropped, the rest come in order, and the node's error ends it.
func TestSubscribeDelivery(t *testing.T) {
	srv := newTestServer(t)
	const ts = int64(1_700_000_000_000_000_000)
	closed := make(chan struct{})
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		if s.Name != orders || s.Shard != 2 || s.Start != wire.StartOffset || s.Offset != 5 || s.QueueCapacity != 32 {
			t.Errorf("subscribe = %+v", s)
		}
		return wire.Subscribed{Shard: 2, Offset: 5, Tail: 5, QueueCapacity: 16}, nil
	}, func(st *quic.Stream) {
		defer close(closed)
		// A batch that starts before the start offset: 3..6.
		_, _ = st.Write(eventBatchAt(2, ts, []uint64{3}, recs(3, 4)))
		// A repeat of 5..7, then a gap to 10..11.
		_, _ = st.Write(eventBatchAt(2, ts, []uint64{5, 10}, recs(5, 3), recs(10, 2)))
		_, _ = st.Write(wire.AppendError(nil, 0, wire.Errorf(wire.CodeSubscriptionAborted, "node stopping")))
		waitEOF(t, st)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	sub, err := c.Subscribe(ctx, orders, WithStartOffset(5), WithShard(2), WithQueueCapacity(32))
	if err != nil {
		t.Fatal(err)
	}
	if sub.QueueCapacity() != 16 || sub.StartOffset() != 5 || sub.Shard() != 2 {
		t.Fatalf("granted %+v", sub.granted)
	}
	for _, want := range []uint64{5, 6, 7, 10, 11} {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("Next (want offset %d): %v", want, err)
		}
		if ev.Offset != want || ev.Shard != 2 || string(ev.Payload) != fmt.Sprint("p", want) ||
			string(ev.Key) != "key" || string(ev.Headers.Get("h")) != "v" || ev.Timestamp.UnixNano() != ts {
			t.Fatalf("event = %+v, want offset %d", ev, want)
		}
	}
	for range 2 {
		if _, err := sub.Next(ctx); !errors.Is(err, ErrSubscriptionAborted) {
			t.Fatalf("Next after the node's error: %v, want ErrSubscriptionAborted", err)
		}
	}
	<-closed // the client closed its side when the node ended the subscription
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestSubscribeRefused(t *testing.T) {
	srv := newTestServer(t)
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		return wire.Subscribed{}, &wire.Error{Code: wire.CodeOffsetOutOfRange, Message: "past the tail", Detail: 42}
	}, nil)
	srv.start()
	c := srv.dial(t)
	_, err := c.Subscribe(testCtx(t), orders, WithStartOffset(1000))
	if !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("Subscribe: %v, want ErrOffsetOutOfRange", err)
	}
	var we *Error
	if !errors.As(err, &we) || we.Detail != 42 {
		t.Fatalf("error detail: %+v", we)
	}
	var oe *OffsetOutOfRangeError
	if !errors.As(err, &oe) || oe.Shard != 0 || oe.Offset != 1000 || oe.Detail != 42 || oe.BelowRetention() {
		t.Fatalf("typed error: %+v", oe)
	}
}

// TestSubscribeClose: Close closes the send side (the unsubscribe signal)
// and fails a waiting Next.
func TestSubscribeClose(t *testing.T) {
	srv := newTestServer(t)
	sawEOF := make(chan struct{})
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		if s.Start != wire.StartLatest {
			t.Errorf("start %d, want latest", s.Start)
		}
		return wire.Subscribed{Offset: 9, Tail: 9}, nil
	}, func(st *quic.Stream) {
		waitEOF(t, st)
		close(sawEOF)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders, WithStartLatest())
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan error, 1)
	go func() { _, err := sub.Next(ctx); next <- err }()
	// A Next whose context ends returns the context error.
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := sub.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with an ended context: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-next; !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("pending Next: %v, want ErrSubscriptionClosed", err)
	}
	<-sawEOF
	_ = sub.Close() // idempotent
}

// TestSubscribeManyFrames: far more frames than the subscription holds at
// once all arrive as the caller drains them.
func TestSubscribeManyFrames(t *testing.T) {
	const frames = 3 * maxHeldFrames
	srv := newTestServer(t)
	sawEOF := make(chan struct{})
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		return wire.Subscribed{Offset: 0}, nil
	}, func(st *quic.Stream) {
		defer close(sawEOF)
		for i := range uint64(frames) {
			if _, err := st.Write(eventBatchAt(0, 1, []uint64{2 * i}, recs(2*i, 2))); err != nil {
				return
			}
		}
		_, _ = st.Write(wire.AppendError(nil, 0, wire.Errorf(wire.CodeSubscriptionAborted, "done")))
		waitEOF(t, st)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for want := range uint64(2 * frames) {
		ev, err := sub.Next(ctx)
		if err != nil || ev.Offset != want {
			t.Fatalf("Next = offset %d, %v; want %d", ev.Offset, err, want)
		}
	}
	if _, err := sub.Next(ctx); !errors.Is(err, ErrSubscriptionAborted) {
		t.Fatalf("end: %v", err)
	}
	<-sawEOF
}

// TestSubscribeMalformedBatch: an EventBatch that does not decode closes the
// connection with CodeMalformedFrame and ends the subscription with it.
func TestSubscribeMalformedBatch(t *testing.T) {
	srv := newTestServer(t)
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		return wire.Subscribed{}, nil
	}, func(st *quic.Stream) {
		_, _ = st.Write(eventBatchAt(0, 1, []uint64{0}, recs(0, 1)))
		_, _ = st.Write(wire.AppendFrame(nil, wire.TypeEventBatch, 0, 0, []byte{0, 1, 2}))
	})
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	// The bad frame may reach the client while Subscribe is still
	// returning: then Subscribe reports it, and either way it is the error.
	sub, err := c.Subscribe(ctx, orders)
	if err == nil {
		defer sub.Close()
		if ev, err := sub.Next(ctx); err != nil || ev.Offset != 0 {
			t.Fatalf("first event = %+v, %v", ev, err)
		}
		_, err = sub.Next(ctx)
	}
	wantCode(t, err, wire.CodeMalformedFrame)
	<-sc.conn.Context().Done()
	var ae *quic.ApplicationError
	if cause := context.Cause(sc.conn.Context()); !errors.As(cause, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(wire.CodeMalformedFrame) {
		t.Fatalf("connection ended with %v", cause)
	}
}

// TestSubscribeWrongShard: a batch of another shard is a protocol violation.
func TestSubscribeWrongShard(t *testing.T) {
	srv := newTestServer(t)
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		return wire.Subscribed{Shard: 1}, nil
	}, func(st *quic.Stream) {
		_, _ = st.Write(eventBatchAt(4, 1, []uint64{0}, recs(0, 1)))
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders, WithShard(1))
	if err == nil { // the bad batch may also reach Subscribe before it returns
		defer sub.Close()
		_, err = sub.Next(ctx)
	}
	wantCode(t, err, wire.CodeProtocolViolation)
}

// Next hands out a request's events from the answer's own slice, clears
// each slot as it goes (a reused slice must not keep events' bytes alive),
// and gives the emptied slice to the next request; an answer arriving while
// another's events are held queues behind them, in order.
func TestSubscriptionReusesItsEventSliceCleared(t *testing.T) {
	sub := &Subscription{}
	batch := func(offs ...uint64) []Event {
		evs := make([]Event, 0, 4)
		for _, o := range offs {
			evs = append(evs, Event{Offset: o, Payload: []byte{byte(o)}})
		}
		return evs
	}
	first := batch(0, 1, 2)
	var got []uint64
	ev, err := sub.take(nextResult{evs: first})
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, ev.Offset)
	// A second answer (another Next's) while 1 and 2 are held.
	ev, err = sub.take(nextResult{evs: batch(3, 4)})
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, ev.Offset)
	for sub.buffered(&ev) {
		got = append(got, ev.Offset)
	}
	if !slices.Equal(got, []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("events in the order %v, want 0..4", got)
	}
	spare := sub.takeSpare()
	if cap(spare) < 4 || len(spare) != 0 {
		t.Fatalf("spare len %d cap %d: the emptied slice was not kept", len(spare), cap(spare))
	}
	for i, e := range spare[:cap(spare)] {
		if e.Payload != nil || e.Offset != 0 {
			t.Fatalf("spare slot %d still holds %+v", i, e)
		}
	}
	if s := sub.takeSpare(); s != nil {
		t.Fatal("the spare was handed out twice")
	}
}

// TestSubscribeConcurrentNext: Next is safe for concurrent use, and the
// requests it reuses (one whose answer was received) and those it drops
// (one whose context ended first) lose and repeat nothing: every offset
// comes out exactly once across the callers.
func TestSubscribeConcurrentNext(t *testing.T) {
	const frames = 400
	srv := newTestServer(t)
	sawEOF := make(chan struct{})
	subNode(t, srv, func(s wire.Subscribe) (wire.Subscribed, *wire.Error) {
		return wire.Subscribed{Offset: 0}, nil
	}, func(st *quic.Stream) {
		defer close(sawEOF)
		for i := range uint64(frames) {
			if _, err := st.Write(eventBatchAt(0, 1, []uint64{i}, recs(i, 1))); err != nil {
				return
			}
			if i%8 == 0 {
				time.Sleep(time.Millisecond) // let the callers wait, so Next asks the actor
			}
		}
		_, _ = st.Write(wire.AppendError(nil, 0, wire.Errorf(wire.CodeSubscriptionAborted, "done")))
		waitEOF(t, st)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan uint64, frames+1)
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := 0; ; i++ {
				callCtx, cancel := ctx, context.CancelFunc(func() {})
				if g == 0 && i%3 == 0 {
					// A caller that gives up now and then.
					callCtx, cancel = context.WithTimeout(ctx, 200*time.Microsecond)
				}
				ev, err := sub.Next(callCtx)
				cancel()
				switch {
				case err == nil:
					got <- ev.Offset
				case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
				default:
					errs <- err
					return
				}
			}
		}()
	}
	for range 4 {
		if err := <-errs; !errors.Is(err, ErrSubscriptionAborted) {
			t.Fatalf("a caller ended with %v", err)
		}
	}
	close(got)
	seen := make([]bool, frames)
	n := 0
	for o := range got {
		if o >= frames || seen[o] {
			t.Fatalf("offset %d out of range or returned twice", o)
		}
		seen[o] = true
		n++
	}
	if n != frames {
		t.Fatalf("%d of %d offsets returned", n, frames)
	}
	<-sawEOF
}
