package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// AckAsync queues behind the requests on their way, as Ack does, from
// the caller's goroutine: acks of many records issued one by one without a
// goroutine each go in one coalesced request, and each future gets its
// own entry's outcome. A Wait whose ctx ends returns ctx's error and the
// ack goes on; a later Wait gets it. An ack of records of two shards sums
// their counts and reports the first shard's error.
func TestGroupAckAsyncCoalescesAndResolvesEachFuture(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")
	rec := func(shard uint32, off uint64) GroupRecord { return GroupRecord{Shard: shard, Offset: off} }

	// The first two take the request slots, each alone.
	var first []wire.Frame
	var firstFut []*AckFuture
	for i := range maxAckRequests {
		f, err := g.AckAsync(rec(0, uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		firstFut = append(firstFut, f)
		first = append(first, nextFrame(t, frames, wire.TypeGroupAck))
	}
	// Five more queue, issued from this goroutine: nothing waits for them.
	var later []*AckFuture
	for off := uint64(10); off < 14; off++ {
		f, err := g.AckAsync(rec(0, off))
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, f)
	}
	both, err := g.AckAsync(rec(1, 7), rec(0, 20), rec(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, c, ackKey{stream: orders, group: "fulfilment"}, 6)
	// A Wait blocked with a long ctx does not hold up another Wait's own
	// ctx.
	long := make(chan error, 1)
	go func() { _, err := later[0].Wait(ctx); long <- err }()
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := later[0].Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait of a queued ack with a short ctx: %v, want its deadline", err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, first[0].Header.RequestID, 1))
	if n, err := firstFut[0].Wait(ctx); n != 1 || err != nil {
		t.Fatalf("first ack: %d, %v", n, err)
	}
	f := nextFrame(t, frames, wire.TypeGroupAcks)
	req, err := wire.DecodeGroupAcks(f.Body)
	if err != nil || len(req.Entries) != 6 {
		t.Fatalf("coalesced %+v, %v; want the 6 queued", req, err)
	}
	outs := make([]wire.GroupAckOutcome, len(req.Entries))
	for i, e := range req.Entries {
		switch {
		case e.Shard == 1:
			if !slices.Equal(e.Offsets, []uint64{7, 8}) {
				t.Errorf("shard 1's entry %v, want [7 8]", e.Offsets)
			}
			outs[i].Err = &wire.Error{Code: wire.CodeNotDelivered, Detail: 8, Message: "shard 1 offset 8 has not been delivered"}
		case e.Offsets[0] == 13:
			outs[i].Count = 0 // settled already
		default:
			outs[i].Count = uint64(len(e.Offsets))
		}
	}
	sc.writeCtl(wire.AppendGroupAcksDone(nil, f.Header.RequestID, outs))
	// Done closes on the answer, with no Wait called.
	select {
	case <-later[1].Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the answer")
	}
	if err := <-long; err != nil {
		t.Fatalf("the long Wait: %v", err)
	}
	for i, fut := range later {
		want := 1
		if i == 3 {
			want = 0
		}
		if n, err := fut.Wait(ctx); n != want || err != nil {
			t.Errorf("ack %d: %d, %v; want %d", i, n, err, want)
		}
		select {
		case <-fut.Done():
		default:
			t.Errorf("ack %d: Done not closed after Wait returned", i)
		}
		if n, err := fut.Wait(ctx); n != want || err != nil {
			t.Errorf("ack %d waited again: %d, %v", i, n, err)
		}
	}
	if n, err := both.Wait(ctx); n != 1 || !errors.Is(err, ErrNotDelivered) {
		t.Errorf("ack of two shards: %d, %v; want shard 0's 1 and shard 1's ErrNotDelivered", n, err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, first[1].Header.RequestID, 1))
	if n, err := firstFut[1].Wait(ctx); n != 1 || err != nil {
		t.Fatalf("second ack: %d, %v", n, err)
	}
}

// What Ack refuses before sending, AckAsync refuses at once; a closed
// client's AckAsync fails with ErrClosed, and an ack queued when the
// client closes resolves with ErrClosed (or, if its request was on its
// way, as unknown).
func TestGroupAckAsyncRefusalsAndClose(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	<-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")
	if _, err := g.AckAsync(); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("no records: %v", err)
	}
	many := make([]GroupRecord, wire.MaxGroupAckOffsets+1)
	if _, err := g.AckAsync(many...); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("%d offsets of one shard: %v", len(many), err)
	}
	if _, err := c.Group(orders, "bad name!").AckAsync(GroupRecord{}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("bad group name: %v", err)
	}
	var futs []*AckFuture
	for off := range uint64(5) {
		f, err := g.AckAsync(GroupRecord{Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for range maxAckRequests {
		nextFrame(t, frames, wire.TypeGroupAck)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, f := range futs {
		if _, err := f.Wait(ctx); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("ack %d at Close: %v, want ErrClosed or ErrOutcomeUnknown", i, err)
		}
	}
	if _, err := g.AckAsync(GroupRecord{}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// Against a node without coalesced acks, an AckAsync is a GroupAck per
// shard, sent at once: a one-record future and a two-shard future each get
// their own counts, and a shard's error is the future's (a future resolved
// before its second shard's answer would have no error).
func TestGroupAckAsyncWithoutCoalescedAcks(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.Features &^= wire.FeatureGroupAcks
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")

	one, err := g.AckAsync(GroupRecord{Shard: 2, Offset: 41})
	if err != nil {
		t.Fatal(err)
	}
	f := nextFrame(t, frames, wire.TypeGroupAck)
	if a, err := wire.DecodeGroupAck(f.Body); err != nil || a.Shard != 2 || !slices.Equal(a.Offsets, []uint64{41}) {
		t.Fatalf("sent %+v, %v; want shard 2 offset 41", a, err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 1))
	if n, err := one.Wait(ctx); n != 1 || err != nil {
		t.Fatalf("one-record future: %d, %v; want 1, nil", n, err)
	}

	two, err := g.AckAsync(GroupRecord{Shard: 0, Offset: 5}, GroupRecord{Shard: 1, Offset: 6}, GroupRecord{Shard: 0, Offset: 7})
	if err != nil {
		t.Fatal(err)
	}
	byShard := map[uint32]wire.Frame{}
	for range 2 {
		f := nextFrame(t, frames, wire.TypeGroupAck)
		a, err := wire.DecodeGroupAck(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		byShard[a.Shard] = f
	}
	sc.writeCtl(wire.AppendGroupDone(nil, byShard[0].Header.RequestID, 2))
	sc.writeCtl(wire.AppendError(nil, byShard[1].Header.RequestID, wire.Errorf(wire.CodeNotDelivered, "offset 6 was not delivered")))
	n, err := two.Wait(ctx)
	var werr *wire.Error
	if n != 2 || !errors.As(err, &werr) || werr.Code != wire.CodeNotDelivered {
		t.Fatalf("two-shard future: %d, %v; want 2 and not_delivered", n, err)
	}
}
