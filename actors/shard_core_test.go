package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

func publishN(c *shardCore, counts ...uint32) []storage.Batch {
	var out []storage.Batch
	for _, n := range counts {
		out = append(out, c.admit(pendingPublish{batch: storage.Batch{Count: n, Records: make([]byte, 10*n)}}))
	}
	return out
}

func TestShardCoreAssignsContiguousOffsets(t *testing.T) {
	c := newShardCore(3, 0, 100, 16, 0)
	bs := publishN(c, 2, 5, 1)
	want := []uint64{100, 102, 107}
	for i, b := range bs {
		if b.Base != want[i] {
			t.Fatalf("batch %d base %d, want %d", i, b.Base, want[i])
		}
	}
	if c.tail != 108 || c.committed != 100 {
		t.Fatalf("tail %d committed %d", c.tail, c.committed)
	}
	// A commit covers only whole batches up to Through, in order.
	done := c.commitThrough(107)
	if len(done) != 2 || c.committed != 107 || len(c.pending) != 1 {
		t.Fatalf("done %d committed %d pending %d", len(done), c.committed, len(c.pending))
	}
	if done[1].section.Base() != 102 || done[1].section.Count() != 5 || done[1].section.Head[3] != 3 {
		t.Fatalf("section %+v", done[1].section.Head)
	}
	// Failing the rest rewinds the tail so no gap is left.
	failed := c.failPending()
	if len(failed) != 1 || c.tail != 107 {
		t.Fatalf("failed %d tail %d", len(failed), c.tail)
	}
}

func TestSectionRingFindAndEvict(t *testing.T) {
	r := sectionRing{maxRecords: 8, maxBytes: 0}
	base := uint64(0)
	for _, n := range []uint32{2, 3, 1, 4} {
		r.push(wire.NewSection(0, base, 0, n, make([]byte, n)))
		base += uint64(n)
	}
	// 10 records over an 8-record bound: [0,2) was evicted; the ring holds
	// [2,5) [5,6) [6,10).
	for off, want := range map[uint64]uint64{0: 0, 1: 0, 2: 2, 4: 2, 5: 5, 6: 6, 9: 6, 10: 0} {
		s := r.find(off)
		switch {
		case want == 0 && s != nil:
			t.Fatalf("find(%d) = %d, want none", off, s.Base())
		case want != 0 && (s == nil || s.Base() != want):
			t.Fatalf("find(%d) wrong: %v", off, s)
		}
	}
	// The byte bound evicts too, but never the newest section.
	rb := sectionRing{maxRecords: 100, maxBytes: 5}
	rb.push(wire.NewSection(0, 0, 0, 1, make([]byte, 4)))
	rb.push(wire.NewSection(0, 1, 0, 1, make([]byte, 9)))
	if len(rb.secs) != 1 || rb.secs[0].Base() != 1 {
		t.Fatalf("byte-bounded ring holds %d sections", len(rb.secs))
	}
}

func TestPumpRespectsCreditWindow(t *testing.T) {
	c := newShardCore(0, 0, 0, 1024, 0)
	publishN(c, 1, 1, 1, 1, 1)
	c.commitThrough(5)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 2, 0)
	secs, _, read, _ := c.pump(sub)
	if read || len(secs) != 2 || sub.next != 2 || sub.inEntries != 2 {
		t.Fatalf("first pump: %d sections, read %v, next %d", len(secs), read, sub.next)
	}
	// No credit, no push: the shard does nothing for this subscriber.
	if secs, _, _, _ := c.pump(sub); len(secs) != 0 {
		t.Fatalf("pushed %d sections without credit", len(secs))
	}
	c.credit(sub, 1, 10)
	if secs, _, _, _ := c.pump(sub); len(secs) != 1 || sub.next != 3 {
		t.Fatalf("after one credit: %d sections, next %d", len(secs), sub.next)
	}
}

func TestPumpByteBoundLetsOversizeBatchIntoEmptyWindow(t *testing.T) {
	c := newShardCore(0, 0, 0, 1024, 0)
	c.admit(pendingPublish{batch: storage.Batch{Count: 1, Records: make([]byte, 100)}})
	c.admit(pendingPublish{batch: storage.Batch{Count: 1, Records: make([]byte, 100)}})
	c.commitThrough(2)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 10, 50)
	secs, _, _, _ := c.pump(sub)
	if len(secs) != 1 {
		t.Fatalf("oversize batch into empty window: pushed %d, want 1", len(secs))
	}
	if secs, _, _, _ := c.pump(sub); len(secs) != 0 {
		t.Fatal("second oversize batch pushed while the first is in flight")
	}
	c.credit(sub, 1, 100)
	if secs, _, _, _ := c.pump(sub); len(secs) != 1 {
		t.Fatal("second batch not pushed after credit returned")
	}
}

func TestPumpSendsSubscriberToStorageBelowTheRing(t *testing.T) {
	c := newShardCore(0, 0, 0, 3, 0)
	publishN(c, 1, 1, 1, 1)
	c.commitThrough(4) // the ring keeps [1,4)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 10, 0)
	secs, _, read, _ := c.pump(sub)
	if !read || len(secs) != 0 || !sub.reading {
		t.Fatalf("want a history read, got %d sections read=%v", len(secs), read)
	}
	// While reading, the shard pushes nothing even as records commit.
	publishN(c, 1)
	c.commitThrough(5)
	if secs, _, _, _ := c.pump(sub); len(secs) != 0 {
		t.Fatal("pushed to a reading subscription")
	}
	// Back from storage at offset 2 (the ring now keeps [2,5)): the ring
	// takes over with no gap.
	sub.reading, sub.next = false, 2
	secs, _, read, _ = c.pump(sub)
	if read || len(secs) != 3 || secs[0].Base() != 2 || sub.next != 5 {
		t.Fatalf("resume: %d sections, read %v, next %d", len(secs), read, sub.next)
	}
}

func TestSkipMissingJumpsToOldestRetained(t *testing.T) {
	c := newShardCore(0, 0, 0, 2, 0)
	publishN(c, 1, 1, 1, 1)
	c.commitThrough(4)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 10, 0)
	c.skipMissing(sub)
	if sub.next != 2 {
		t.Fatalf("next %d, want 2 (the ring's oldest)", sub.next)
	}
}

func TestResolveStart(t *testing.T) {
	c := newShardCore(0, 2, 7, 16, 0)
	if n, err := c.resolveStart(wire.StartLatest, 0); err != nil || n != 7 {
		t.Fatalf("latest: %d %v", n, err)
	}
	if n, err := c.resolveStart(wire.StartOffset, 7); err != nil || n != 7 {
		t.Fatalf("offset at tail: %d %v", n, err)
	}
	if n, err := c.resolveStart(wire.StartEarliest, 0); err != nil || n != 2 {
		t.Fatalf("earliest: %d %v, want the first retained offset 2", n, err)
	}
	if _, err := c.resolveStart(wire.StartOffset, 1); err == nil || err.Code != wire.CodeOffsetOutOfRange || err.Detail != 2 {
		t.Fatalf("below retention: %v, want offset_out_of_range naming 2", err)
	}
	_, err := c.resolveStart(wire.StartOffset, 8)
	if err == nil || err.Code != wire.CodeOffsetOutOfRange || err.Detail != 7 {
		t.Fatalf("past tail: %v", err)
	}
}

func TestConditionalPublish(t *testing.T) {
	c := newShardCore(0, 0, 5, 16, 0)
	c.durable = true
	d, err, _, _ := c.checkPublish(&PublishRequest{Conditional: true, ExpectedOffset: 5, Count: 1})
	if d != decideWrite || err != nil {
		t.Fatalf("expected tail: %v %v", d, err)
	}
	publishN(c, 1) // the tail moves to 6 while pending
	d, err, _, _ = c.checkPublish(&PublishRequest{Conditional: true, ExpectedOffset: 5, Count: 1})
	if d != decideRefuse || err.Code != wire.CodeConditionFailed || err.Detail != 6 {
		t.Fatalf("stale expectation: %v %v", d, err)
	}
	if c.tail != 6 {
		t.Fatalf("a refused conditional publish consumed offsets: tail %d", c.tail)
	}
	c.durable = false
	if d, err, _, _ := c.checkPublish(&PublishRequest{Conditional: true, ExpectedOffset: 6}); d != decideRefuse || err.Code != wire.CodeInvalidRequest {
		t.Fatalf("ephemeral: %v %v", d, err)
	}
}

func TestIdempotentSequences(t *testing.T) {
	c := newShardCore(0, 0, 0, 16, 0)
	idem := func(seq uint64) *PublishRequest {
		return &PublishRequest{Idempotent: true, ProducerID: 7, Sequence: seq, Count: 2}
	}
	write := func(seq uint64) storage.Batch {
		t.Helper()
		if d, err, _, _ := c.checkPublish(idem(seq)); d != decideWrite || err != nil {
			t.Fatalf("seq %d: %v %v", seq, d, err)
		}
		b := c.admit(pendingPublish{batch: storage.Batch{Count: 2}})
		c.admitProducer(7, seq, b)
		return b
	}
	if d, err, _, _ := c.checkPublish(idem(0)); d != decideRefuse || err.Code != wire.CodeInvalidRequest {
		t.Fatal("sequence 0 accepted")
	}
	if d, err, _, _ := c.checkPublish(idem(2)); d != decideRefuse || err.Code != wire.CodeSequenceGap || err.Detail != 1 {
		t.Fatalf("gap: %v %v", d, err)
	}
	b1 := write(1)
	// A re-send while the original is pending attaches to it.
	if d, _, _, dupOf := c.checkPublish(idem(1)); d != decideDuplicate || dupOf != 0 {
		t.Fatalf("pending duplicate: %v %d", d, dupOf)
	}
	c.commitThrough(b1.End())
	// After commit it is answered with the original offsets.
	d, _, dup, dupOf := c.checkPublish(idem(1))
	if d != decideDuplicate || dupOf != -1 || dup.base != b1.Base || dup.count != 2 {
		t.Fatalf("committed duplicate: %v %+v %d", d, dup, dupOf)
	}
	for seq := uint64(2); seq <= producerMemory+2; seq++ {
		write(seq)
	}
	if d, err, _, _ := c.checkPublish(idem(1)); d != decideRefuse || err.Code != wire.CodeDuplicateSequence {
		t.Fatalf("forgotten duplicate: %v %v", d, err)
	}
	// The state survives its encoding (what a restarted shard reloads).
	p, err := decodeProducerState(c.producers[7].encode())
	if err != nil || p.lastSeq != producerMemory+2 || len(p.recent) != producerMemory {
		t.Fatalf("round trip: %+v %v", p, err)
	}
	if _, err := decodeProducerState([]byte{9}); err == nil {
		t.Fatal("malformed state decoded")
	}
}

// A live subscriber with no room for a new batch has overflowed: a durable
// shard ends it with lagged at the batch it missed; an ephemeral one skips
// the batch for it. Replay before it is live is never dropped.
func TestOverflowLagsDurableAndGapsEphemeral(t *testing.T) {
	for _, durable := range []bool{true, false} {
		c := newShardCore(0, 0, 0, 1024, 0)
		c.durable = durable
		publishN(c, 1, 1, 1)
		c.commitThrough(3)
		sub := c.addSub(&actor.PID{Id: "s"}, 0, 2, 0)
		// Replaying [0,3) with room for 2: waits, never drops.
		secs, _, _, lagged := c.pump(sub)
		if len(secs) != 2 || lagged || sub.live {
			t.Fatalf("replay: %d sections lagged=%v live=%v", len(secs), lagged, sub.live)
		}
		c.credit(sub, 2, 0)
		if secs, _, _, _ := c.pump(sub); len(secs) != 1 || !sub.live {
			t.Fatalf("catch-up: %d sections live=%v", len(secs), sub.live)
		}
		// Live now, with one batch in flight and room for one more.
		publishN(c, 1, 1)
		c.commitThrough(5)
		secs, _, _, lagged = c.pump(sub)
		switch {
		case durable && (len(secs) != 1 || !lagged || sub.next != 4):
			t.Fatalf("durable overflow: %d sections lagged=%v next=%d", len(secs), lagged, sub.next)
		case !durable && (len(secs) != 1 || lagged || sub.next != 5 || sub.skipped != 1):
			t.Fatalf("ephemeral overflow: %d sections lagged=%v next=%d skipped=%d", len(secs), lagged, sub.next, sub.skipped)
		}
	}
}

// drop_old pushes into a full live queue and marks the pushes as evicting;
// block pushes nothing more and blocks the shard until the subscriber has
// caught up.
func TestOverflowDropOldAndBlock(t *testing.T) {
	setup := func(policy wire.Overflow) (*shardCore, *subState) {
		c := newShardCore(0, 0, 0, 1024, 0)
		c.durable, c.overflow = true, policy
		sub := c.addSub(&actor.PID{Id: "s"}, 0, 2, 0)
		c.pump(sub) // live at the tail
		publishN(c, 1, 1, 1, 1)
		c.commitThrough(4)
		return c, sub
	}
	c, sub := setup(wire.OverflowDropOld)
	secs, evictFrom, read, lagged := c.pump(sub)
	if len(secs) != 4 || evictFrom != 2 || read || lagged || c.drops.Evicted != 2 || sub.inEntries != 2 {
		t.Fatalf("drop_old: %d sections evictFrom %d evicted %d in %d", len(secs), evictFrom, c.drops.Evicted, sub.inEntries)
	}

	c, sub = setup(wire.OverflowBlock)
	secs, _, _, lagged = c.pump(sub)
	if len(secs) != 2 || lagged || !c.blocked || c.unblock() {
		t.Fatalf("block: %d sections blocked %v", len(secs), c.blocked)
	}
	c.credit(sub, 2, 0)
	if secs, _, _, _ := c.pump(sub); len(secs) != 2 || !c.unblock() {
		t.Fatalf("block after credit: %d sections, still blocked %v", len(secs), c.blocked)
	}
	if c.drops != (DropCounts{}) {
		t.Fatalf("block counted drops: %+v", c.drops)
	}
}

// Rings share the node's replay total: a ring over it gives up its oldest
// sections (never its newest), and a released ring gives its bytes back.
func TestRingTotalBudget(t *testing.T) {
	total := NewBudget(100)
	a := sectionRing{maxRecords: 1000, total: total}
	b := sectionRing{maxRecords: 1000, total: total}
	for i := range 4 {
		a.push(wire.NewSection(0, uint64(i), 0, 1, make([]byte, 20)))
	}
	if total.Used() != 80 {
		t.Fatalf("used %d", total.Used())
	}
	b.push(wire.NewSection(0, 0, 0, 1, make([]byte, 30))) // 110 > 100: b gives up... only its newest, so it stays
	b.push(wire.NewSection(0, 1, 0, 1, make([]byte, 30)))
	if len(b.secs) != 1 || total.Used() != 110 {
		t.Fatalf("b holds %d sections, used %d", len(b.secs), total.Used())
	}
	a.push(wire.NewSection(0, 4, 0, 1, make([]byte, 20)))
	if total.Used() > 100 || a.find(4) == nil || a.find(0) != nil {
		t.Fatalf("after a's push: used %d, a holds %d sections", total.Used(), len(a.secs))
	}
	a.release()
	b.release()
	if total.Used() != 0 {
		t.Fatalf("released rings left %d bytes taken", total.Used())
	}
	if NewBudget(0) != nil || !(*Budget)(nil).TryAcquire(1<<40) {
		t.Fatal("a zero budget must be no budget")
	}
}
