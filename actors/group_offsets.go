package actors

// offState is what a group shard holds for one offset it delivered: the
// claim on it, the ack staged for it, how many times it went out, and
// whether it is settled in [committed, next). The zero value is no state.
type offState struct {
	// owner is the claim's member id ("" for a pull claim).
	owner string
	// claim is the claim's sequence number; 0: not claimed.
	claim uint64
	// stage is the stage of the ack staged for it (stageAck); 0: none.
	stage uint64
	// attempts counts its deliveries; set only with offCounted.
	attempts uint32
	flags    uint8
}

const (
	// offDone: settled, in [committed, next).
	offDone uint8 = 1 << iota
	// offMarked: settled with a settled marker ('k') in storage.
	offMarked
	// offStagedMarked: the staged ack wrote a settled marker.
	offStagedMarked
	// offCounted: attempts is set (a claimed or owed record).
	offCounted
)

func (st *offState) empty() bool { return st.claim == 0 && st.stage == 0 && st.flags == 0 }

// offsetTable maps a group shard's offsets to their state. It replaces one
// map per kind of state (claims, attempts, staged acks, settled offsets):
// those cost some twenty map operations per delivered record, a quarter of
// the node's CPU in a pull benchmark. The offsets with state are nearly all
// in [committed, next), a window that moves up: they live in a ring indexed
// by offset, from base on. Offsets below base (redriven records, or what a
// window too wide for the ring leaves behind) live in far, a map.
//
// Only these methods change it, so that the counts stay true.
type offsetTable struct {
	// ring holds the state of base+i at index (base+i)&(len(ring)-1), for
	// i < len(ring); its length is 0 or a power of two.
	ring []offState
	base uint64
	// hi is one past the highest offset set in the ring (at least base).
	hi uint64
	// far holds offsets below base; nil until needed.
	far map[uint64]*offState
	// Counts: claimed offsets, settled offsets (done), staged acks, and
	// offsets with attempts.
	claims, done, staged, counted int
}

const (
	// minOffsetRing is the ring's length when it first holds something.
	minOffsetRing = 16
	// maxOffsetRing bounds the ring (40 bytes a slot): a window wider than
	// this (a record held for a visibility timeout while millions behind it
	// are acked) keeps its oldest offsets in far.
	maxOffsetRing = 1 << 20
)

// peek returns off's state, or nil if it has none.
func (t *offsetTable) peek(off uint64) *offState {
	if off < t.base {
		return t.far[off]
	}
	if off-t.base < uint64(len(t.ring)) {
		if st := &t.ring[off&uint64(len(t.ring)-1)]; !st.empty() {
			return st
		}
	}
	return nil
}

// at returns off's state to change, creating it (empty). The caller sets
// something on it at once, through the methods below.
func (t *offsetTable) at(off uint64) *offState {
	if off < t.base {
		st := t.far[off]
		if st == nil {
			if t.far == nil {
				t.far = map[uint64]*offState{}
			}
			st = &offState{}
			t.far[off] = st
		}
		return st
	}
	if off-t.base >= uint64(len(t.ring)) {
		t.fit(off)
	}
	if off >= t.hi {
		t.hi = off + 1
	}
	return &t.ring[off&uint64(len(t.ring)-1)]
}

// fit makes the ring reach off (off >= base+len(ring)): it grows, or, past
// maxOffsetRing, moves its base up and the offsets below it to far. After
// it, base <= off < base+len(ring).
func (t *offsetTable) fit(off uint64) {
	if t.hi <= t.base {
		// Nothing in the ring: it starts at off.
		t.base, t.hi = off, off
		if len(t.ring) == 0 {
			t.ring = make([]offState, minOffsetRing)
		}
		return
	}
	need := off - t.base + 1
	if need <= maxOffsetRing {
		n := max(len(t.ring), minOffsetRing)
		for uint64(n) < need {
			n *= 2
		}
		t.resize(n)
		return
	}
	t.resize(maxOffsetRing)
	t.moveBase(off - maxOffsetRing/2)
}

// resize moves the ring's offsets [base, hi) into a ring of n slots (a power
// of two, at least hi-base).
func (t *offsetTable) resize(n int) {
	ring := make([]offState, n)
	if len(t.ring) > 0 {
		oldMask, mask := uint64(len(t.ring)-1), uint64(n-1)
		for off := t.base; off < t.hi; off++ {
			ring[off&mask] = t.ring[off&oldMask]
		}
	}
	t.ring = ring
}

// slide moves base up to to (the shard's committed): offsets below it that
// hold state move to far. A ring left mostly empty shrinks, and one left
// empty goes.
func (t *offsetTable) slide(to uint64) {
	if to <= t.base {
		return
	}
	t.moveBase(to)
	switch n := len(t.ring); {
	case t.claims == 0 && t.done == 0 && t.staged == 0 && t.counted == 0:
		// Nothing held: an idle group's shard keeps no ring.
		t.ring, t.far, t.hi = nil, nil, t.base
	case n > 4*minOffsetRing && (t.hi-t.base)*8 < uint64(n):
		t.resize(n / 4)
	}
}

// moveBase moves base up to to, and the offsets below it that hold state
// to far.
func (t *offsetTable) moveBase(to uint64) {
	if len(t.ring) > 0 {
		mask := uint64(len(t.ring) - 1)
		for off := t.base; off < min(to, t.hi); off++ {
			st := &t.ring[off&mask]
			if st.empty() {
				continue
			}
			if t.far == nil {
				t.far = map[uint64]*offState{}
			}
			moved := *st
			t.far[off] = &moved
			*st = offState{}
		}
	}
	t.base = to
	if t.hi < to {
		t.hi = to
	}
}

// tidy forgets off's state once it is empty (a far entry).
func (t *offsetTable) tidy(off uint64, st *offState) {
	if off < t.base && st.empty() {
		delete(t.far, off)
	}
}

// reset forgets every offset and starts the ring at base.
func (t *offsetTable) reset(base uint64) {
	*t = offsetTable{base: base, hi: base}
}

// each calls fn for every offset with state, in no particular order.
func (t *offsetTable) each(fn func(off uint64, st *offState)) {
	for off, st := range t.far {
		fn(off, st)
	}
	if len(t.ring) == 0 {
		return
	}
	mask := uint64(len(t.ring) - 1)
	for off := t.base; off < t.hi; off++ {
		if st := &t.ring[off&mask]; !st.empty() {
			fn(off, st)
		}
	}
}

// firstFrom returns the lowest offset in (from, to) that is settled or
// claimed, or to if none is.
func (t *offsetTable) firstFrom(from, to uint64) uint64 {
	held := func(st *offState) bool { return st.flags&offDone != 0 || st.claim != 0 }
	for off, st := range t.far {
		if off > from && off < to && held(st) {
			to = off
		}
	}
	if len(t.ring) == 0 {
		return to
	}
	mask := uint64(len(t.ring) - 1)
	for off := max(from+1, t.base); off < min(to, t.hi); off++ {
		if held(&t.ring[off&mask]) {
			return off
		}
	}
	return to
}

// claimed reports whether off is claimed.
func (t *offsetTable) claimed(off uint64) bool {
	st := t.peek(off)
	return st != nil && st.claim != 0
}

// setClaim claims off for owner with sequence number seq (not 0).
func (t *offsetTable) setClaim(off uint64, owner string, seq uint64) {
	st := t.at(off)
	if st.claim == 0 {
		t.claims++
	}
	st.owner, st.claim = owner, seq
}

// clearClaim ends off's claim and returns its owner, and whether there was one.
func (t *offsetTable) clearClaim(off uint64) (string, bool) {
	st := t.peek(off)
	if st == nil || st.claim == 0 {
		return "", false
	}
	owner := st.owner
	st.owner, st.claim = "", 0
	t.claims--
	t.tidy(off, st)
	return owner, true
}

// isDone reports whether off is settled in [committed, next), and whether
// a settled marker is stored for it.
func (t *offsetTable) isDone(off uint64) (marked, done bool) {
	st := t.peek(off)
	if st == nil || st.flags&offDone == 0 {
		return false, false
	}
	return st.flags&offMarked != 0, true
}

// setDone marks off settled, marked if its settled marker is stored.
func (t *offsetTable) setDone(off uint64, marked bool) {
	st := t.at(off)
	if st.flags&offDone == 0 {
		t.done++
	}
	st.flags = st.flags&^offMarked | offDone
	if marked {
		st.flags |= offMarked
	}
}

// clearDone forgets that off is settled; it returns what isDone did.
func (t *offsetTable) clearDone(off uint64) (marked, done bool) {
	st := t.peek(off)
	if st == nil || st.flags&offDone == 0 {
		return false, false
	}
	marked = st.flags&offMarked != 0
	st.flags &^= offDone | offMarked
	t.done--
	t.tidy(off, st)
	return marked, true
}

// stageOf returns the stage of off's staged ack, and whether that ack wrote
// a settled marker; stage 0: none.
func (t *offsetTable) stageOf(off uint64) (stage uint64, marked bool) {
	st := t.peek(off)
	if st == nil {
		return 0, false
	}
	return st.stage, st.flags&offStagedMarked != 0
}

// setStage stages an ack of off at stage (not 0).
func (t *offsetTable) setStage(off uint64, stage uint64, marked bool) {
	st := t.at(off)
	if st.stage == 0 {
		t.staged++
	}
	st.stage = stage
	st.flags &^= offStagedMarked
	if marked {
		st.flags |= offStagedMarked
	}
}

// clearStage forgets off's staged ack.
func (t *offsetTable) clearStage(off uint64) {
	st := t.peek(off)
	if st == nil || st.stage == 0 {
		return
	}
	st.stage = 0
	st.flags &^= offStagedMarked
	t.staged--
	t.tidy(off, st)
}

// attemptsOf returns off's deliveries (0 if not counted), and whether they
// are counted.
func (t *offsetTable) attemptsOf(off uint64) (uint32, bool) {
	st := t.peek(off)
	if st == nil || st.flags&offCounted == 0 {
		return 0, false
	}
	return st.attempts, true
}

// setAttempts sets off's deliveries.
func (t *offsetTable) setAttempts(off uint64, n uint32) {
	st := t.at(off)
	if st.flags&offCounted == 0 {
		t.counted++
		st.flags |= offCounted
	}
	st.attempts = n
}

// addAttempt counts one more delivery of off and returns the count.
func (t *offsetTable) addAttempt(off uint64) uint32 {
	st := t.at(off)
	if st.flags&offCounted == 0 {
		t.counted++
		st.flags |= offCounted
		st.attempts = 0
	}
	st.attempts++
	return st.attempts
}

// clearAttempts forgets off's deliveries.
func (t *offsetTable) clearAttempts(off uint64) {
	st := t.peek(off)
	if st == nil || st.flags&offCounted == 0 {
		return
	}
	st.attempts = 0
	st.flags &^= offCounted
	t.counted--
	t.tidy(off, st)
}
