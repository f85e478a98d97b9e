package client

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// coalesceReq builds a publish request as startPublish does: one frame of
// payloads under key with ack mode ack; mergeable unless cond (a
// conditional publish).
func coalesceReq(key string, ack wire.AckMode, cond bool, payloads ...string) *publishRequest {
	p := wire.Publish{Name: orders, Ack: ack, Conditional: cond}
	if key != "" {
		p.Key = []byte(key)
	}
	pls := make([][]byte, len(payloads))
	for i, pl := range payloads {
		pls[i] = []byte(pl)
	}
	f, recBytes := appendPublishFrame(p, p.Key, nil, pls)
	r := &publishRequest{mode: ack, frames: [][]byte{f}, count: uint32(len(payloads))}
	if !cond {
		r.recBytes = recBytes
	}
	return r
}

// decodeFrame decodes an encoded Publish frame and its records.
func decodeFrame(t *testing.T, frame []byte) (wire.Publish, []wire.Record) {
	t.Helper()
	f, err := wire.ReadFrame(bytes.NewReader(frame), wire.DefaultMaxFrameBytes)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	p, err := wire.DecodePublish(f.Body)
	if err != nil {
		t.Fatalf("decode publish: %v", err)
	}
	if _, err := wire.ValidateRecords(p.Records, p.Count); err != nil {
		t.Fatalf("records: %v", err)
	}
	var recs []wire.Record
	it := wire.NewRecordIter(p.Records)
	for {
		var r wire.Record
		if !it.Next(&r) {
			break
		}
		recs = append(recs, r)
	}
	return p, recs
}

func TestCoalescerTake(t *testing.T) {
	lim := coalesceLimits{records: 5, bytes: 1000}
	co := frameCoalescer{limits: lim}
	q := func(reqs ...*publishRequest) []pendingFrame {
		out := make([]pendingFrame, len(reqs))
		for i, r := range reqs {
			out[i] = pendingFrame{req: r}
		}
		return out
	}
	plain := func(payloads ...string) *publishRequest { return coalesceReq("", wire.AckPerBatch, false, payloads...) }
	big := string(bytes.Repeat([]byte("x"), 600))
	for _, tc := range []struct {
		name  string
		queue []pendingFrame
		want  int
	}{
		{"empty", nil, 0},
		{"alone", q(plain("a")), 1},
		{"all plain", q(plain("a"), plain("b"), plain("c", "d")), 3},
		{"records limit", q(plain("a", "b"), plain("c", "d"), plain("e", "f")), 2},
		{"bytes limit", q(plain(big), plain(big)), 1},
		{"over the limits alone", q(plain("1", "2", "3", "4", "5", "6"), plain("a")), 1},
		{"conditional head", q(coalesceReq("", wire.AckPerBatch, true, "a"), plain("b")), 1},
		{"conditional behind", q(plain("a"), coalesceReq("", wire.AckPerBatch, true, "b"), plain("c")), 1},
		{"other key", q(plain("a"), coalesceReq("k", wire.AckPerBatch, false, "b")), 1},
		{"same key", q(coalesceReq("k", wire.AckPerBatch, false, "a"), coalesceReq("k", wire.AckPerBatch, false, "b")), 2},
		{"other ack mode", q(plain("a"), coalesceReq("", wire.AckNone, false, "b")), 1},
		{"ack none", q(coalesceReq("", wire.AckNone, false, "a"), coalesceReq("", wire.AckNone, false, "b")), 2},
		{"stops at the first that does not merge", q(plain("a"), coalesceReq("k", wire.AckPerBatch, false, "b"), plain("c")), 1},
	} {
		if got := co.take(tc.queue); got != tc.want {
			t.Errorf("%s: take = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestCoalescerSplit(t *testing.T) {
	parts := []pendingFrame{
		{req: coalesceReq("", wire.AckPerBatch, false, "a")},
		{req: coalesceReq("", wire.AckPerBatch, false, "b", "c", "d")},
		{req: coalesceReq("", wire.AckPerBatch, false, "e", "f")},
	}
	co := frameCoalescer{}
	acks, err := co.split(wire.PublishAck{Shard: 3, Offset: 100, Count: 6}, parts)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.PublishAck{{Shard: 3, Offset: 100, Count: 1}, {Shard: 3, Offset: 101, Count: 3}, {Shard: 3, Offset: 104, Count: 2}}
	if fmt.Sprint(acks) != fmt.Sprint(want) {
		t.Fatalf("split = %v, want %v", acks, want)
	}
	for _, bad := range []wire.PublishAck{{Offset: 100, Count: 5}, {Offset: 100, Count: 7}, {Offset: 100, Count: 6, Duplicate: true}} {
		if _, err := co.split(bad, parts); !errors.Is(err, &wire.Error{Code: wire.CodeProtocolViolation}) {
			t.Errorf("split of %+v: %v, want a protocol violation", bad, err)
		}
	}
}

// TestCoalescerProperty drains random queues of publishes the way the
// publish-stream actor does and checks every frame: it decodes; a merged
// one holds only publishes that may merge, with the head's key and mode,
// within the limits; take stops only where merging one more would break a
// rule; the records of all frames are every publish's, once, in queue
// order; and each publish's share of its frame's ack is its own records'
// offsets. Encoding leaves the publishes' own frames untouched.
func TestCoalescerProperty(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		lim := coalesceLimits{records: 1 + r.IntN(12), bytes: 20 + r.IntN(600)}
		co := frameCoalescer{limits: lim}
		var queue []pendingFrame
		var want []string
		var originals [][]byte
		for i := range 1 + r.IntN(40) {
			key := []string{"", "", "", "a", "b"}[r.IntN(5)]
			ack := []wire.AckMode{wire.AckPerBatch, wire.AckPerBatch, wire.AckPerBatch, wire.AckNone}[r.IntN(4)]
			payloads := make([]string, 1+r.IntN(4))
			for j := range payloads {
				payloads[j] = fmt.Sprintf("%d.%d.%s", i, j, bytes.Repeat([]byte("p"), r.IntN(120)))
			}
			req := coalesceReq(key, ack, r.IntN(8) == 0, payloads...)
			queue = append(queue, pendingFrame{req: req})
			want = append(want, payloads...)
			originals = append(originals, bytes.Clone(req.frames[0]))
		}
		all := queue
		var got []string
		next := uint64(r.IntN(1000))
		for len(queue) > 0 {
			n := co.take(queue)
			if n < 1 || n > len(queue) {
				t.Fatalf("seed %d: take = %d of %d", seed, n, len(queue))
			}
			parts := queue[:n]
			head := parts[0].req
			frame := co.encode(parts)
			p, recs := decodeFrame(t, frame)
			records, size := 0, 0
			for _, part := range parts {
				records += int(part.req.count)
				size += part.req.recBytes
			}
			if int(p.Count) != records || len(recs) != records {
				t.Fatalf("seed %d: frame of %d records (%d decoded), its publishes hold %d", seed, p.Count, len(recs), records)
			}
			if p.Ack != head.mode || p.Name != orders {
				t.Fatalf("seed %d: frame %+v, head mode %v", seed, p, head.mode)
			}
			if n > 1 {
				for _, part := range parts {
					if !part.req.mergeable() || !bytes.Equal(part.req.prefix(), head.prefix()) {
						t.Fatalf("seed %d: merged a publish that may not merge", seed)
					}
				}
				if records > lim.records || len(p.Records) > lim.bytes {
					t.Fatalf("seed %d: merged frame of %d records, %d bytes; limits %+v", seed, records, len(p.Records), lim)
				}
			}
			if n < len(queue) && head.mergeable() {
				nx := queue[n].req
				if nx.mergeable() && bytes.Equal(nx.prefix(), head.prefix()) &&
					records+int(nx.count) <= lim.records && size+nx.recBytes <= lim.bytes {
					t.Fatalf("seed %d: take stopped before a publish that fits", seed)
				}
			}
			acks, err := co.split(wire.PublishAck{Shard: 0, Offset: next, Count: p.Count}, parts)
			if err != nil {
				t.Fatalf("seed %d: split: %v", seed, err)
			}
			at := 0
			for i, part := range parts {
				if acks[i].Offset != next+uint64(at) || acks[i].Count != part.req.count {
					t.Fatalf("seed %d: part %d ack %+v, want offset %d count %d", seed, i, acks[i], next+uint64(at), part.req.count)
				}
				// The records at the part's offsets are the part's own.
				_, own := decodeFrame(t, part.req.frames[0])
				for j, rec := range own {
					if !bytes.Equal(recs[at+j].Payload, rec.Payload) || !bytes.Equal(recs[at+j].Key, rec.Key) {
						t.Fatalf("seed %d: record %d of part %d is %q, want %q", seed, j, i, recs[at+j].Payload, rec.Payload)
					}
				}
				at += int(part.req.count)
			}
			for _, rec := range recs {
				got = append(got, string(rec.Payload))
			}
			if n > 1 {
				// As the publish actor does once the frame is written: the
				// next merged frames are encoded over it, and must not
				// touch the parts' own frames (checked below).
				frameBuffers.put(frame)
			}
			next += uint64(p.Count)
			queue = queue[n:]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d: records\n%q\nwant\n%q", seed, got, want)
		}
		for i, f := range all {
			if !bytes.Equal(f.req.frames[0], originals[i]) {
				t.Fatalf("seed %d: encoding changed publish %d's own frame", seed, i)
			}
		}
	}
}

// holdWindow dials a client to srv (publish window 1) and writes one
// publish, left unanswered, so that what is published next queues behind
// it. It returns the client and that first frame.
func holdWindow(t *testing.T, srv *testServer, frames chan pubFrame, opts ...Option) (*Client, *PublishFuture, pubFrame) {
	t.Helper()
	srv.welcome.PublishWindow = 1
	srv.start()
	c := srv.dial(t, opts...)
	f0, err := c.PublishAsync(testCtx(t), orders, [][]byte{[]byte("p0")})
	if err != nil {
		t.Fatal(err)
	}
	// A lone publish is written at once, alone.
	fr0 := recv(t, frames)
	if fr0.p.Count != 1 {
		t.Fatalf("first frame holds %d records", fr0.p.Count)
	}
	return c, f0, fr0
}

// queuePlain publishes n one-record publishes p1..pn and waits until the
// publish stream has them queued.
func queuePlain(t *testing.T, c *Client, n int) []*PublishFuture {
	t.Helper()
	futs := make([]*PublishFuture, n)
	for i := range futs {
		var err error
		if futs[i], err = c.PublishAsync(testCtx(t), orders, [][]byte{[]byte(fmt.Sprint("p", i+1))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the publishes to queue", func() bool { return c.publishStats(t, orders).queued == n })
	return futs
}

// TestPublishCoalescesQueued: publishes queued behind a full window go out
// as one frame when the window opens; each future gets its own offset, and
// each holds its own bytes of the budget until the frame is answered.
func TestPublishCoalescesQueued(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	c, f0, fr0 := holdWindow(t, srv, frames)
	ctx := testCtx(t)
	futs := queuePlain(t, c, 6)

	fr0.ack(t, 0, 10)
	if ack, err := f0.Wait(ctx); err != nil || ack.Offset != 10 {
		t.Fatalf("first publish = %+v, %v", ack, err)
	}
	fr1 := recv(t, frames)
	if fr1.h.RequestID <= fr0.h.RequestID || fr1.p.Count != 6 {
		t.Fatalf("second frame id %d (first %d), %d records; want the 6 queued in one", fr1.h.RequestID, fr0.h.RequestID, fr1.p.Count)
	}
	for i, rec := range fr1.records(t) {
		if want := fmt.Sprint("p", i+1); string(rec.Payload) != want {
			t.Fatalf("record %d = %q, want %q", i, rec.Payload, want)
		}
	}
	held := int64(0)
	for _, f := range futs {
		held += int64(len(f.req.frames[0]))
	}
	if used, _ := c.s.budget.state(); used != held {
		t.Fatalf("budget holds %d bytes while the merged frame is unanswered, its publishes %d", used, held)
	}
	fr1.ack(t, 0, 11)
	for i, f := range futs {
		ack, err := f.Wait(ctx)
		if want := (PublishAck{Shard: 0, Offset: uint64(11 + i), Count: 1}); err != nil || !equalAck(ack, want) {
			t.Fatalf("publish %d = %+v, %v; want %+v", i+1, ack, err, want)
		}
	}
	if used, waiting := c.s.budget.state(); used != 0 || waiting != 0 {
		t.Fatalf("budget after the acks: %d held, %d waiting", used, waiting)
	}
}

// TestPublishCoalescedRefusal: a refusal of a merged frame goes to each of
// its publishes, as each would have got it alone; a publish that is invalid
// fails alone before it is queued, and the others are not held up.
func TestPublishCoalescedRefusal(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.MaxFrameBytes = 64 << 10
	frames := publishNode(t, srv)
	c, _, fr0 := holdWindow(t, srv, frames)
	ctx := testCtx(t)
	futs := queuePlain(t, c, 2)
	if _, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("bad")}, WithKey(make([]byte, wire.MaxKeyBytes+1))); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("publish with a key too long: %v, want ErrInvalidRequest", err)
	}
	if _, err := c.PublishAsync(ctx, orders, [][]byte{make([]byte, 65<<10)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("publish larger than the node's frame: %v, want ErrFrameTooLarge", err)
	}
	futs = append(futs, queueMore(t, c, 3, 2)...)

	fr0.ack(t, 0, 0)
	fr1 := recv(t, frames)
	if fr1.p.Count != 4 {
		t.Fatalf("merged frame of %d records, want the 4 valid ones", fr1.p.Count)
	}
	refusal := &wire.Error{Code: wire.CodeOverloaded, Message: "the shard's publish queue stayed full"}
	if _, err := fr1.st.Write(wire.AppendError(nil, fr1.h.RequestID, refusal)); err != nil {
		t.Fatal(err)
	}
	for i, f := range futs {
		_, err := f.Wait(ctx)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != refusal.Code || we.Message != refusal.Message || errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("publish %d: %v, want the node's refusal", i+1, err)
		}
	}
	// The stream goes on.
	f, err := c.PublishAsync(ctx, orders, [][]byte{[]byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, frames).ack(t, 0, 1)
	if ack, err := f.Wait(ctx); err != nil || ack.Offset != 1 {
		t.Fatalf("publish after the refusal = %+v, %v", ack, err)
	}
}

// queueMore publishes n more one-record publishes, named from first, and
// waits until the publish stream has queued of them total.
func queueMore(t *testing.T, c *Client, first, n int) []*PublishFuture {
	t.Helper()
	before := c.publishStats(t, orders).queued
	futs := make([]*PublishFuture, n)
	for i := range futs {
		var err error
		if futs[i], err = c.PublishAsync(testCtx(t), orders, [][]byte{[]byte(fmt.Sprint("p", first+i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the publishes to queue", func() bool { return c.publishStats(t, orders).queued == before+n })
	return futs
}

// TestPublishCoalesceLimits: merged frames stay within the records bytes
// the node's frame allows (half its max frame), a publish larger than that
// goes alone, and every publish gets the offsets of its own records.
func TestPublishCoalesceLimits(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.MaxFrameBytes = 64 << 10
	frames := publishNode(t, srv)
	c, _, fr0 := holdWindow(t, srv, frames)
	ctx := testCtx(t)
	limit := coalesceLimitsFor(64 << 10).bytes
	var futs []*PublishFuture
	var want []string
	for i := range 60 {
		size := 1000
		if i == 30 {
			size = limit + 1000 // over the merge limit, within the frame
		}
		payload := fmt.Sprintf("%03d%s", i, bytes.Repeat([]byte("x"), size))
		f, err := c.PublishAsync(ctx, orders, [][]byte{[]byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
		want = append(want, payload)
	}
	waitFor(t, "the publishes to queue", func() bool { return c.publishStats(t, orders).queued == 60 })
	fr0.ack(t, 0, 0)
	var got []string
	next := uint64(1)
	for len(got) < len(want) {
		f := recv(t, frames)
		recs := f.records(t)
		if f.p.Count > 1 && len(f.p.Records) > limit {
			t.Fatalf("merged frame of %d records holds %d bytes of records, limit %d", f.p.Count, len(f.p.Records), limit)
		}
		for _, r := range recs {
			if len(r.Payload) > limit && f.p.Count != 1 {
				t.Fatalf("the large publish shares a frame of %d records", f.p.Count)
			}
			got = append(got, string(r.Payload))
		}
		f.ack(t, 0, next)
		next += uint64(f.p.Count)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatal("records out of issue order")
	}
	for i, f := range futs {
		if ack, err := f.Wait(ctx); err != nil || ack.Offset != uint64(1+i) || ack.Count != 1 {
			t.Fatalf("publish %d = %+v, %v; want offset %d", i, ack, err, 1+i)
		}
	}
}

// TestPublishNotCoalesced: conditional, idempotent and AckPerMessage
// publishes queued behind a full window each keep their own frames.
func TestPublishNotCoalesced(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	c, _, fr0 := holdWindow(t, srv, frames)
	ctx := testCtx(t)
	p := c.NewProducer(orders, 9)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 2 {
		wg.Add(3)
		go func() {
			defer wg.Done()
			_, err := c.PublishIf(ctx, orders, [][]byte{[]byte(fmt.Sprint("if", i))}, 0)
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := p.Publish(ctx, [][]byte{[]byte(fmt.Sprint("idem", i))})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := c.PublishBatch(ctx, orders, [][]byte{[]byte(fmt.Sprint("m", i, "a")), []byte(fmt.Sprint("m", i, "b"))}, WithAck(AckPerMessage))
			errs <- err
		}()
	}
	// Two conditional frames, two idempotent ones (one, then the next
	// sequence once it is answered), four per-message ones.
	waitFor(t, "the publishes to queue", func() bool { return c.publishStats(t, orders).queued >= 7 })
	fr0.ack(t, 0, 0)
	next := uint64(1)
	for range 8 {
		f := recv(t, frames)
		if f.p.Count != 1 {
			t.Fatalf("a %+v frame holds %d records: merged", f.p, f.p.Count)
		}
		f.ack(t, 0, next)
		next++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestPublishCoalescedLost: the publishes of a merged frame written and
// unanswered when the connection is lost each fail in doubt.
func TestPublishCoalescedLost(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	c, f0, fr0 := holdWindow(t, srv, frames)
	first := nextConn(t, srv)
	ctx := testCtx(t)
	futs := queuePlain(t, c, 3)
	fr0.ack(t, 0, 0)
	if _, err := f0.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if fr1 := recv(t, frames); fr1.p.Count != 3 {
		t.Fatalf("merged frame of %d records", fr1.p.Count)
	}
	drop(first)
	for i, f := range futs {
		if _, err := f.Wait(ctx); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("publish %d in flight at the loss: %v, want ErrOutcomeUnknown", i+1, err)
		}
	}
	if used, waiting := c.s.budget.state(); used != 0 || waiting != 0 {
		t.Fatalf("budget after the loss: %d held, %d waiting", used, waiting)
	}
}

// TestPublishCoalescedDrainRefusedResent: a merged frame the node refuses
// with shutting_down was not applied: its publishes go out again on the
// next connection, in order, and each gets its own offsets there.
func TestPublishCoalescedDrainRefusedResent(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	c, f0, fr0 := holdWindow(t, srv, frames)
	nextConn(t, srv)
	ctx := testCtx(t)
	futs := queuePlain(t, c, 4)
	fr0.ack(t, 0, 0)
	if _, err := f0.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	fr1 := recv(t, frames)
	if fr1.p.Count != 4 {
		t.Fatalf("merged frame of %d records", fr1.p.Count)
	}
	_, _ = fr1.st.Write(wire.AppendError(nil, fr1.h.RequestID, wire.Errorf(wire.CodeShuttingDown, "draining")))
	nextConn(t, srv)
	var recs []wire.Record
	next := uint64(50)
	for len(recs) < 4 {
		f := recv(t, frames)
		recs = append(recs, f.records(t)...)
		f.ack(t, 0, next)
		next += uint64(f.p.Count)
	}
	for i, r := range recs {
		if want := fmt.Sprint("p", i+1); string(r.Payload) != want {
			t.Fatalf("resent record %d = %q, want %q", i, r.Payload, want)
		}
	}
	for i, f := range futs {
		if ack, err := f.Wait(ctx); err != nil || ack.Offset != uint64(50+i) {
			t.Fatalf("publish %d = %+v, %v; want offset %d", i+1, ack, err, 50+i)
		}
	}
}

// TestAppendPublishFrame: the client's in-place encoding of a Publish frame
// is wire.AppendPublish's, and reports the size of the records block that
// ends it.
func TestAppendPublishFrame(t *testing.T) {
	payloads := [][]byte{[]byte("one"), bytes.Repeat([]byte("2"), 300)}
	for _, p := range []wire.Publish{
		{Name: orders, Ack: wire.AckPerBatch, Key: []byte("k")},
		{Name: orders, Ack: wire.AckNone, Shard: wire.AnyShard},
		{Name: orders, Ack: wire.AckPerBatch, Conditional: true, ExpectedOffset: 7},
		{Name: orders, Ack: wire.AckPerBatch, Idempotent: true, ProducerID: 9, Sequence: 3, Shard: 2},
	} {
		for _, rs := range [][]wire.Record{
			{{Payload: payloads[0]}},
			{{Key: []byte("k"), Headers: []wire.RecordHeader{{Key: "h", Value: []byte("v")}}, Payload: payloads[0]},
				{Key: []byte("k"), Headers: []wire.RecordHeader{{Key: "h", Value: []byte("v")}}, Payload: payloads[1]}},
		} {
			pls := make([][]byte, len(rs))
			for i := range rs {
				pls[i] = rs[i].Payload
			}
			got, n := appendPublishFrame(p, rs[0].Key, rs[0].Headers, pls)
			if a := testing.AllocsPerRun(10, func() { appendPublishFrame(p, rs[0].Key, rs[0].Headers, pls) }); a != 1 {
				t.Fatalf("appendPublishFrame made %v allocations, want 1 (the frame)", a)
			}
			want := p
			want.Records = wire.AppendRecords(nil, rs)
			want.Count = uint32(len(rs))
			if exp := wire.AppendPublish(nil, 0, want); !bytes.Equal(got, exp) {
				t.Fatalf("appendPublishFrame(%+v) = %x\nwant %x", p, got, exp)
			}
			if n != len(want.Records) || !bytes.Equal(got[len(got)-n:], want.Records) {
				t.Fatalf("records size %d, want %d at the end of the frame", n, len(want.Records))
			}
		}
	}
}

// TestCloseDeliversQueuedUnackedPublishes: AckNone publishes made with
// PublishAsync just before Close, some still queued for the publish
// stream's next write, are written before Close drains the stream: the
// node gets every record.
func TestCloseDeliversQueuedUnackedPublishes(t *testing.T) {
	srv := newTestServer(t)
	const n = 300
	received := make(chan int, 1)
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		records := 0
		for {
			p, err := wire.DecodePublish(f.Body)
			if err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			records += int(p.Count)
			if f, err = wire.ReadFrame(st, wire.DefaultMaxFrameBytes); err != nil {
				_ = st.Close()
				received <- records
				return
			}
		}
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	// The first publish opens the stream; the rest follow without waiting.
	if _, err := c.Publish(ctx, orders, []byte("first"), WithAck(AckNone)); err != nil {
		t.Fatal(err)
	}
	for i := range n - 1 {
		if _, err := c.PublishAsync(ctx, orders, [][]byte{[]byte(fmt.Sprint(i))}, WithAck(AckNone)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-received:
		if got != n {
			t.Fatalf("node got %d records, want %d", got, n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node's stream did not end")
	}
}
