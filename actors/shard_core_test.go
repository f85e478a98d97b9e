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
	c := newShardCore(3, 100, 16, 0)
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
	r := sectionRing{maxBatches: 3, maxBytes: 0}
	base := uint64(0)
	for _, n := range []uint32{2, 3, 1, 4} {
		r.push(wire.NewSection(0, base, 0, n, make([]byte, n)))
		base += uint64(n)
	}
	// [0,2) was evicted; the ring holds [2,5) [5,6) [6,10).
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
	rb := sectionRing{maxBatches: 100, maxBytes: 5}
	rb.push(wire.NewSection(0, 0, 0, 1, make([]byte, 4)))
	rb.push(wire.NewSection(0, 1, 0, 1, make([]byte, 9)))
	if len(rb.secs) != 1 || rb.secs[0].Base() != 1 {
		t.Fatalf("byte-bounded ring holds %d sections", len(rb.secs))
	}
}

func TestPumpRespectsCreditWindow(t *testing.T) {
	c := newShardCore(0, 0, 1024, 0)
	publishN(c, 1, 1, 1, 1, 1)
	c.commitThrough(5)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 2, 0)
	secs, read := c.pump(sub)
	if read || len(secs) != 2 || sub.next != 2 || sub.inEntries != 2 {
		t.Fatalf("first pump: %d sections, read %v, next %d", len(secs), read, sub.next)
	}
	// No credit, no push: the shard does nothing for this subscriber.
	if secs, _ := c.pump(sub); len(secs) != 0 {
		t.Fatalf("pushed %d sections without credit", len(secs))
	}
	c.credit(sub, 1, 10)
	if secs, _ := c.pump(sub); len(secs) != 1 || sub.next != 3 {
		t.Fatalf("after one credit: %d sections, next %d", len(secs), sub.next)
	}
}

func TestPumpByteBoundLetsOversizeBatchIntoEmptyWindow(t *testing.T) {
	c := newShardCore(0, 0, 1024, 0)
	c.admit(pendingPublish{batch: storage.Batch{Count: 1, Records: make([]byte, 100)}})
	c.admit(pendingPublish{batch: storage.Batch{Count: 1, Records: make([]byte, 100)}})
	c.commitThrough(2)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 10, 50)
	secs, _ := c.pump(sub)
	if len(secs) != 1 {
		t.Fatalf("oversize batch into empty window: pushed %d, want 1", len(secs))
	}
	if secs, _ := c.pump(sub); len(secs) != 0 {
		t.Fatal("second oversize batch pushed while the first is in flight")
	}
	c.credit(sub, 1, 100)
	if secs, _ := c.pump(sub); len(secs) != 1 {
		t.Fatal("second batch not pushed after credit returned")
	}
}

func TestPumpSendsSubscriberToStorageBelowTheRing(t *testing.T) {
	c := newShardCore(0, 0, 3, 0)
	publishN(c, 1, 1, 1, 1)
	c.commitThrough(4) // the ring keeps [1,4)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 10, 0)
	secs, read := c.pump(sub)
	if !read || len(secs) != 0 || !sub.reading {
		t.Fatalf("want a history read, got %d sections read=%v", len(secs), read)
	}
	// While reading, the shard pushes nothing even as records commit.
	publishN(c, 1)
	c.commitThrough(5)
	if secs, _ := c.pump(sub); len(secs) != 0 {
		t.Fatal("pushed to a reading subscription")
	}
	// Back from storage at offset 2 (the ring now keeps [2,5)): the ring
	// takes over with no gap.
	sub.reading, sub.next = false, 2
	secs, read = c.pump(sub)
	if read || len(secs) != 3 || secs[0].Base() != 2 || sub.next != 5 {
		t.Fatalf("resume: %d sections, read %v, next %d", len(secs), read, sub.next)
	}
}

func TestSkipMissingJumpsToOldestRetained(t *testing.T) {
	c := newShardCore(0, 0, 2, 0)
	publishN(c, 1, 1, 1, 1)
	c.commitThrough(4)
	sub := c.addSub(&actor.PID{Id: "s"}, 0, 10, 0)
	c.skipMissing(sub)
	if sub.next != 2 {
		t.Fatalf("next %d, want 2 (the ring's oldest)", sub.next)
	}
}

func TestResolveStart(t *testing.T) {
	c := newShardCore(0, 7, 16, 0)
	if n, err := c.resolveStart(wire.StartLatest, 0); err != nil || n != 7 {
		t.Fatalf("latest: %d %v", n, err)
	}
	if n, err := c.resolveStart(wire.StartOffset, 7); err != nil || n != 7 {
		t.Fatalf("offset at tail: %d %v", n, err)
	}
	_, err := c.resolveStart(wire.StartOffset, 8)
	if err == nil || err.Code != wire.CodeOffsetOutOfRange || err.Detail != 7 {
		t.Fatalf("past tail: %v", err)
	}
}

func TestShardForKey(t *testing.T) {
	if ShardForKey(nil, 8) != 0 || ShardForKey([]byte("k"), 1) != 0 {
		t.Fatal("unkeyed or single-shard publishes must go to shard 0")
	}
	seen := map[uint32]bool{}
	for i := range 200 {
		s := ShardForKey([]byte{byte(i), byte(i >> 8)}, 4)
		if s >= 4 {
			t.Fatalf("shard %d out of range", s)
		}
		seen[s] = true
		if ShardForKey([]byte{byte(i), byte(i >> 8)}, 4) != s {
			t.Fatal("routing is not deterministic")
		}
	}
	if len(seen) != 4 {
		t.Fatalf("200 keys reached only %d of 4 shards", len(seen))
	}
}
