package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// logNode scripts a node that keeps each shard's tail and checks
// conditional and idempotent publishes the way the node does: a conditional
// publish is written only at the expected tail (condition_failed with the
// tail otherwise); an idempotent one must carry the producer's next sequence
// on the shard (sequence_gap with the expected one otherwise), and a re-send
// of a written sequence is answered with its original offsets, Duplicate
// set. dropAck, when set, withholds the ack of a written publish once (a
// lost ack); refuse, when set, answers a publish with an error instead.
type logNode struct {
	mu struct {
		sync.Mutex
		tails map[uint32]uint64
		// next is each (producer, shard)'s next expected sequence.
		next map[[2]uint64]uint64
		// written maps (producer, shard, sequence) to its ack.
		written map[[3]uint64]wire.PublishAck
		// frames are every Publish received.
		frames []wire.Publish
		// dropAck makes the next written publish go unanswered.
		dropAck bool
		// refuse, if set, answers the next publish.
		refuse *wire.Error
	}
}

func newLogNode(t *testing.T, srv *testServer) *logNode {
	n := &logNode{}
	n.mu.tails = map[uint32]uint64{}
	n.mu.next = map[[2]uint64]uint64{}
	n.mu.written = map[[3]uint64]wire.PublishAck{}
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		for {
			p, err := wire.DecodePublish(f.Body)
			if err != nil {
				t.Errorf("decode publish: %v", err)
				return
			}
			if answer := n.apply(p, f.Header.RequestID); answer != nil {
				if _, err := st.Write(answer); err != nil {
					return
				}
			}
			if f, err = wire.ReadFrame(st, wire.DefaultMaxFrameBytes); err != nil {
				return
			}
		}
	}
	return n
}

// apply handles one publish and returns the answer (nil: none).
func (n *logNode) apply(p wire.Publish, id uint64) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.frames = append(n.mu.frames, p)
	if e := n.mu.refuse; e != nil {
		n.mu.refuse = nil
		return wire.AppendError(nil, id, e)
	}
	tail := n.mu.tails[p.Shard]
	if p.Conditional && p.ExpectedOffset != tail {
		return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeConditionFailed, Message: "moved", Detail: tail})
	}
	if p.Idempotent {
		pk := [2]uint64{p.ProducerID, uint64(p.Shard)}
		next := max(n.mu.next[pk], 1)
		switch {
		case p.Sequence < next:
			ack, ok := n.mu.written[[3]uint64{p.ProducerID, uint64(p.Shard), p.Sequence}]
			if !ok {
				return wire.AppendError(nil, id, wire.Errorf(wire.CodeDuplicateSequence, "too old"))
			}
			ack.Duplicate = true
			return wire.AppendPublishAck(nil, id, ack)
		case p.Sequence > next:
			return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeSequenceGap, Message: "gap", Detail: next})
		}
		n.mu.next[pk] = next + 1
	}
	ack := wire.PublishAck{Shard: p.Shard, Offset: tail, Count: p.Count}
	n.mu.tails[p.Shard] = tail + uint64(p.Count)
	if p.Idempotent {
		n.mu.written[[3]uint64{p.ProducerID, uint64(p.Shard), p.Sequence}] = ack
	}
	if n.mu.dropAck {
		n.mu.dropAck = false
		return nil
	}
	return wire.AppendPublishAck(nil, id, ack)
}

// last returns the last Publish received.
func (n *logNode) last() wire.Publish {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.frames[len(n.mu.frames)-1]
}

func TestPublishIf(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 4, Durable: true})
	node := newLogNode(t, srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	key := keyFor(t, 2, 4, wire.RoutingHash)

	res, err := c.PublishIf(ctx, orders, [][]byte{[]byte("a"), []byte("b")}, 0, WithKey(key))
	if err != nil || res != (ConditionalResult{Written: true, Shard: 2, Offset: 0}) {
		t.Fatalf("first conditional publish = %+v, %v", res, err)
	}
	if p := node.last(); !p.Conditional || p.ExpectedOffset != 0 || p.Shard != 2 || p.Ack != wire.AckPerBatch || string(p.Key) != string(key) {
		t.Fatalf("frame = %+v", p)
	}
	// A writer that expects the old tail is refused with the new one.
	res, err = c.PublishIf(ctx, orders, [][]byte{[]byte("c")}, 0, WithKey(key))
	if err != nil || res != (ConditionalResult{Written: false, Shard: 2, Tail: 2}) {
		t.Fatalf("stale conditional publish = %+v, %v", res, err)
	}
	// The refusal consumed no offset.
	res, err = c.PublishIf(ctx, orders, [][]byte{[]byte("c")}, res.Tail, WithKey(key))
	if err != nil || !res.Written || res.Offset != 2 {
		t.Fatalf("conditional publish at the tail = %+v, %v", res, err)
	}
	// Other refusals are errors.
	node.mu.Lock()
	node.mu.refuse = wire.Errorf(wire.CodeInvalidRequest, "conditional publishes need a durable stream")
	node.mu.Unlock()
	if _, err := c.PublishIf(ctx, orders, [][]byte{[]byte("d")}, 3, WithKey(key)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("refused conditional publish: %v, want ErrInvalidRequest", err)
	}
	// Headers are an option as for every publish; without WithKey the batch
	// goes to shard 0, unkeyed.
	res, err = c.PublishIf(ctx, orders, [][]byte{[]byte("e")}, 0, WithHeaders(Header{Key: "h", Value: []byte("v")}))
	if err != nil || res != (ConditionalResult{Written: true, Shard: 0, Offset: 0}) {
		t.Fatalf("unkeyed conditional publish = %+v, %v", res, err)
	}
	var rec wire.Record
	if p := node.last(); len(p.Key) != 0 || !wire.NewRecordIter(p.Records).Next(&rec) || len(rec.Key) != 0 || fmt.Sprintf("%s", rec.Headers) != "[{h v}]" {
		t.Fatalf("unkeyed conditional frame = %+v, record %+v", p, rec)
	}
	// A conditional publish is one acked batch.
	node.mu.Lock()
	frames := len(node.mu.frames)
	node.mu.Unlock()
	if _, err := c.PublishIf(ctx, orders, [][]byte{[]byte("f")}, 1, WithKey(key), WithAck(AckNone)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("conditional publish with AckNone: %v, want ErrInvalidRequest", err)
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	if len(node.mu.frames) != frames {
		t.Fatal("a conditional publish with AckNone was sent")
	}
}

func TestProducerSequences(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 4, Durable: true})
	node := newLogNode(t, srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	ka, kb := keyFor(t, 1, 4, wire.RoutingHash), keyFor(t, 3, 4, wire.RoutingHash)
	p := c.NewProducer(orders, 77)

	publish := func(key []byte, payload string) PublishAck {
		t.Helper()
		ack, err := p.Publish(ctx, [][]byte{[]byte(payload)}, WithKey(key), WithHeaders(Header{Key: "h", Value: []byte("v")}))
		if err != nil {
			t.Fatalf("Publish %s: %v", payload, err)
		}
		return ack
	}
	// Sequences are per shard, from 1.
	publish(ka, "a1")
	publish(kb, "b1")
	a2 := publish(ka, "a2")
	if f := node.last(); !f.Idempotent || f.ProducerID != 77 || f.Sequence != 2 || f.Shard != 1 {
		t.Fatalf("frame = %+v, want producer 77 sequence 2 on shard 1", f)
	}
	if p.Sequence(1) != 2 || p.Sequence(3) != 1 || p.Sequence(0) != 0 {
		t.Fatalf("sequences %d %d %d, want 2 1 0", p.Sequence(1), p.Sequence(3), p.Sequence(0))
	}

	// A lost ack: the caller's context ends, the outcome is unknown, and
	// the re-send with the same sequence is recognised.
	node.mu.Lock()
	node.mu.dropAck = true
	node.mu.Unlock()
	short, cancel := context.WithCancel(ctx)
	go func() {
		waitFor(t, "the publish to be in flight", func() bool { return c.shardPublishStats(t, orders, 1).inflight == 1 })
		cancel()
	}()
	_, err := p.Publish(short, [][]byte{[]byte("a3")}, WithKey(ka))
	var pe *ProducerError
	if !errors.As(err, &pe) || pe.Shard != 1 || pe.Sequence != 3 || !errors.Is(err, context.Canceled) {
		t.Fatalf("publish with a lost ack: %v, want a *ProducerError for sequence 3 on shard 1", err)
	}
	ack, err := p.PublishSequence(ctx, pe.Sequence, [][]byte{[]byte("a3")}, WithKey(ka))
	if err != nil || !ack.Duplicate || ack.Shard != 1 || ack.Offset != a2.Offset+1 {
		t.Fatalf("re-send = %+v, %v; want a duplicate at offset %d", ack, err, a2.Offset+1)
	}
	// An older written sequence too.
	if ack, err := p.PublishSequence(ctx, 2, [][]byte{[]byte("a2")}, WithKey(ka)); err != nil || !ack.Duplicate || ack.Offset != a2.Offset {
		t.Fatalf("re-send of sequence 2 = %+v, %v", ack, err)
	}
	if p.Sequence(1) != 3 {
		t.Fatalf("sequence after re-sends = %d, want 3", p.Sequence(1))
	}

	// Resume after an application restart: a new producer with the same id
	// picks up from the restored sequence.
	p2 := c.NewProducer(orders, 77)
	p2.SetSequence(1, 3)
	if ack, err := p2.Publish(ctx, [][]byte{[]byte("a4")}, WithKey(ka)); err != nil || ack.Duplicate || node.last().Sequence != 4 {
		t.Fatalf("publish after SetSequence = %+v, %v (sequence %d)", ack, err, node.last().Sequence)
	}

	// A gap: the node expects an earlier sequence; nothing was written and
	// the producer numbers the next publish from what the node expects.
	p2.SetSequence(3, 5)
	_, err = p2.Publish(ctx, [][]byte{[]byte("b?")}, WithKey(kb))
	if !errors.As(err, &pe) || pe.Sequence != 6 || !errors.Is(err, ErrSequenceGap) {
		t.Fatalf("publish past a gap: %v, want ErrSequenceGap for sequence 6", err)
	}
	var we *Error
	if errors.As(err, &we); we.Detail != 2 || p2.Sequence(3) != 1 {
		t.Fatalf("gap detail %d, sequence now %d; want 2 and 1", we.Detail, p2.Sequence(3))
	}
	if ack, err := p2.Publish(ctx, [][]byte{[]byte("b2")}, WithKey(kb)); err != nil || node.last().Sequence != 2 || ack.Shard != 3 {
		t.Fatalf("publish after the gap = %+v, %v", ack, err)
	}

	// A refusal that wrote nothing gives the sequence back.
	node.mu.Lock()
	node.mu.refuse = wire.Errorf(wire.CodePermissionDenied, "no")
	node.mu.Unlock()
	if _, err := p2.Publish(ctx, [][]byte{[]byte("b3")}, WithKey(kb)); !errors.Is(err, ErrPermissionDenied) || p2.Sequence(3) != 2 {
		t.Fatalf("refused publish: %v, sequence %d; want ErrPermissionDenied and 2", err, p2.Sequence(3))
	}

	// Producers publish one acked batch.
	if _, err := p.Publish(ctx, [][]byte{[]byte("x")}, WithKey(ka), WithAck(AckNone)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("AckNone producer publish: %v", err)
	}
	if _, err := p.PublishSequence(ctx, 0, [][]byte{[]byte("x")}, WithKey(ka)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("sequence 0: %v", err)
	}
}
