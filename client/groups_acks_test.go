package client

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// TestAckCoalescerMatchesModel drives an ackCoalescer with random acks,
// callers giving up and answers, against a model: a FIFO of the acks not
// yet sent and a count of requests out. After every step the coalescer's
// invariants hold, and in the end every ack whose caller did not give up
// was handed out exactly once, in the order the acks were added, in
// batches within the bounds.
func TestAckCoalescerMatchesModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 16))
		c := &ackCoalescer{maxRequests: 1 + rng.IntN(3), maxEntries: 1 + rng.IntN(5), maxOffsets: 1 + rng.IntN(8), maxBytes: 16 + rng.IntN(64)}
		var (
			all      []*pendingAck   // every ack added, in order
			inFlight [][]*pendingAck // batches handed out, not yet answered
			sent     []*pendingAck   // every ack handed out, in order
			batches  int
		)
		check := func(step int, batch []*pendingAck) {
			t.Helper()
			if batch != nil {
				batches++
				offsets, bytes := 0, 0
				for _, a := range batch {
					if a.abandoned.Load() {
						t.Fatalf("seed %d step %d: an abandoned ack was sent", seed, step)
					}
					offsets += len(a.offsets)
					bytes += a.size()
				}
				if len(batch) > c.maxEntries || len(batch) > 1 && (offsets > c.maxOffsets || bytes > c.maxBytes) {
					t.Fatalf("seed %d step %d: a batch of %d acks, %d offsets, %d bytes past the bounds %+v", seed, step, len(batch), offsets, bytes, c)
				}
				inFlight = append(inFlight, batch)
				sent = append(sent, batch...)
			}
			if c.out != len(inFlight) || c.out > c.maxRequests {
				t.Fatalf("seed %d step %d: %d requests out, model %d, at most %d", seed, step, c.out, len(inFlight), c.maxRequests)
			}
			if len(c.queue) > 0 && c.out < c.maxRequests {
				t.Fatalf("seed %d step %d: %d acks wait with a request slot free", seed, step, len(c.queue))
			}
			if c.idle() != (len(inFlight) == 0 && len(c.queue) == 0) {
				t.Fatalf("seed %d step %d: idle %v", seed, step, c.idle())
			}
		}
		for step := range 300 {
			switch r := rng.IntN(10); {
			case r < 5:
				a := &pendingAck{shard: uint32(rng.IntN(3)), offsets: make([]uint64, 1+rng.IntN(4))}
				all = append(all, a)
				check(step, c.add(a))
			case r < 6 && len(c.queue) > 0:
				c.queue[rng.IntN(len(c.queue))].abandoned.Store(true)
				check(step, nil)
			case len(inFlight) > 0:
				i := rng.IntN(len(inFlight))
				inFlight = slices.Delete(inFlight, i, i+1)
				check(step, c.answered())
			}
		}
		for len(inFlight) > 0 {
			inFlight = inFlight[1:]
			check(-1, c.answered())
		}
		if !c.idle() {
			t.Fatalf("seed %d: not idle at the end: %d queued, %d out", seed, len(c.queue), c.out)
		}
		var want []*pendingAck
		for _, a := range all {
			if !a.abandoned.Load() {
				want = append(want, a)
			}
		}
		if !slices.Equal(sent, want) {
			t.Fatalf("seed %d: %d acks sent, want the %d not abandoned, once each in order", seed, len(sent), len(want))
		}
		if len(all) > 0 && batches == 0 {
			t.Fatalf("seed %d: nothing sent", seed)
		}
	}
}

// An ack with a request slot free goes at once and alone (no waiting for
// company), as a plain GroupAck; acks issued while the slots are taken
// queue, and go together in one GroupAcks when an answer frees a slot.
// Each caller gets its own entry's outcome: its count, or its own error.
func TestGroupAcksCoalesce(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")

	type result struct {
		n   int
		err error
	}
	ack := func(off uint64) chan result {
		done := make(chan result, 1)
		go func() {
			n, err := g.AckOffsets(ctx, 0, off)
			done <- result{n, err}
		}()
		return done
	}
	// The first maxAckRequests acks go at once, each alone.
	var first []wire.Frame
	var firstDone []chan result
	for i := range maxAckRequests {
		firstDone = append(firstDone, ack(uint64(i)))
		f := nextFrame(t, frames, wire.TypeGroupAck)
		a, err := wire.DecodeGroupAck(f.Body)
		if err != nil || a.Shard != 0 || !slices.Equal(a.Offsets, []uint64{uint64(i)}) {
			t.Fatalf("ack %d sent as %+v, %v", i, a, err)
		}
		first = append(first, f)
	}
	// Four more queue behind them: nothing is sent for them yet.
	later := map[uint64]chan result{}
	for off := uint64(10); off < 14; off++ {
		later[off] = ack(off)
	}
	waitQueued(t, c, ackKey{stream: orders, group: "fulfilment"}, 4)
	select {
	case f := <-frames:
		t.Fatalf("%v sent while both request slots were taken", f.Header.Type)
	default:
	}
	sc.writeCtl(wire.AppendGroupDone(nil, first[0].Header.RequestID, 1))
	if r := <-firstDone[0]; r.err != nil || r.n != 1 {
		t.Fatalf("first ack: %d, %v", r.n, r.err)
	}
	// The answer freed a slot: the four go in one GroupAcks.
	f := nextFrame(t, frames, wire.TypeGroupAcks)
	req, err := wire.DecodeGroupAcks(f.Body)
	if err != nil || req.Name != orders || req.Group != "fulfilment" || len(req.Entries) != 4 {
		t.Fatalf("coalesced ack %+v, %v; want the 4 queued", req, err)
	}
	outs := make([]wire.GroupAckOutcome, 4)
	for i, e := range req.Entries {
		switch e.Offsets[0] {
		case 12:
			outs[i].Err = &wire.Error{Code: wire.CodeNotDelivered, Detail: 12, Message: "shard 0 offset 12 has not been delivered"}
		case 13:
			outs[i].Count = 0 // settled already
		default:
			outs[i].Count = 1
		}
	}
	sc.writeCtl(wire.AppendGroupAcksDone(nil, f.Header.RequestID, outs))
	for off, done := range later {
		r := <-done
		switch off {
		case 12:
			if !errors.Is(r.err, ErrNotDelivered) || r.n != 0 {
				t.Errorf("ack of %d: %d, %v; want ErrNotDelivered", off, r.n, r.err)
			}
		case 13:
			if r.err != nil || r.n != 0 {
				t.Errorf("ack of %d: %d, %v; want 0 settled", off, r.n, r.err)
			}
		default:
			if r.err != nil || r.n != 1 {
				t.Errorf("ack of %d: %d, %v; want 1 settled", off, r.n, r.err)
			}
		}
	}
	// An error of the request as a whole is every entry's. One slot is
	// free again: the next ack takes it, the two after it queue.
	later[20] = ack(20)
	alone := nextFrame(t, frames, wire.TypeGroupAck)
	for off := uint64(21); off < 23; off++ {
		later[off] = ack(off)
	}
	waitQueued(t, c, ackKey{stream: orders, group: "fulfilment"}, 2)
	sc.writeCtl(wire.AppendGroupDone(nil, first[1].Header.RequestID, 1))
	if r := <-firstDone[1]; r.err != nil || r.n != 1 {
		t.Fatalf("second ack: %d, %v", r.n, r.err)
	}
	f = nextFrame(t, frames, wire.TypeGroupAcks)
	sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, wire.Errorf(wire.CodeGroupNotFound, "no group")))
	for off := uint64(21); off < 23; off++ {
		if r := <-later[off]; !errors.Is(r.err, ErrGroupNotFound) {
			t.Errorf("ack of %d: %v, want ErrGroupNotFound", off, r.err)
		}
	}
	sc.writeCtl(wire.AppendGroupDone(nil, alone.Header.RequestID, 1))
	if r := <-later[20]; r.err != nil || r.n != 1 {
		t.Errorf("ack of 20: %d, %v", r.n, r.err)
	}
}

// waitQueued waits until n acks of k queue in c's coalescer.
func waitQueued(t *testing.T, c *Client, k ackKey, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.groupAcks.mu.Lock()
		got := 0
		if co := c.groupAcks.mu.groups[k]; co != nil {
			got = len(co.queue)
		}
		c.groupAcks.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acks queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// An answer whose outcomes do not match the request's entries breaks the
// protocol: every caller of the request gets the error.
func TestGroupAcksBadAnswer(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")
	errs := make([]chan error, maxAckRequests+2)
	var plain []wire.Frame
	for i := range errs {
		errs[i] = goCall(func() error { _, err := g.AckOffsets(ctx, 0, uint64(i)); return err })
		if i < maxAckRequests {
			plain = append(plain, nextFrame(t, frames, wire.TypeGroupAck))
		}
	}
	waitQueued(t, c, ackKey{stream: orders, group: "fulfilment"}, 2)
	for _, f := range plain {
		sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 1))
	}
	f := nextFrame(t, frames, wire.TypeGroupAcks)
	sc.writeCtl(wire.AppendGroupAcksDone(nil, f.Header.RequestID, []wire.GroupAckOutcome{{Count: 1}}))
	for i, done := range errs {
		err := <-done
		if i < maxAckRequests {
			if err != nil {
				t.Errorf("plain ack %d: %v", i, err)
			}
			continue
		}
		if !errors.Is(err, ErrProtocolViolation) {
			t.Errorf("coalesced ack %d: %v, want ErrProtocolViolation", i, err)
		}
	}
}

// Acks on their way when the connection is lost, alone or coalesced, fail
// in doubt (ErrOutcomeUnknown), each caller's; acks after the reconnect go
// out on the new connection.
func TestGroupAcksInFlightAtTheLoss(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")
	ack := func(off uint64) chan error {
		return goCall(func() error { _, err := g.AckOffsets(ctx, 0, off); return err })
	}
	// Two acks take the slots, four queue; answering the first sends the
	// four in one request, and the loss finds it and the second unanswered.
	answered := ack(0)
	f0 := nextFrame(t, frames, wire.TypeGroupAck)
	var doubt []chan error
	doubt = append(doubt, ack(1))
	nextFrame(t, frames, wire.TypeGroupAck)
	for off := uint64(2); off < 6; off++ {
		doubt = append(doubt, ack(off))
	}
	waitQueued(t, c, ackKey{stream: orders, group: "fulfilment"}, 4)
	first.writeCtl(wire.AppendGroupDone(nil, f0.Header.RequestID, 1))
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if req, err := wire.DecodeGroupAcks(nextFrame(t, frames, wire.TypeGroupAcks).Body); err != nil || len(req.Entries) != 4 {
		t.Fatalf("coalesced %+v, %v; want the 4 queued", req, err)
	}
	drop(first)
	second := nextConn(t, srv)
	for i, ch := range doubt {
		if err := <-ch; !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("ack %d on its way at the loss: %v, want ErrOutcomeUnknown", i+1, err)
		}
	}
	after := goCall(func() error {
		if n, err := g.AckOffsets(ctx, 0, 9); err != nil || n != 1 {
			return fmt.Errorf("%d, %w", n, err)
		}
		return nil
	})
	f := nextFrame(t, frames, wire.TypeGroupAck)
	second.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 1))
	if err := <-after; err != nil {
		t.Fatalf("ack after the reconnect: %v", err)
	}
}

// Against a node without FeatureGroupAcks, acks are not coalesced: each is
// its own GroupAck, all on their way at once as before.
func TestGroupAcksWithoutTheFeature(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.Features &^= wire.FeatureGroupAcks
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")
	const n = 6
	var done []chan error
	for off := range uint64(n) {
		done = append(done, goCall(func() error {
			if n, err := g.AckOffsets(ctx, 0, off); err != nil || n != 1 {
				return fmt.Errorf("%d, %w", n, err)
			}
			return nil
		}))
	}
	var sent []wire.Frame
	for range n {
		sent = append(sent, nextFrame(t, frames, wire.TypeGroupAck))
	}
	for _, f := range sent {
		sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 1))
	}
	for _, ch := range done {
		if err := <-ch; err != nil {
			t.Error(err)
		}
	}
}

// Acks that fit the node's frame alone never fail for having been merged:
// a batch whose GroupAcks would exceed the node's max frame goes as several
// requests, and one that could be answered with more than the client's max
// frame (every entry an error of the longest message) goes in parts too.
func TestGroupAcksSplitToFitFrames(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nodeMax    uint32
		clientMax  uint32
		acks       int   // queued behind the two in flight
		offsets    int   // per ack
		wantGroups []int // entries per request, in order (1: a plain GroupAck)
	}{
		// 3 acks of 4,000 offsets (32 KB each): two fit a 64 KiB request.
		{"request", 64 << 10, wire.DefaultMaxFrameBytes, 3, 4000, []int{2, 1}},
		// A 16 KiB answer holds (16384-64)/1036 = 15 worst-case outcomes.
		{"answer", wire.DefaultMaxFrameBytes, 16 << 10, 20, 1, []int{15, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestServer(t)
			srv.welcome.MaxFrameBytes = tc.nodeMax
			frames := ctlScript(srv)
			srv.start()
			c := srv.dial(t, WithMaxFrameBytes(tc.clientMax))
			sc := <-srv.conns
			ctx := testCtx(t)
			g := c.Group(orders, "fulfilment")
			done := make(chan error, maxAckRequests+tc.acks)
			ack := func(offs []uint64) {
				go func() {
					n, err := g.AckOffsets(ctx, 0, offs...)
					if err == nil && n != len(offs) {
						err = fmt.Errorf("%d settled, want %d", n, len(offs))
					}
					done <- err
				}()
			}
			var first []wire.Frame
			for i := range maxAckRequests {
				ack([]uint64{uint64(i)})
				first = append(first, nextFrame(t, frames, wire.TypeGroupAck))
			}
			for i := range tc.acks {
				offs := make([]uint64, tc.offsets)
				for j := range offs {
					offs[j] = uint64(100 + i*tc.offsets + j)
				}
				ack(offs)
			}
			waitQueued(t, c, ackKey{stream: orders, group: "fulfilment"}, tc.acks)
			sc.writeCtl(wire.AppendGroupDone(nil, first[0].Header.RequestID, 1))
			sc.writeCtl(wire.AppendGroupDone(nil, first[1].Header.RequestID, 1))
			for i, want := range tc.wantGroups {
				var f wire.Frame
				select {
				case f = <-frames:
				case <-ctx.Done():
					t.Fatalf("request %d never sent", i)
				}
				if body := len(f.Body); body > int(tc.nodeMax) {
					t.Fatalf("request %d: %d bytes, beyond the node's %d", i, body, tc.nodeMax)
				}
				switch f.Header.Type {
				case wire.TypeGroupAck:
					a, err := wire.DecodeGroupAck(f.Body)
					if err != nil || want != 1 {
						t.Fatalf("request %d: a GroupAck (%v), want %d entries", i, err, want)
					}
					sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, uint64(len(a.Offsets))))
				case wire.TypeGroupAcks:
					req, err := wire.DecodeGroupAcks(f.Body)
					if err != nil || len(req.Entries) != want {
						t.Fatalf("request %d: %d entries (%v), want %d", i, len(req.Entries), err, want)
					}
					outs := make([]wire.GroupAckOutcome, len(req.Entries))
					for j, e := range req.Entries {
						outs[j].Count = uint64(len(e.Offsets))
					}
					sc.writeCtl(wire.AppendGroupAcksDone(nil, f.Header.RequestID, outs))
				default:
					t.Fatalf("request %d: %v", i, f.Header.Type)
				}
			}
			for range maxAckRequests + tc.acks {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
