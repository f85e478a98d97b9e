package actors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// coreHarness drives a groupCore against a MemoryLog that holds its
// metadata, with a clock the test moves.
type coreHarness struct {
	t    *testing.T
	log  *storage.MemoryLog
	core *groupCore
	now  time.Time
}

func newCoreHarness(t *testing.T, shards int, tail uint64, limits GroupLimits) *coreHarness {
	h := &coreHarness{t: t, log: storage.NewMemoryLog(storage.MemoryOptions{}), now: time.Unix(1_700_000_000, 0)}
	h.core = newGroupCore(7, "g", shards, limits)
	for _, s := range h.core.shards {
		s.tail = tail
	}
	return h
}

// flush commits the core's pending puts, as the coordinator does.
func (h *coreHarness) flush() {
	h.t.Helper()
	if err := h.log.Commit(nil, h.core.flushPuts()); err != nil {
		h.t.Fatal(err)
	}
}

// reload builds a new core from the stored state, as a restarted node does.
func (h *coreHarness) reload(tail uint64) {
	h.t.Helper()
	h.flush()
	c := newGroupCore(7, "g", len(h.core.shards), h.core.cfg)
	if _, err := c.load(func(fn func(k, v []byte) error) error { return h.log.ScanMeta(groupPrefix(7, "g"), fn) }); err != nil {
		h.t.Fatal(err)
	}
	for _, s := range c.shards {
		s.tail = tail
	}
	h.core = c
}

// poll claims like a pull consumer (no records are read: the log holds
// none in these tests, so every pick is taken as present).
func (h *coreHarness) poll(owner string, shard uint32, max int) []pick {
	picks := h.core.candidates([]uint32{shard}, max)
	h.core.takeRead(owner, picks, nil, h.now)
	for i := range picks {
		picks[i].attempts, _ = h.core.shards[picks[i].shard].offs.attemptsOf(picks[i].offset)
	}
	return picks
}

func offsetsOf(p []pick) []uint64 {
	out := make([]uint64, len(p))
	for i, x := range p {
		out[i] = x.offset
	}
	return out
}

func TestGroupCoreOutOfOrderAckNeverSkipsAGap(t *testing.T) {
	h := newCoreHarness(t, 1, 10, GroupLimits{})
	got := h.poll("", 0, 5)
	if !slices.Equal(offsetsOf(got), []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("claimed %v", offsetsOf(got))
	}
	if n, err := h.core.ack(0, []uint64{1, 3, 4}); err != nil || n != 3 {
		t.Fatalf("ack: %d %v", n, err)
	}
	if c := h.core.shards[0].committed; c != 0 {
		t.Fatalf("committed moved to %d past unacked offset 0", c)
	}
	h.core.ack(0, []uint64{0})
	if c := h.core.shards[0].committed; c != 2 {
		t.Fatalf("committed %d, want 2 (offset 2 is still unacked)", c)
	}
	// The state survives a restart: the acked-out-of-order offsets 3 and 4
	// stay settled, offset 2 comes back owed.
	h.reload(10)
	s := h.core.shards[0]
	if s.committed != 2 || s.next != 5 || !slices.Equal(s.owed, []uint64{2}) {
		t.Fatalf("after reload: committed %d next %d owed %v", s.committed, s.next, s.owed)
	}
	got = h.poll("", 0, 3)
	if !slices.Equal(offsetsOf(got), []uint64{2, 5, 6}) || got[0].attempts != 2 || got[1].attempts != 1 {
		t.Fatalf("after reload polled %+v", got)
	}
	h.core.ack(0, []uint64{2})
	if c := h.core.shards[0].committed; c != 5 {
		t.Fatalf("committed %d, want 5", c)
	}
	// Acks are idempotent; an offset never delivered is refused.
	if n, err := h.core.ack(0, []uint64{2}); err != nil || n != 0 {
		t.Fatalf("re-ack: %d %v", n, err)
	}
	if _, err := h.core.ack(0, []uint64{9}); err == nil || err.Code != wire.CodeNotDelivered {
		t.Fatalf("ack of undelivered offset: %v", err)
	}
}

func TestGroupCoreRedeliveryBeforeNewAndDeadLetters(t *testing.T) {
	h := newCoreHarness(t, 1, 100, GroupLimits{MaxAttempts: 3, Visibility: 10 * time.Second})
	h.poll("", 0, 2) // 0, 1
	if n, _ := h.core.nack(0, []uint64{1}, h.now); n != 1 {
		t.Fatalf("nack changed %d", n)
	}
	got := h.poll("", 0, 2)
	if !slices.Equal(offsetsOf(got), []uint64{1, 2}) || got[0].attempts != 2 {
		t.Fatalf("after nack polled %+v; want the nacked record first", got)
	}
	// Offset 0 is never answered: the visibility timeout redelivers it.
	h.now = h.now.Add(9 * time.Second)
	if n := h.core.expire(h.now); n != 0 {
		t.Fatalf("expired %d before the timeout", n)
	}
	h.now = h.now.Add(time.Second)
	// 0 (claimed at t0) lapses now; 1 and 2 were claimed at t0 too.
	if n := h.core.expire(h.now); n != 3 {
		t.Fatalf("expired %d, want 3", n)
	}
	got = h.poll("", 0, 3)
	if !slices.Equal(offsetsOf(got), []uint64{0, 1, 2}) {
		t.Fatalf("redelivered %v", offsetsOf(got))
	}
	if got[1].attempts != 3 {
		t.Fatalf("offset 1 attempts %d, want 3", got[1].attempts)
	}
	h.core.ack(0, []uint64{0, 2})
	// Offset 1 fails its third attempt: it is dead-lettered, and the cursor
	// moves past it.
	h.core.nack(0, []uint64{1}, h.now)
	s := h.core.shards[0]
	if _, ok := s.dead[1]; !ok || s.committed != 3 {
		t.Fatalf("dead %v committed %d", s.dead, s.committed)
	}
	list, more := h.core.deadLetters([]uint32{0}, 0, 0)
	if len(list) != 1 || more || list[0].Offset != 1 || list[0].Attempts != 3 || list[0].Reason != "nacked" {
		t.Fatalf("dead letters %+v", list)
	}
	// Dead letters survive a restart, and a redrive resets the attempts.
	h.reload(100)
	if n := h.core.redrive([]uint32{0}, nil); n != 1 {
		t.Fatalf("redrive %d", n)
	}
	got = h.poll("", 0, 2)
	if !slices.Equal(offsetsOf(got), []uint64{1, 3}) || got[0].attempts != 1 {
		t.Fatalf("after redrive polled %+v", got)
	}
	h.core.ack(0, []uint64{1})
	h.reload(100)
	if s := h.core.shards[0]; len(s.dead) != 0 || len(s.owed) != 1 || s.owed[0] != 3 || s.committed != 3 {
		t.Fatalf("after redrive and ack: dead %v owed %v committed %d", s.dead, s.owed, s.committed)
	}
}

func TestGroupCoreDiscardAndInFlightBound(t *testing.T) {
	h := newCoreHarness(t, 2, 50, GroupLimits{MaxAttempts: 1, MaxInFlight: 4})
	h.poll("", 0, 10)
	if h.core.claimCount != 4 {
		t.Fatalf("claims %d, want the bound 4", h.core.claimCount)
	}
	if got := h.poll("", 1, 10); len(got) != 0 {
		t.Fatalf("claimed %d past the bound", len(got))
	}
	h.core.nack(0, []uint64{0, 1}, h.now) // one attempt each: dead at once
	if n := h.core.discard([]uint32{0}, []uint64{1}); n != 1 {
		t.Fatalf("discard %d", n)
	}
	h.reload(50)
	s := h.core.shards[0]
	if len(s.dead) != 1 || s.committed != 2 {
		t.Fatalf("dead %v committed %d", s.dead, s.committed)
	}
}

func TestGroupCoreMembersSessionAndRebalance(t *testing.T) {
	h := newCoreHarness(t, 4, 100, GroupLimits{Session: 30 * time.Second})
	a := h.core.join("a", 10, h.now)
	if !slices.Equal(a.shards, []uint32{0, 1, 2, 3}) {
		t.Fatalf("lone member shards %v", a.shards)
	}
	h.now = h.now.Add(10 * time.Second)
	b := h.core.join("b", 10, h.now)
	if !slices.Equal(a.shards, []uint32{0, 1}) || !slices.Equal(b.shards, []uint32{2, 3}) {
		t.Fatalf("split %v %v", a.shards, b.shards)
	}
	picks := h.core.candidates(b.shards, 3)
	h.core.takeRead("b", picks, nil, h.now)
	// a heartbeats, b does not: b's session lapses 30 s after it joined.
	h.now = h.now.Add(25 * time.Second)
	a.lastSeen = h.now
	if gone := h.core.expireMembers(h.now); len(gone) != 0 {
		t.Fatalf("expired %v early", gone)
	}
	h.now = h.now.Add(5 * time.Second)
	gone := h.core.expireMembers(h.now)
	if len(gone) != 1 || gone[0].id != "b" {
		t.Fatalf("expired %+v", gone)
	}
	if !slices.Equal(a.shards, []uint32{0, 1, 2, 3}) {
		t.Fatalf("a did not take b's shards: %v", a.shards)
	}
	// b's claims are owed again, first in line.
	if s := h.core.shards[2]; len(s.owed) != 3 || s.offs.claims != 0 {
		t.Fatalf("b's claims: owed %v claims %d", s.owed, s.offs.claims)
	}
	// More members than shards: the extra ones get none.
	for _, id := range []string{"c", "d", "e", "f"} {
		h.core.join(id, 1, h.now)
	}
	idle := 0
	for _, m := range h.core.members {
		if len(m.shards) == 0 {
			idle++
		}
	}
	if idle != 1 {
		t.Fatalf("%d idle members, want 1 of 5", idle)
	}
	gen := h.core.generation
	h.reload(100)
	if h.core.generation != gen {
		t.Fatalf("generation %d after reload, want %d", h.core.generation, gen)
	}
}

func TestGroupCursorMintAndParse(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, 32)
	recs := []wire.GroupRecord{{Shard: 0, Offset: 5}, {Shard: 0, Offset: 6}, {Shard: 1, Offset: 2}, {Shard: 0, Offset: 9}}
	tok := cursorToken{stream: 7, group: groupHash("g"), epoch: 3, ranges: cursorRanges(recs)}
	b := mintCursor(secret, tok)
	got, err := parseCursor(secret, b)
	if err != nil {
		t.Fatal(err)
	}
	if got.epoch != 3 || got.stream != 7 || len(got.ranges) != 3 || got.ranges[0] != (cursorRangeOf{0, 5, 2}) {
		t.Fatalf("parsed %+v", got)
	}
	for name, bad := range map[string][]byte{
		"flipped":   append(append([]byte(nil), b[:10]...), append([]byte{b[10] ^ 1}, b[11:]...)...),
		"truncated": b[:len(b)-1],
		"empty":     nil,
		"other key": mintCursor(bytes.Repeat([]byte{2}, 32), tok),
	} {
		if _, err := parseCursor(secret, bad); err == nil || !errors.Is(err, &wire.Error{Code: wire.CodeInvalidCursor}) && err.Code != wire.CodeInvalidCursor {
			t.Errorf("%s cursor: %v", name, err)
		}
	}
}

// When retention deletes a long run of records the group never delivered
// while one of its claims is still open, settling that claim moves the
// committed cursor over the whole run at once: walking it an offset at a
// time would take as long as the run (here 2^40 offsets).
func TestGroupCoreAckSkipsRetainedRunAtOnce(t *testing.T) {
	h := newCoreHarness(t, 1, 10, GroupLimits{})
	picks := h.poll("m", 0, 6)
	if got := offsetsOf(picks); len(got) != 6 || got[5] != 5 {
		t.Fatalf("polled %v", got)
	}
	if _, err := h.core.ack(0, []uint64{0, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	const far = uint64(1) << 40
	s := h.core.shards[0]
	s.first, s.tail = far, far+10
	h.core.candidates([]uint32{0}, 1) // sees that retention moved first
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := h.core.ack(0, []uint64{5}); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("settling the last claim walks the deleted run an offset at a time")
	}
	if s.committed != far {
		t.Fatalf("committed %d, want %d", s.committed, far)
	}
}

// An ack is applied only once its staged writes are durable: until then
// its records stay claimed, a crash after the flush finds them settled, and
// a record dead-lettered while the commit ran stays a dead letter that a
// redrive gives back, across a restart too.
func TestGroupCoreAckAppliesOnceDurable(t *testing.T) {
	h := newCoreHarness(t, 1, 4, GroupLimits{MaxAttempts: 2, Visibility: 10 * time.Second})
	h.poll("", 0, 4)
	// Offset 1 on its last attempt (deadline +10 s), offset 0 too but
	// claimed later (deadline +15 s).
	h.core.nack(0, []uint64{1}, h.now)
	h.poll("", 0, 1)
	h.now = h.now.Add(5 * time.Second)
	h.core.nack(0, []uint64{0}, h.now)
	h.poll("", 0, 1)
	h.flush()
	stage, err := h.core.stageAck(0, []uint64{1})
	if err != nil {
		t.Fatal(err)
	}
	s := h.core.shards[0]
	if s.offs.claims != 4 || s.committed != 0 {
		t.Fatalf("staging changed the state: %d claims, committed %d", s.offs.claims, s.committed)
	}
	// A commit that fails leaves the records claimed: its writes are lost,
	// and the ack is staged again.
	h.core.flushPuts()
	h.core.unstageAck(0, []uint64{1}, stage)
	if stage, err = h.core.stageAck(0, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	h.flush() // now durable
	// Offset 1's visibility lapses before the ack is applied: a dead letter.
	h.now = h.now.Add(6 * time.Second)
	h.core.expire(h.now)
	if _, dead := s.dead[1]; !dead {
		t.Fatalf("offset 1 is not a dead letter: %v", s.dead)
	}
	if n := h.core.applyAck(0, []uint64{1}, stage); n != 0 {
		t.Fatalf("applied %d, want 0 (offset 1 is a dead letter)", n)
	}
	if n := h.core.redrive([]uint32{0}, []uint64{1}); n != 1 {
		t.Fatalf("redrove %d", n)
	}
	h.reload(4)
	if s := h.core.shards[0]; s.committed != 0 || !slices.Equal(s.owed, []uint64{0, 1, 2, 3}) {
		t.Fatalf("after a restart: committed %d, owed %v; the redriven dead letter 1 must be owed", s.committed, s.owed)
	}

	// A crash after the staged writes are durable, before the ack was
	// applied: the restarted group finds the records settled.
	h = newCoreHarness(t, 1, 3, GroupLimits{})
	h.poll("", 0, 3)
	if _, err := h.core.stageAck(0, []uint64{0, 2}); err != nil {
		t.Fatal(err)
	}
	h.reload(3)
	if s := h.core.shards[0]; s.committed != 1 || !slices.Equal(s.owed, []uint64{1}) {
		t.Fatalf("after the crash: committed %d, owed %v", s.committed, s.owed)
	}
}

// A crash after a staged cursor moved past a settled marker, before the
// writes that tidy it went: the restarted group deletes the marker with its
// first flush (found in review: it stayed in storage for good).
func TestGroupCoreLoadDeletesMarkersBehindTheCursor(t *testing.T) {
	h := newCoreHarness(t, 1, 4, GroupLimits{})
	h.poll("", 0, 4)
	h.flush()
	if _, err := h.core.stageAck(0, []uint64{2}); err != nil { // out of order: a marker
		t.Fatal(err)
	}
	if _, err := h.core.stageAck(0, []uint64{0, 1}); err != nil { // the run to 3: the cursor
		t.Fatal(err)
	}
	h.flush()
	marker := groupPrefix(7, "g")
	marker = append(marker, 'k', 0, 0, 0, 0)
	marker = binary.BigEndian.AppendUint64(marker, 2)
	if _, err := h.log.GetMeta(marker); err != nil {
		t.Fatalf("the out-of-order ack's marker: %v", err)
	}
	h.reload(4) // the crash: nothing was applied; reload flushes what load wrote
	if s := h.core.shards[0]; s.committed != 3 || !slices.Equal(s.owed, []uint64{3}) {
		t.Fatalf("after the crash: committed %d, owed %v", s.committed, s.owed)
	}
	h.flush()
	if _, err := h.log.GetMeta(marker); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the marker behind the cursor is still stored (%v)", err)
	}
}

// A seek settles everything below its position and forgets everything from
// it on: owed records and attempts go, dead letters below stay, those at
// or after go; a restart loads the same state. It is refused while records
// are claimed, acks staged or members joined, and clamped to the retained
// range.
func TestGroupCoreSeek(t *testing.T) {
	h := newCoreHarness(t, 2, 20, GroupLimits{MaxAttempts: 2})
	h.poll("", 0, 8) // 0..7 claimed
	h.core.ack(0, []uint64{0, 1, 5})
	h.core.nack(0, []uint64{2, 3, 4, 6, 7}, h.now) // owed, attempts 1
	h.poll("", 0, 2)                               // 2, 3 again
	h.core.nack(0, []uint64{2, 3}, h.now)          // dead letters: 2 and 3

	// Refused while a record is claimed (4, 6 and 7 are owed: claim 4).
	h.poll("", 0, 1) // 4
	if _, err := h.core.seek([]uint32{0}, []uint64{3}); err == nil || err.Code != wire.CodeGroupInUse {
		t.Fatalf("seek with a claim: %v", err)
	}
	h.core.nack(0, []uint64{4}, h.now) // its second attempt: a dead letter too
	// Staged acks refuse it too, members as well.
	h.poll("", 0, 1) // 6
	stage, _ := h.core.stageAck(0, []uint64{6})
	if _, err := h.core.seek([]uint32{0}, []uint64{3}); err == nil || err.Code != wire.CodeGroupInUse {
		t.Fatalf("seek with a staged ack: %v", err)
	}
	h.flush()
	h.core.applyAck(0, []uint64{6}, stage)
	h.core.join("m", 10, h.now)
	if _, err := h.core.seek([]uint32{1}, []uint64{3}); err == nil || err.Code != wire.CodeGroupInUse {
		t.Fatalf("seek with a member: %v", err)
	}
	h.core.leave("m", h.core.members["m"].epoch, h.now)

	s := h.core.shards[0]
	if s.committed != 7 || len(s.dead) != 3 || !slices.Equal(s.owed, []uint64{7}) {
		t.Fatalf("before the seek: committed %d dead %d owed %v", s.committed, len(s.dead), s.owed)
	}
	// Back to 3: 2 stays a dead letter; 3 and 4 are dead letters no more;
	// 7 is no longer owed; 3.. are never delivered.
	got, err := h.core.seek([]uint32{0}, []uint64{3})
	if err != nil || !slices.Equal(got, []uint64{3}) {
		t.Fatalf("seek: %v %v", got, err)
	}
	check := func(when string) {
		t.Helper()
		s := h.core.shards[0]
		if v := s.offs.view(t); s.committed != 3 || s.next != 3 || len(s.owed) != 0 || len(v.done) != 0 || len(v.attempts) != 0 {
			t.Fatalf("%s: committed %d next %d owed %v done %v attempts %v", when, s.committed, s.next, s.owed, v.done, v.attempts)
		}
		if _, ok := s.dead[2]; !ok || len(s.dead) != 1 {
			t.Fatalf("%s: dead letters %v, want only 2", when, slices.Sorted(maps.Keys(s.dead)))
		}
		if p := h.poll("", 0, 3); !slices.Equal(offsetsOf(p), []uint64{3, 4, 5}) || p[0].attempts != 1 || p[1].attempts != 1 {
			t.Fatalf("%s: polled %+v, want 3, 4, 5 on their first attempt", when, p)
		}
	}
	h.flush()
	saved := h.log
	check("after the seek")
	// The same after a restart from what the seek flushed.
	h.log = saved
	c := newGroupCore(7, "g", 2, h.core.cfg)
	if _, err := c.load(func(fn func(k, v []byte) error) error { return saved.ScanMeta(groupPrefix(7, "g"), fn) }); err != nil {
		t.Fatal(err)
	}
	for _, sh := range c.shards {
		sh.tail = 20
	}
	h.core = c
	check("after a restart")

	// Clamped to the retained range: below first goes to first, past the
	// tail to the tail; every shard at once.
	h.core.shards[1].first = 5
	h.core.nack(0, []uint64{3, 4, 5}, h.now)
	got, err = h.core.seek([]uint32{0, 1}, []uint64{wire.NoEnd, 0})
	if err != nil || !slices.Equal(got, []uint64{20, 5}) {
		t.Fatalf("clamped seek: %v %v", got, err)
	}
	if p := h.poll("", 1, 1); !slices.Equal(offsetsOf(p), []uint64{5}) {
		t.Fatalf("shard 1 after seeking to its first: polled %v", offsetsOf(p))
	}
	if p := h.poll("", 0, 1); len(p) != 0 {
		t.Fatalf("shard 0 after seeking to its tail: polled %v", offsetsOf(p))
	}
}
