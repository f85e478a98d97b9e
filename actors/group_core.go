package actors

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// groupCore is a consumer group's state on one stream, without the actor
// around it: cursors, claims, redeliveries, dead letters and members. Every
// method takes the time it runs at, so timeouts are tested with an injected
// clock. Each change appends the metadata puts that make it durable to
// c.puts; the coordinator flushes them through the storage writer.
//
// Per shard, every offset below committed is settled (acked, dead-lettered,
// discarded, or passed over: deleted by retention before it was delivered,
// or below the position of a seek) unless it was redriven (then it is owed
// or claimed again),
// and every offset in [committed, next) is exactly one of: settled (in
// done), claimed, or owed. Offsets from next on were never delivered.
type groupCore struct {
	stream uint64
	group  string
	shards []*groupShard
	cfg    GroupLimits

	// generation counts membership changes; a member's epoch is the
	// generation it joined at.
	generation uint64
	// incarnation tells this group apart from an earlier group of the same
	// name that was deleted (whose generations the new one repeats): the
	// coordinator draws it when it creates the group, and it is part of
	// every cursor the group mints (0 for a group created before groups
	// could be deleted). It is stored with the generation.
	incarnation uint64
	members     map[string]*groupMember
	// claimCount is the number of claims across shards; memberClaims
	// counts the claims of each push member.
	claimCount   int
	memberClaims map[string]int
	// lapsed are the push members whose claims a visibility timeout
	// released since lapsedIdle last ran.
	lapsed map[string]struct{}
	// deadlines orders claims by visibility deadline (lazily: entries of
	// settled or re-claimed claims are skipped).
	deadlines deadlineQueue
	claimSeq  uint64
	// deadLettered counts records dead-lettered (for metrics).
	deadLettered uint64

	puts []storage.MetaPut
	// stages numbers stageAck calls.
	stages uint64
	// eager is set when a pending write must go out with the next flush;
	// the writes of applying an ack whose settled markers are durable
	// (lazy) can wait for the next flush that goes anyway: they only tidy
	// (markers deleted, the cursor moved), load rebuilds the same state
	// without them.
	eager, lazy bool
}

// GroupLimits are a group's timeouts and bounds (from the node's config).
type GroupLimits struct {
	// Visibility is how long a claim holds before its record is redelivered
	// (default 30 s).
	Visibility time.Duration
	// MaxAttempts is how many deliveries a record gets before it is
	// dead-lettered (default 5).
	MaxAttempts uint32
	// Session is how long a push member may stay silent before it is
	// removed (default 30 s).
	Session time.Duration
	// MaxInFlight bounds the group's claims across shards (default 10000).
	MaxInFlight int
	// MaxPoll bounds one poll's records (default 1000).
	MaxPoll int
	// MaxPollWait bounds a poll's wait (default 30 s).
	MaxPollWait time.Duration
	// MaxWindow bounds a push member's window (default 10000).
	MaxWindow int
	// MaxDeadLetterList caps one dead-letter listing (default 1000).
	MaxDeadLetterList int
}

func (l GroupLimits) withDefaults() GroupLimits {
	if l.Visibility <= 0 {
		l.Visibility = 30 * time.Second
	}
	if l.MaxAttempts == 0 {
		l.MaxAttempts = 5
	}
	if l.Session <= 0 {
		l.Session = 30 * time.Second
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 10000
	}
	if l.MaxPoll <= 0 {
		l.MaxPoll = 1000
	}
	if l.MaxPollWait <= 0 {
		l.MaxPollWait = 30 * time.Second
	}
	if l.MaxWindow <= 0 {
		l.MaxWindow = 10000
	}
	if l.MaxDeadLetterList <= 0 {
		l.MaxDeadLetterList = 1000
	}
	return l
}

type groupShard struct {
	index     uint32
	committed uint64
	next      uint64
	// tail is the shard's committed tail and first its first retained
	// offset, as last heard.
	tail, first uint64
	// floor: offsets below it that are neither claimed nor owed are
	// settled: retention deleted them before they were delivered (the group
	// jumped over them without reading them).
	floor uint64
	// offs holds, per offset: whether it is settled in [committed, next)
	// (done; marked if a settled marker ('k') for it is in storage: a dead
	// letter has its 'd' instead, and an offset below the staged cursor
	// needs none); the claim of a delivered, unsettled record now held by
	// a consumer; the ack staged for it (stageAck) and not yet applied;
	// and the deliveries of claimed and owed records (attempts).
	offs offsetTable
	// stagedTo is the highest committed cursor staged writes have written
	// (it never moves back: persisted).
	stagedTo uint64
	// owed are unsettled records waiting to be delivered again, in offset
	// order: they go out before new ones.
	owed []uint64
	dead map[uint64]*deadLetter
	// dirty: committed or next changed since the last flush.
	dirty bool
}

type deadLetter struct {
	attempts uint32
	at       int64
	reason   string
}

// groupMember is a push member as the group sees it.
type groupMember struct {
	id       string
	epoch    uint64
	lastSeen time.Time
	shards   []uint32
	window   uint32
	inFlight uint32
}

func newGroupCore(stream uint64, group string, shards int, cfg GroupLimits) *groupCore {
	c := &groupCore{stream: stream, group: group, cfg: cfg.withDefaults(), members: map[string]*groupMember{},
		memberClaims: map[string]int{}, lapsed: map[string]struct{}{}}
	c.shards = make([]*groupShard, shards)
	for i := range c.shards {
		c.shards[i] = &groupShard{index: uint32(i), dead: map[uint64]*deadLetter{}}
	}
	return c
}

// Metadata keys: 'G' | stream id | group length | group | kind | ...
//
//	'g'                      generation (u64), incarnation (u64, when not 0): the group exists
//	'c' | shard              committed (u64), next (u64)
//	'k' | shard | offset     settled at or above committed (not a dead letter)
//	'a' | shard | offset     attempts (u32) of an unsettled record delivered more than once
//	'o' | shard | offset     attempts (u32) of a redriven record below committed
//	'd' | shard | offset     dead letter: attempts (u32), when (i64), reason
func groupPrefix(stream uint64, group string) []byte {
	b := make([]byte, 0, 10+len(group))
	b = append(b, 'G')
	b = binary.BigEndian.AppendUint64(b, stream)
	b = append(b, byte(len(group)))
	return append(b, group...)
}

// GroupStreamPrefix is the prefix of every group key of a stream.
func GroupStreamPrefix(stream uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{'G'}, stream)
}

func (c *groupCore) key(kind byte, shard uint32, offset uint64, withOffset bool) []byte {
	b := append(groupPrefix(c.stream, c.group), kind)
	if kind == 'g' {
		return b
	}
	b = binary.BigEndian.AppendUint32(b, shard)
	if withOffset {
		b = binary.BigEndian.AppendUint64(b, offset)
	}
	return b
}

func (c *groupCore) put(kind byte, shard uint32, offset uint64, value []byte) {
	c.eager = c.eager || !c.lazy
	c.puts = append(c.puts, storage.MetaPut{Key: c.key(kind, shard, offset, true), Value: value})
}

func u32Value(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// maxLoadedUnsettled bounds the delivered, unsettled records load accepts in
// one shard's [committed, next): each becomes an owed record in memory, so a
// cursor value that lies about next must fail the load rather than take the
// node's memory. A real group holds far fewer: its claims are bounded by
// GroupLimits.MaxInFlight, and only redriven dead letters add to them.
const maxLoadedUnsettled = 1 << 24

// load rebuilds the state from the group's metadata (the map from key to
// value, as scanned under groupPrefix). It reports whether the group had
// any state. It fails on a malformed key or cursor value, a shard whose
// committed is past its next, and a shard with more than maxLoadedUnsettled
// unsettled records; keys the core never writes (redrive attempts at or
// above committed, dead letters at or above next) are ignored.
func (c *groupCore) load(scan func(fn func(key, value []byte) error) error) (bool, error) {
	prefix := groupPrefix(c.stream, c.group)
	found := false
	aKeys := map[[2]uint64]uint32{}
	// What the keys say of each shard's offsets, before it goes to offs.
	done := make([]map[uint64]bool, len(c.shards))
	attempts := make([]map[uint64]uint32, len(c.shards))
	for i := range c.shards {
		done[i], attempts[i] = map[uint64]bool{}, map[uint64]uint32{}
	}
	err := scan(func(key, value []byte) error {
		found = true
		rest := key[len(prefix):]
		if len(rest) == 0 {
			return nil
		}
		kind, rest := rest[0], rest[1:]
		if kind == 'g' {
			if len(value) == 8 || len(value) == 16 {
				c.generation = binary.BigEndian.Uint64(value)
			}
			if len(value) == 16 {
				c.incarnation = binary.BigEndian.Uint64(value[8:])
			}
			return nil
		}
		if len(rest) < 4 {
			return fmt.Errorf("group key %x: short", key)
		}
		shard := binary.BigEndian.Uint32(rest)
		if int(shard) >= len(c.shards) {
			return nil // a shard the stream no longer has
		}
		s := c.shards[shard]
		rest = rest[4:]
		if kind == 'c' {
			if len(value) != 16 && len(value) != 24 {
				return fmt.Errorf("group key %x: cursor value of %d bytes", key, len(value))
			}
			s.committed, s.next = binary.BigEndian.Uint64(value), binary.BigEndian.Uint64(value[8:])
			if len(value) == 24 {
				s.floor = binary.BigEndian.Uint64(value[16:])
			}
			return nil
		}
		if len(rest) != 8 {
			return fmt.Errorf("group key %x: bad offset", key)
		}
		off := binary.BigEndian.Uint64(rest)
		switch kind {
		case 'k':
			done[shard][off] = true
		case 'a':
			if len(value) == 4 {
				aKeys[[2]uint64{uint64(shard), off}] = binary.BigEndian.Uint32(value)
			}
		case 'o':
			if len(value) == 4 {
				attempts[shard][off] = binary.BigEndian.Uint32(value)
				s.owed = append(s.owed, off)
			}
		case 'd':
			if len(value) >= 14 {
				n := int(binary.BigEndian.Uint16(value[12:]))
				reason := ""
				if len(value) >= 14+n {
					reason = string(value[14 : 14+n])
				}
				s.dead[off] = &deadLetter{attempts: binary.BigEndian.Uint32(value), at: int64(binary.BigEndian.Uint64(value[4:])), reason: reason}
			}
		}
		return nil
	})
	if err != nil {
		return found, err
	}
	for _, s := range c.shards {
		done, attempts := done[s.index], attempts[s.index]
		if s.committed > s.next {
			return found, fmt.Errorf("group shard %d: committed %d is past next %d", s.index, s.committed, s.next)
		}
		// 'o' keys are only written below committed and dead letters only
		// for delivered records: others were never written by this core,
		// and would be delivered past next.
		s.owed = slices.DeleteFunc(s.owed, func(off uint64) bool { return off >= s.committed })
		maps.DeleteFunc(attempts, func(off uint64, _ uint32) bool { return off >= s.committed })
		maps.DeleteFunc(s.dead, func(off uint64, _ *deadLetter) bool { return off >= s.next })
		// A redrive writes the 'o' key before it deletes the 'd' key: with
		// both, the redrive happened.
		for _, off := range s.owed {
			delete(s.dead, off)
		}
		for off := range s.dead {
			if _, marked := done[off]; !marked && off >= s.committed && off < s.next {
				done[off] = false
			}
		}
		// Nothing is claimed yet and nothing owed lies in [committed,
		// floor): committed moves up to the floor at once, as advance
		// would one offset at a time.
		if start := max(s.committed, min(s.floor, s.next)); start > s.committed {
			s.committed, s.dirty = start, true
		}
		for off, marked := range done {
			if off < s.committed || off >= s.next {
				delete(done, off)
				if marked {
					// A crash left it behind a cursor that moved past it
					// before the tidy writes went: delete it with the first
					// flush.
					c.put('k', s.index, off, nil)
				}
			}
		}
		if unsettled := s.next - s.committed - uint64(len(done)); unsettled > maxLoadedUnsettled {
			return found, fmt.Errorf("group shard %d: %d unsettled records in [%d, %d), more than %d", s.index, unsettled, s.committed, s.next, maxLoadedUnsettled)
		}
		// Every delivered record not settled was in flight when the node
		// stopped: it is owed again, with its attempts so far.
		for off := s.committed; off < s.next; off++ {
			if _, ok := done[off]; ok {
				continue
			}
			n, ok := aKeys[[2]uint64{uint64(s.index), off}]
			if !ok {
				n = 1
			}
			attempts[off] = n
			s.owed = append(s.owed, off)
		}
		slices.Sort(s.owed)
		s.owed = slices.Compact(s.owed)
		s.offs.reset(s.committed)
		for _, off := range slices.Sorted(maps.Keys(done)) {
			s.offs.setDone(off, done[off])
		}
		for _, off := range slices.Sorted(maps.Keys(attempts)) {
			s.offs.setAttempts(off, attempts[off])
		}
		c.advance(s)
	}
	// What advance deleted or moved tidies storage (settled markers a crash
	// left behind an old cursor): it goes with the first flush.
	c.eager = false
	return found, nil
}

// saveGeneration marks the group as existing (its generation key).
func (c *groupCore) saveGeneration() {
	c.eager = true
	c.puts = append(c.puts, storage.MetaPut{Key: c.key('g', 0, 0, false), Value: c.generationValue()})
}

// generationValue is the value of the generation key.
func (c *groupCore) generationValue() []byte {
	v := binary.BigEndian.AppendUint64(nil, c.generation)
	if c.incarnation != 0 {
		v = binary.BigEndian.AppendUint64(v, c.incarnation)
	}
	return v
}

// flushPuts returns the pending puts, each dirty shard's cursor first: a
// commit too large for one transaction is written in several, and a crash
// between them then leaves settled markers behind the cursor (which load
// deletes), never a cursor behind deleted markers (acked records delivered
// again).
func (c *groupCore) flushPuts() []storage.MetaPut {
	var p []storage.MetaPut
	for _, s := range c.shards {
		if s.dirty {
			s.dirty = false
			v := binary.BigEndian.AppendUint64(nil, s.persisted())
			v = binary.BigEndian.AppendUint64(v, s.next)
			v = binary.BigEndian.AppendUint64(v, s.floor)
			p = append(p, storage.MetaPut{Key: c.key('c', s.index, 0, false), Value: v})
		}
	}
	p = append(p, c.puts...)
	c.puts, c.eager = nil, false
	return p
}

// markDirty marks s's cursor for the next flush.
func (c *groupCore) markDirty(s *groupShard) {
	s.dirty = true
	c.eager = c.eager || !c.lazy
}

// pick is a record chosen for delivery; the coordinator reads it.
type pick struct {
	shard    uint32
	offset   uint64
	attempts uint32
}

// claimable reports whether shard has anything to deliver now.
func (c *groupCore) claimable(shard uint32) bool {
	s := c.shards[shard]
	return len(s.owed) > 0 || s.next < s.tail
}

// candidates picks, without claiming, up to max records of the given
// shards: owed records first (in offset order), then new ones from next up
// to the tail, within the group's in-flight bound. A shard with nothing in
// flight whose records below first were deleted by retention skips them at
// once.
func (c *groupCore) candidates(shards []uint32, max int) []pick {
	var out []pick
	room := c.cfg.MaxInFlight - c.claimCount
	if max > room {
		max = room
	}
	for _, si := range shards {
		s := c.shards[si]
		if s.next < s.first {
			// Retention deleted records the group never delivered: jump
			// over them without reading them.
			s.floor, s.next = s.first, s.first
			c.markDirty(s)
			c.advance(s)
		}
		for _, off := range s.owed {
			if len(out) >= max {
				break
			}
			out = append(out, pick{shard: si, offset: off})
		}
		for off := s.next; len(out) < max && off < s.tail; off++ {
			out = append(out, pick{shard: si, offset: off})
		}
		if len(out) >= max {
			break
		}
	}
	return out
}

// takeRead claims for owner the picks a read brought back (a prefix of
// what candidates returned), with the visibility deadline. Acks, nacks and
// expiries go on while the records are read, so each pick is taken only if
// it is still there to take: an owed record still owed, a new record still
// the shard's next (no other read picks from the shard meanwhile). Picks in
// gone were deleted by retention and are settled instead. It reports which
// picks it claimed.
func (c *groupCore) takeRead(owner string, picks []pick, gone map[pick]bool, now time.Time) []bool {
	taken := make([]bool, len(picks))
	for k, p := range picks {
		s := c.shards[p.shard]
		if p.offset >= s.next {
			if p.offset != s.next {
				continue // past a record not taken: never, for candidates' picks
			}
			s.next = p.offset + 1
			c.markDirty(s)
		} else if i, ok := slices.BinarySearch(s.owed, p.offset); ok {
			s.owed = slices.Delete(s.owed, i, i+1)
		} else {
			continue // settled while it was read
		}
		if gone[p] {
			c.settle(s, p.offset, false)
			continue
		}
		c.persistAttempts(s, p.offset, s.offs.addAttempt(p.offset))
		c.addClaim(s, p.offset, owner, now)
		taken[k] = true
	}
	return taken
}

func (c *groupCore) persistAttempts(s *groupShard, off uint64, n uint32) {
	if stage, _ := s.offs.stageOf(off); stage != 0 {
		return // its ack is durable (or failing with storage): settled there
	}
	if off < s.persisted() {
		c.put('o', s.index, off, u32Value(n))
	} else if n > 1 {
		c.put('a', s.index, off, u32Value(n))
	}
}

// persisted is the committed cursor as storage has it, or will once the
// staged writes land: every offset below it is settled there, but those
// with an owed marker ('o', a redriven record).
func (s *groupShard) persisted() uint64 { return max(s.committed, s.stagedTo) }

func (c *groupCore) addClaim(s *groupShard, off uint64, owner string, now time.Time) {
	c.claimSeq++
	s.offs.setClaim(off, owner, c.claimSeq)
	c.claimCount++
	if owner != "" {
		c.memberClaims[owner]++
	}
	c.deadlines.push(deadlineEntry{at: now.Add(c.cfg.Visibility), shard: s.index, offset: off, seq: c.claimSeq})
	if c.deadlines.len() > 2*c.claimCount+1024 {
		c.compactDeadlines()
	}
}

// compactDeadlines drops the entries of settled or re-claimed claims, which
// would otherwise stay until their deadline (one unanswered claim would keep
// a visibility timeout's worth of acked ones).
func (c *groupCore) compactDeadlines() {
	c.deadlines.retain(c.liveDeadline)
}

// liveDeadline reports whether e is the deadline of a claim still held.
func (c *groupCore) liveDeadline(e deadlineEntry) bool {
	st := c.shards[e.shard].offs.peek(e.offset)
	return st != nil && st.claim == e.seq
}

// unclaim gives a claim up (the caller decides what follows).
func (c *groupCore) unclaim(s *groupShard, off uint64) {
	if owner, ok := s.offs.clearClaim(off); ok {
		c.claimCount--
		if owner != "" {
			if c.memberClaims[owner]--; c.memberClaims[owner] <= 0 {
				delete(c.memberClaims, owner)
			}
		}
	}
}

// settle marks an unsettled delivered record done and advances committed
// over the contiguous settled run. deadLettered records keep their 'd' key
// instead of a settled marker.
func (c *groupCore) settle(s *groupShard, off uint64, deadLettered bool) {
	mode := settleAcked
	if deadLettered {
		mode = settleDead
	}
	c.settleAs(s, off, mode, false)
}

// How a record is settled: acked (a settled marker is written unless the
// persisted cursor is past it), dead-lettered (its 'd' key is its marker),
// or acked by a staged ack now applied (its writes are durable already;
// marked says whether they include a settled marker).
type settleMode int

const (
	settleAcked settleMode = iota
	settleDead
	settleStaged
)

func (c *groupCore) settleAs(s *groupShard, off uint64, mode settleMode, marked bool) {
	if i, ok := slices.BinarySearch(s.owed, off); ok {
		s.owed = slices.Delete(s.owed, i, i+1)
	}
	persisted := s.persisted()
	if mode != settleStaged {
		// A staged ack deleted these markers when it was staged.
		if off < persisted {
			c.put('o', s.index, off, nil)
		}
		if n, _ := s.offs.attemptsOf(off); n > 1 {
			c.put('a', s.index, off, nil)
		}
	}
	s.offs.clearAttempts(off)
	if off < s.committed {
		return
	}
	switch mode {
	case settleAcked:
		marked = off >= persisted
		if marked {
			c.put('k', s.index, off, []byte{})
		}
	case settleDead:
		// Its 'd' key is its marker, and a settled marker written for an
		// ack staged before it lapsed is still stored.
		_, marked = s.offs.stageOf(off)
	}
	s.offs.setDone(off, marked)
	if off == s.committed {
		c.advance(s)
	}
}

// advance moves committed over the run of settled offsets: settled ones in
// done, and ones below the floor that nobody holds.
func (c *groupCore) advance(s *groupShard) {
	for s.committed < s.next {
		off := s.committed
		if marked, ok := s.offs.clearDone(off); ok {
			if marked {
				c.put('k', s.index, off, nil)
			}
		} else if off >= s.floor || c.unsettled(s, off) {
			break
		} else {
			// Retention deleted off before it was delivered: skip the whole
			// run of such offsets at once, up to the next one that is
			// settled, claimed, owed, or not below the floor (one at a time
			// this walked up to the floor, however far that was).
			to := s.offs.firstFrom(off, min(s.floor, s.next))
			if i, _ := slices.BinarySearch(s.owed, off+1); i < len(s.owed) && s.owed[i] < to {
				to = s.owed[i]
			}
			s.committed = to
			c.markDirty(s)
			continue
		}
		s.committed++
		c.markDirty(s)
	}
	s.offs.slide(s.committed)
}

// state of one offset, for acks.
func (c *groupCore) unsettled(s *groupShard, off uint64) bool {
	if s.offs.claimed(off) {
		return true
	}
	_, ok := slices.BinarySearch(s.owed, off)
	return ok
}

// ack settles delivered records at once; it returns how many changed
// state. An offset never delivered is refused with not_delivered (nothing
// is changed then). A record already settled is not an error: acks are
// idempotent. The coordinator acks through stageAck and applyAck instead,
// which settle the same records only once their writes are durable.
func (c *groupCore) ack(shard uint32, offsets []uint64) (int, *wire.Error) {
	s := c.shards[shard]
	if werr := c.checkDelivered(s, offsets); werr != nil {
		return 0, werr
	}
	n := 0
	for _, off := range offsets {
		if c.unsettled(s, off) {
			c.unclaim(s, off)
			c.settle(s, off, false)
			n++
		}
	}
	return n, nil
}

// stageAck appends to the pending writes those that make an ack of offsets
// durable, without settling anything: the coordinator flushes them and
// applies the ack (applyAck) only once they are durable, so a commit that
// fails changes nothing, and its records stay claimed and are delivered
// again when their visibility timeout lapses. An ack that extends the run
// of settled (or staged) offsets at the persisted cursor moves the cursor
// (one write, as an ack applied at once would); the others get a settled
// marker each. Offsets past next are refused with not_delivered, staging
// nothing. It returns the stage number applyAck takes. The staged writes
// assume every write staged or flushed before them lands first: the
// storage writer commits in order, and one that fails fails every later one
// (ErrStorageFailed).
func (c *groupCore) stageAck(shard uint32, offsets []uint64) (uint64, *wire.Error) {
	s := c.shards[shard]
	if werr := c.checkDelivered(s, offsets); werr != nil {
		return 0, werr
	}
	c.stages++
	stage := c.stages
	var fresh []uint64
	for _, off := range offsets {
		if st, _ := s.offs.stageOf(off); st != 0 || !c.unsettled(s, off) {
			continue
		}
		s.offs.setStage(off, stage, false)
		fresh = append(fresh, off)
	}
	if len(fresh) == 0 {
		return stage, nil
	}
	from := s.persisted()
	to := from
	for to < s.next {
		st := s.offs.peek(to)
		if st == nil || st.flags&offDone == 0 && st.stage == 0 {
			break
		}
		to++
	}
	if to > from {
		s.stagedTo = to
		c.markDirty(s)
	}
	for _, off := range fresh {
		switch {
		case off < from:
			c.put('o', shard, off, nil) // a redriven record: settled below the cursor
		case off >= to:
			c.put('k', shard, off, []byte{})
			s.offs.setStage(off, stage, true)
		}
		if n, _ := s.offs.attemptsOf(off); off >= from && n > 1 {
			c.put('a', shard, off, nil)
		}
	}
	return stage, nil
}

// applyAck applies the ack of stage (stageAck's) once its writes are
// durable, and returns how many records it settled. Offsets the stage did
// not stage (settled already, staged by another ack, or cancelled by a
// redrive) are left as they are. A record dead-lettered while the commit
// ran (its visibility lapsed) stays a dead letter: a redrive deletes the
// settled marker written for it, and finds it owed.
// What applying writes only tidies storage (lazy): the state it leaves is
// the one load rebuilds from the staged writes.
func (c *groupCore) applyAck(shard uint32, offsets []uint64, stage uint64) int {
	s := c.shards[shard]
	c.lazy = true
	defer func() { c.lazy = false }()
	n := 0
	for _, off := range offsets {
		st, marked := s.offs.stageOf(off)
		if st == 0 || st != stage {
			continue
		}
		s.offs.clearStage(off)
		if c.unsettled(s, off) {
			c.unclaim(s, off)
			c.settleAs(s, off, settleStaged, marked)
			n++
			continue
		}
		// Settled meanwhile: dead-lettered (its visibility lapsed while the
		// commit ran). It stays a dead letter; the marker written for it is
		// deleted when committed passes it, or by a redrive or a discard.
	}
	return n
}

// unstageAck forgets the ack of stage, whose writes failed: its records
// stay as they are (claimed, or owed), and acking them again stages anew.
func (c *groupCore) unstageAck(shard uint32, offsets []uint64, stage uint64) {
	s := c.shards[shard]
	for _, off := range offsets {
		if st, _ := s.offs.stageOf(off); st != 0 && st == stage {
			s.offs.clearStage(off)
		}
	}
}

// checkDelivered refuses offsets the group has not delivered.
func (c *groupCore) checkDelivered(s *groupShard, offsets []uint64) *wire.Error {
	for _, off := range offsets {
		if off >= s.next {
			return &wire.Error{Code: wire.CodeNotDelivered, Detail: s.next,
				Message: fmt.Sprintf("shard %d offset %d has not been delivered to group %s (next is %d)", s.index, off, c.group, s.next)}
		}
	}
	return nil
}

// nack hands claimed records back for immediate redelivery (or dead-letters
// them past max attempts). A record whose ack is being committed is left
// to the ack.
func (c *groupCore) nack(shard uint32, offsets []uint64, now time.Time) (int, *wire.Error) {
	s := c.shards[shard]
	if werr := c.checkDelivered(s, offsets); werr != nil {
		return 0, werr
	}
	n := 0
	for _, off := range offsets {
		if st := s.offs.peek(off); st != nil && st.claim != 0 && st.stage == 0 {
			c.release(s, off, "nacked", now)
			n++
		}
	}
	return n, nil
}

// release ends a claim that failed (nack, visibility timeout, member gone):
// the record is owed again, or dead-lettered once it has had MaxAttempts.
func (c *groupCore) release(s *groupShard, off uint64, reason string, now time.Time) {
	c.unclaim(s, off)
	n, _ := s.offs.attemptsOf(off)
	if n >= c.cfg.MaxAttempts {
		dl := &deadLetter{attempts: n, at: now.UnixNano(), reason: reason}
		s.dead[off] = dl
		c.deadLettered++
		c.put('d', s.index, off, encodeDeadLetter(dl))
		c.settle(s, off, true)
		return
	}
	i, found := slices.BinarySearch(s.owed, off)
	if !found {
		s.owed = slices.Insert(s.owed, i, off)
	}
}

func encodeDeadLetter(d *deadLetter) []byte {
	v := binary.BigEndian.AppendUint32(nil, d.attempts)
	v = binary.BigEndian.AppendUint64(v, uint64(d.at))
	r := d.reason
	if len(r) > 1024 {
		r = r[:1024]
	}
	v = binary.BigEndian.AppendUint16(v, uint16(len(r)))
	return append(v, r...)
}

// expire releases every claim whose visibility deadline has passed.
func (c *groupCore) expire(now time.Time) int {
	n := 0
	for {
		e, ok := c.deadlines.front()
		if !ok || e.at.After(now) {
			break
		}
		c.deadlines.pop()
		s := c.shards[e.shard]
		if st := s.offs.peek(e.offset); st != nil && st.claim == e.seq {
			if st.owner != "" {
				c.lapsed[st.owner] = struct{}{}
			}
			c.release(s, e.offset, "visibility timeout", now)
			n++
		}
	}
	return n
}

// lapsedIdle returns the push members a visibility timeout released claims
// of since it last ran, and that hold no claim now: whatever they hold
// pushed and not acked is owed to the group again.
func (c *groupCore) lapsedIdle() []string {
	var out []string
	for id := range c.lapsed {
		if c.memberClaims[id] == 0 {
			out = append(out, id)
		}
	}
	clear(c.lapsed)
	sort.Strings(out)
	return out
}

// nextDeadline returns the earliest live claim deadline.
func (c *groupCore) nextDeadline() (time.Time, bool) {
	for {
		e, ok := c.deadlines.front()
		if !ok {
			break
		}
		if c.liveDeadline(e) {
			return e.at, true
		}
		c.deadlines.pop()
	}
	return time.Time{}, false
}

// redrive gives dead letters back to the group with their attempts reset:
// they are owed, and go out before new records. No offsets: every dead
// letter of the shards.
func (c *groupCore) redrive(shards []uint32, offsets []uint64) int {
	n := 0
	for _, si := range shards {
		s := c.shards[si]
		persisted := s.persisted()
		for _, off := range c.selectDead(s, offsets) {
			delete(s.dead, off)
			s.offs.clearStage(off) // an ack staged before it was dead-lettered no longer applies
			if off >= s.committed {
				s.offs.clearDone(off)
			}
			if off < persisted {
				// 'o' before the 'd' delete: a commit split between them
				// must not lose the record (load prefers 'o').
				c.put('o', si, off, u32Value(0))
			} else {
				c.put('k', si, off, nil) // the marker of an ack staged before it was dead-lettered
			}
			c.put('d', si, off, nil)
			s.offs.setAttempts(off, 0)
			i, found := slices.BinarySearch(s.owed, off)
			if !found {
				s.owed = slices.Insert(s.owed, i, off)
			}
			n++
		}
	}
	return n
}

// discard drops dead letters: the records stay settled.
func (c *groupCore) discard(shards []uint32, offsets []uint64) int {
	n := 0
	for _, si := range shards {
		s := c.shards[si]
		persisted := s.persisted()
		for _, off := range c.selectDead(s, offsets) {
			delete(s.dead, off)
			if off >= persisted {
				c.put('k', si, off, []byte{}) // still settled, now as an ack
				s.offs.setDone(off, true)
			}
			c.put('d', si, off, nil)
			n++
		}
	}
	return n
}

func (c *groupCore) selectDead(s *groupShard, offsets []uint64) []uint64 {
	var out []uint64
	if len(offsets) == 0 {
		for off := range s.dead {
			out = append(out, off)
		}
		slices.Sort(out)
		return out
	}
	for _, off := range offsets {
		if _, ok := s.dead[off]; ok {
			out = append(out, off)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// deadLetters lists dead letters in shard then offset order.
func (c *groupCore) deadLetters(shards []uint32, from uint64, limit int) ([]wire.DeadLetter, bool) {
	if limit <= 0 || limit > c.cfg.MaxDeadLetterList {
		limit = c.cfg.MaxDeadLetterList
	}
	var out []wire.DeadLetter
	for _, si := range shards {
		s := c.shards[si]
		offs := make([]uint64, 0, len(s.dead))
		for off := range s.dead {
			if off >= from {
				offs = append(offs, off)
			}
		}
		slices.Sort(offs)
		for _, off := range offs {
			if len(out) == limit {
				return out, true
			}
			d := s.dead[off]
			out = append(out, wire.DeadLetter{Shard: si, Offset: off, Attempts: d.attempts, DeadUnixNano: d.at, Reason: d.reason})
		}
	}
	return out, false
}

// seek moves the committed position of each of shards to the offset at the
// same index of to, clamped to the shard's retained range as last heard
// ([first, tail]), and returns the positions. It is all or nothing: it is
// refused, changing nothing, while the group has push members or while a
// shard sought has records claimed or acks staged (an ack being
// committed), since their outcome would land on a position that no longer
// holds them.
//
// On a shard moved to p, every offset below p is settled and every offset
// from p on was never delivered: committed, next and the floor are p (so
// load, which owes every unsettled offset in [committed, next), owes none,
// and counts what lies below p settled). Owed records are forgotten (below
// p they are settled; from p on they are delivered again as new records,
// their attempts counted afresh), and so are settled markers; dead letters
// below p are kept, those at or after p are dropped (their records come
// again). Every key that would contradict that after a restart (settled
// markers, attempts of owed records, owed markers below the cursor, dead
// letters from p on) is deleted with the new cursor, in the same flush.
func (c *groupCore) seek(shards []uint32, to []uint64) ([]uint64, *wire.Error) {
	if n := len(c.members); n > 0 {
		return nil, wire.Errorf(wire.CodeGroupInUse,
			"group %s has %d push members; a seek needs none (stop them, or wait for their session to expire)", c.group, n)
	}
	for _, si := range shards {
		s := c.shards[si]
		if n := s.offs.claims; n > 0 {
			return nil, wire.Errorf(wire.CodeGroupInUse,
				"shard %d of group %s has %d records claimed; ack or nack them, or wait for their visibility timeout, then seek", si, c.group, n)
		}
		if n := s.offs.staged; n > 0 {
			return nil, wire.Errorf(wire.CodeGroupInUse, "shard %d of group %s has acks of %d records being committed; retry", si, c.group, n)
		}
	}
	out := make([]uint64, len(shards))
	for i, si := range shards {
		s := c.shards[si]
		p := min(max(to[i], s.first), s.tail)
		persisted := s.persisted()
		var marked []uint64
		s.offs.each(func(off uint64, st *offState) {
			if st.flags&offMarked != 0 {
				marked = append(marked, off)
			}
		})
		slices.Sort(marked)
		for _, off := range marked {
			c.put('k', s.index, off, nil)
		}
		for _, off := range s.owed {
			if off < persisted {
				c.put('o', s.index, off, nil)
			} else if n, _ := s.offs.attemptsOf(off); n > 1 {
				c.put('a', s.index, off, nil)
			}
		}
		for off := range s.dead {
			if off >= p {
				delete(s.dead, off)
				c.put('d', s.index, off, nil)
			}
		}
		s.offs.reset(p)
		s.owed = nil
		s.committed, s.next, s.floor, s.stagedTo = p, p, p, p
		c.markDirty(s)
		out[i] = p
	}
	return out, nil
}

// join adds (or re-adds) a push member and rebalances.
func (c *groupCore) join(id string, window uint32, now time.Time) *groupMember {
	if old, ok := c.members[id]; ok {
		c.removeMember(old, now) // the same id joining again replaces the old session
	}
	c.generation++
	c.saveGeneration()
	m := &groupMember{id: id, epoch: c.generation, lastSeen: now, window: window}
	c.members[id] = m
	c.rebalance()
	return m
}

// leave removes a member at once: its claims are redelivered.
func (c *groupCore) leave(id string, epoch uint64, now time.Time) bool {
	m, ok := c.members[id]
	if !ok || m.epoch != epoch {
		return false
	}
	c.removeMember(m, now)
	c.generation++
	c.saveGeneration()
	c.rebalance()
	return true
}

func (c *groupCore) removeMember(m *groupMember, now time.Time) {
	delete(c.members, m.id)
	for _, s := range c.shards {
		var offs []uint64
		s.offs.each(func(off uint64, st *offState) {
			if st.claim != 0 && st.owner == m.id {
				offs = append(offs, off)
			}
		})
		slices.Sort(offs)
		for _, off := range offs {
			c.release(s, off, "member left", now)
		}
	}
}

// expireMembers removes members silent past the session timeout and
// returns them.
func (c *groupCore) expireMembers(now time.Time) []*groupMember {
	var gone []*groupMember
	for _, m := range c.members {
		if now.Sub(m.lastSeen) >= c.cfg.Session {
			gone = append(gone, m)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].id < gone[j].id })
	for _, m := range gone {
		c.removeMember(m, now)
	}
	c.generation++
	c.saveGeneration()
	c.rebalance()
	return gone
}

// nextSessionDeadline returns when the next member would expire.
func (c *groupCore) nextSessionDeadline() (time.Time, bool) {
	var at time.Time
	ok := false
	for _, m := range c.members {
		d := m.lastSeen.Add(c.cfg.Session)
		if !ok || d.Before(at) {
			at, ok = d, true
		}
	}
	return at, ok
}

// rebalance splits the shards among the members in id order, in contiguous
// ranges; members beyond the shard count get none and wait idle.
func (c *groupCore) rebalance() {
	ids := make([]string, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	n, shards := len(ids), len(c.shards)
	for i, id := range ids {
		m := c.members[id]
		m.shards = m.shards[:0]
		lo, hi := i*shards/n, (i+1)*shards/n
		if n > shards {
			lo, hi = i, i+1
			if i >= shards {
				lo, hi = 0, 0
			}
		}
		for s := lo; s < hi; s++ {
			m.shards = append(m.shards, uint32(s))
		}
	}
}

// allShards returns every shard index.
func (c *groupCore) allShards() []uint32 {
	out := make([]uint32, len(c.shards))
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

// info describes the group.
func (c *groupCore) info(now time.Time) wire.GroupInfo {
	g := wire.GroupInfo{Group: c.group, Generation: c.generation, VisibilityMillis: uint32(c.cfg.Visibility.Milliseconds()),
		SessionMillis: uint32(c.cfg.Session.Milliseconds()), MaxAttempts: c.cfg.MaxAttempts}
	for _, s := range c.shards {
		g.Shards = append(g.Shards, wire.GroupShardInfo{Shard: s.index, Committed: s.committed, Delivered: s.next, Tail: s.tail,
			Claims: uint32(s.offs.claims), Owed: uint32(len(s.owed)), DeadLetters: uint32(len(s.dead))})
	}
	ids := make([]string, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := c.members[id]
		g.Members = append(g.Members, wire.GroupMemberInfo{ID: id, Shards: append([]uint32(nil), m.shards...), Window: m.window,
			InFlight: m.inFlight, IdleMillis: uint32(min(now.Sub(m.lastSeen).Milliseconds(), int64(^uint32(0))))})
	}
	return g
}
