package main

import (
	"encoding/binary"
	"fmt"
	"hash/crc64"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The crash soak's model: what the soak's clients were told, and the checks
// of what a restarted node stores against it. It does no I/O and starts no
// goroutines: the soak (crash_soak_test.go) feeds it the acks, the group's
// deliveries and the records it reads back.
//
// Its memory stays flat however many kills a run makes. A payload is never
// kept: it is a function of the record's identity (recordID), so the model
// keeps counters, and until they are verified the batches acknowledged since
// the last verification (a publisher, a first record and a count each), the
// batches whose outcome is unknown and the group's deliveries. A
// verification drops them; what it verified is kept as one CRC-64 per
// segment of crashSegment records per shard, for the re-reads.

const (
	// crashMaxBatch bounds a soak batch's records.
	crashMaxBatch = 8
	// crashSegment is how many records of a shard one checksum covers.
	crashSegment = 1024
	// crashMaxProblems is how many problems a verification reports in full.
	crashMaxProblems = 20
)

// soakWho is one of the soak's publishers.
type soakWho uint8

const (
	whoSingle soakWho = iota // one record per publish
	whoBatch                 // pipelined batches
	whoIdem                  // the idempotent producer
	soakWhos                 // how many there are
)

// soakWhoNames are the publishers' names, as their payloads begin.
var soakWhoNames = [soakWhos]string{"single", "batch", "idem"}

func (w soakWho) String() string { return soakWhoNames[w] }

// recordID is one record of the soak: its publisher's seq-th record (from
// 1), of the batch that began with the record numbered first.
type recordID struct {
	who   soakWho
	first uint64
	seq   uint64
}

func (id recordID) String() string { return fmt.Sprintf("%s-%d-%d", id.who, id.seq, id.first) }

// soakPad returns how many padding bytes each record of the batch of who
// that begins with record first carries: a third of the batches are padded
// so that the larger ones cross Badger's value threshold (1 KiB) and both
// the LSM tree and the value log hold batches.
func soakPad(who soakWho, first uint64) int {
	h := mix64(uint64(who)<<56 ^ first)
	if h%3 != 0 {
		return 0
	}
	return 100 + int(h>>8%200)
}

// mix64 is SplitMix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// appendPayload appends id's payload: "<who>-<seq>-<first>" and its
// padding of dots.
func (id recordID) appendPayload(dst []byte) []byte {
	dst = fmt.Appendf(dst, "%s-%d-%d", id.who, id.seq, id.first)
	for range soakPad(id.who, id.first) {
		dst = append(dst, '.')
	}
	return dst
}

// parseRecord returns the identity of payload if it is exactly the payload
// of a soak record (scratch is reused to check that).
func parseRecord(payload, scratch []byte) (recordID, []byte, bool) {
	var id recordID
	rest := payload
	found := false
	for w := range soakWhos {
		if n := len(soakWhoNames[w]); len(rest) > n && string(rest[:n]) == soakWhoNames[w] && rest[n] == '-' {
			id.who, rest, found = w, rest[n+1:], true
			break
		}
	}
	if !found {
		return id, scratch, false
	}
	var ok bool
	if id.seq, rest, ok = parseDecimal(rest); !ok || len(rest) == 0 || rest[0] != '-' {
		return id, scratch, false
	}
	if id.first, _, ok = parseDecimal(rest[1:]); !ok || id.first == 0 || id.seq < id.first || id.seq-id.first >= crashMaxBatch {
		return id, scratch, false
	}
	scratch = id.appendPayload(scratch[:0])
	return id, scratch, string(scratch) == string(payload)
}

// parseDecimal parses the digits b begins with.
func parseDecimal(b []byte) (uint64, []byte, bool) {
	var n uint64
	i := 0
	for ; i < len(b) && i < 19 && '0' <= b[i] && b[i] <= '9'; i++ {
		n = n*10 + uint64(b[i]-'0')
	}
	return n, b[i:], i > 0
}

// soakBatch is one published batch: n records of who, numbered from first.
type soakBatch struct {
	who   soakWho
	first uint64
	n     int
}

// record returns the identity of the batch's j-th record.
func (b soakBatch) record(j int) recordID {
	return recordID{who: b.who, first: b.first, seq: b.first + uint64(j)}
}

// payloads returns the batch's payloads.
func (b soakBatch) payloads() [][]byte {
	out := make([][]byte, b.n)
	for j := range out {
		out[j] = b.record(j).appendPayload(nil)
	}
	return out
}

func (b soakBatch) String() string {
	return fmt.Sprintf("%s %d-%d", b.who, b.first, b.first+uint64(b.n)-1)
}

// batchKey names a batch by its publisher and first record.
type batchKey struct {
	who   soakWho
	first uint64
}

// doubtBatch is a batch whose publish failed with ErrOutcomeUnknown (in
// flight at a kill): it may or may not be stored, but whole or not at all,
// once, on its shard.
type doubtBatch struct {
	soakBatch
	shard uint32
	// seen is set once its first record was read; at is its offset.
	seen bool
	at   uint64
}

// idemLast is the idempotent producer's last acknowledged batch on a
// shard, which it re-sends now and then: answered as a duplicate at offset.
type idemLast struct {
	ok     bool
	seq    uint64
	batch  soakBatch
	offset uint64
}

// soakShard is the model of one shard.
type soakShard struct {
	// verified is the shard's verified tail: every record below it was
	// read back and checked, once.
	verified uint64
	// checking is the tail of the verification under way (verified when
	// none is): every later ack is at or above it.
	checking uint64
	// acked are the batches acknowledged since the last verification
	// began, by offset (all at or above checking).
	acked map[uint64]soakBatch
	// delivered are the group's deliveries since the last verification,
	// by offset.
	delivered map[uint64]recordID
	// segs are the checksums of the records [i·crashSegment,
	// (i+1)·crashSegment) below verified; partial is the checksum of the
	// records from len(segs)·crashSegment to verified.
	segs    []uint64
	partial uint64
}

// soakGroupShard is what the group consumer was told on one shard.
type soakGroupShard struct {
	// sure: every offset below it was acked (the ack answered, or in doubt
	// and below a cursor the node reported since).
	sure uint64
	// acked are offsets at or above sure whose ack was answered; doubt
	// those whose ack was in flight at a kill (outcome unknown) and not
	// acked since.
	acked, doubt map[uint64]struct{}
	// committed is the cursor the node reported at the last verification.
	committed uint64
}

// soakStats are the soak's counts, for its log.
type soakStats struct {
	ackedBatches, ackedRecords int
	// doubtBatches failed with ErrOutcomeUnknown; doubtLanded of them were
	// stored.
	doubtBatches, doubtLanded int
	// idemResent are deliberate re-sends of an acknowledged batch, each
	// answered as a duplicate; idemKillDuplicate and idemKillWritten are
	// fresh batches in flight at a kill that the client sent again: answered
	// as duplicates (stored before the kill), or written after it.
	idemResent, idemKillDuplicate, idemKillWritten int
	// groupAcks are answered acks; groupAckDoubt acks in flight at a kill;
	// groupPollDoubt polls in flight at a kill; groupNotDelivered acks,
	// after a kill, of records the restarted node had not delivered yet.
	groupAcks, groupAckDoubt, groupPollDoubt, groupNotDelivered int
	// groupDelivered are records delivered; groupReadBack those checked by
	// reading them again (delivered below the verified tail).
	groupDelivered, groupReadBack int
	// verifiedRecords are the records verified once each; rereadRecords
	// the records read again to check earlier verifications.
	verifiedRecords, rereadRecords uint64
	// lost are acknowledged records not found where their ack said;
	// duplicated records stored where no ack or doubt allows them (a
	// second copy, or a write of a re-send answered as a duplicate).
	lost, duplicated int
}

// soakModel is what the soak's clients were told, across every run of the
// node. mu guards every field: the workers record their acks while the
// soak verifies.
type soakModel struct {
	mu sync.Mutex
	// shards are the stream's shards.
	shards [crashShards]soakShard
	// group is the consumer group, per shard.
	group [crashShards]soakGroupShard
	// issued is the last record number each publisher used.
	issued [soakWhos]uint64
	// doubt are the batches in doubt since the last verification.
	doubt map[batchKey]*doubtBatch
	// idem is the idempotent producer's last acknowledged batch per shard.
	idem [crashShards]idemLast
	// stats are the counts.
	stats soakStats
	// problems are what the checks found wrong, in full up to
	// crashMaxProblems; more counts the others.
	problems []string
	more     int
}

func newSoakModel() *soakModel {
	m := &soakModel{doubt: map[batchKey]*doubtBatch{}}
	for s := range crashShards {
		m.shards[s].acked = map[uint64]soakBatch{}
		m.shards[s].delivered = map[uint64]recordID{}
		m.group[s].acked = map[uint64]struct{}{}
		m.group[s].doubt = map[uint64]struct{}{}
	}
	return m
}

// problemLocked notes a failed check.
func (m *soakModel) problemLocked(format string, args ...any) {
	if len(m.problems) < crashMaxProblems {
		m.problems = append(m.problems, fmt.Sprintf(format, args...))
	} else {
		m.more++
	}
}

// problem notes a failed check.
func (m *soakModel) problem(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.problemLocked(format, args...)
}

// takeProblems returns the problems noted so far and forgets them.
func (m *soakModel) takeProblems() (problems []string, more int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	problems, more = m.problems, m.more
	m.problems, m.more = nil, 0
	return problems, more
}

// next numbers a new batch of n records of who.
func (m *soakModel) next(who soakWho, n int) soakBatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := soakBatch{who: who, first: m.issued[who] + 1, n: n}
	m.issued[who] += uint64(n)
	return b
}

// acked notes that b was acknowledged at offset of shard.
func (m *soakModel) acked(shard uint32, offset uint64, b soakBatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ackedLocked(shard, offset, b)
}

func (m *soakModel) ackedLocked(shard uint32, offset uint64, b soakBatch) {
	sh := &m.shards[shard]
	switch prev, dup := sh.acked[offset]; {
	case offset < sh.checking:
		m.stats.duplicated += b.n
		m.problemLocked("%v acknowledged at %d/%d, below the checked tail %d: an offset given twice", b, shard, offset, sh.checking)
		return
	case dup:
		m.stats.duplicated += b.n
		m.problemLocked("%v and %v both acknowledged at %d/%d", prev, b, shard, offset)
		return
	}
	sh.acked[offset] = b
	m.stats.ackedBatches++
	m.stats.ackedRecords += b.n
}

// inDoubt notes that b, published to shard, failed with ErrOutcomeUnknown.
func (m *soakModel) inDoubt(shard uint32, b soakBatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.doubt[batchKey{b.who, b.first}] = &doubtBatch{soakBatch: b, shard: shard}
	m.stats.doubtBatches++
}

// idemAcked notes the idempotent producer's batch b, sequence seq,
// acknowledged at offset of shard; duplicate and killed say whether it was
// answered as a duplicate and whether a kill happened while it was out.
func (m *soakModel) idemAcked(shard uint32, offset uint64, seq uint64, b soakBatch, duplicate, killed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case duplicate && !killed:
		m.problemLocked("fresh idempotent sequence %d (%v) answered as a duplicate at %d/%d with no kill meanwhile", seq, b, shard, offset)
	case duplicate:
		m.stats.idemKillDuplicate++
	case killed:
		m.stats.idemKillWritten++
	}
	m.ackedLocked(shard, offset, b)
	m.idem[shard] = idemLast{ok: true, seq: seq, batch: b, offset: offset}
}

// idemLastOf returns the idempotent producer's last acknowledged batch on
// shard.
func (m *soakModel) idemLastOf(shard uint32) idemLast {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.idem[shard]
}

// count adds to one of the stats under the lock.
func (m *soakModel) count(f func(*soakStats)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.stats)
}

// delivered notes that the group delivered payload as offset of shard.
func (m *soakModel) delivered(shard uint32, offset uint64, payload []byte, scratch []byte) []byte {
	id, scratch, ok := parseRecord(payload, scratch)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.groupDelivered++
	if !ok {
		m.problemLocked("the group delivered %.40q as %d/%d, which no publisher wrote", payload, shard, offset)
		return scratch
	}
	sh := &m.shards[shard]
	if prev, ok := sh.delivered[offset]; ok && prev != id {
		m.problemLocked("the group delivered %d/%d as %v, earlier as %v", shard, offset, id, prev)
		return scratch
	}
	sh.delivered[offset] = id
	return scratch
}

// groupAcked notes an answered group ack of offsets of shard.
func (m *soakModel) groupAcked(shard uint32, offsets []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := &m.group[shard]
	for _, off := range offsets {
		if off >= g.sure {
			g.acked[off] = struct{}{}
			delete(g.doubt, off)
		}
	}
	g.advance()
	m.stats.groupAcks++
}

// groupInDoubt notes a group ack of offsets of shard in flight at a kill.
func (m *soakModel) groupInDoubt(shard uint32, offsets []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := &m.group[shard]
	for _, off := range offsets {
		if _, acked := g.acked[off]; !acked && off >= g.sure {
			g.doubt[off] = struct{}{}
		}
	}
	m.stats.groupAckDoubt++
}

// advance moves sure past the acked offsets it reaches.
func (g *soakGroupShard) advance() {
	for {
		if _, ok := g.acked[g.sure]; !ok {
			return
		}
		delete(g.acked, g.sure)
		g.sure++
	}
}

// maybe returns the first offset from sure that was neither acked nor in
// doubt: no cursor may pass it.
func (g *soakGroupShard) maybe() uint64 {
	off := g.sure
	for {
		_, a := g.acked[off]
		_, d := g.doubt[off]
		if !a && !d {
			return off
		}
		off++
	}
}

// checkGroup checks each shard's committed cursor after kill: at least
// every offset acked before (acks are answered once durable; so it never
// goes backwards either), never past an offset that was not acked (or
// whose ack was in doubt), never past the tail. An ack in doubt below the
// cursor took effect (nothing else settles a record here: no nacks, and
// attempts never run out).
func (m *soakModel) checkGroup(kill int, committed, tails []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range crashShards {
		g := &m.group[s]
		switch maybe := g.maybe(); {
		case committed[s] < g.committed:
			m.problemLocked("after kill %d: shard %d's group cursor went back from %d to %d", kill, s, g.committed, committed[s])
		case committed[s] < g.sure:
			m.problemLocked("after kill %d: shard %d's group cursor is %d, but every offset below %d was acked", kill, s, committed[s], g.sure)
		case committed[s] > maybe:
			m.problemLocked("after kill %d: shard %d's group cursor is %d, past offset %d, which was never acked", kill, s, committed[s], maybe)
		case committed[s] > tails[s]:
			m.problemLocked("after kill %d: shard %d's group cursor %d is past its tail %d", kill, s, committed[s], tails[s])
		}
		for off := range g.doubt {
			if off < committed[s] {
				g.acked[off] = struct{}{}
				delete(g.doubt, off)
			}
		}
		g.advance()
		g.committed = max(g.committed, committed[s])
	}
}

// summary returns the counts, and how many records the group surely
// settled over every shard.
func (m *soakModel) summary() (soakStats, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sure uint64
	for s := range crashShards {
		sure += m.group[s].sure
	}
	return m.stats, sure
}

// crcTable is the soak's checksum table.
var crcTable = crc64.MakeTable(crc64.ECMA)

// sumRecord adds one record's payload to the checksum crc.
func sumRecord(crc uint64, payload []byte) uint64 {
	var n [binary.MaxVarintLen64]byte
	crc = crc64.Update(crc, crcTable, n[:binary.PutUvarint(n[:], uint64(len(payload)))])
	return crc64.Update(crc, crcTable, payload)
}

// soakCheck is one verification of the node. It begins at a moment when
// nothing is in flight (the soak holds its workers), with the shards' tails
// then: it takes the model's pending state (acks, doubts, deliveries since
// the last verification) out of the model, so that nothing else touches it.
// Its reads may then run while the workers go on: every later ack is at or
// above those tails, every later delivery is checked by the next
// verification.
type soakCheck struct {
	m    *soakModel
	kill int
	// shards are the shards' checks.
	shards [crashShards]*shardCheck
	// doubt are the batches in doubt since the last verification.
	doubt map[batchKey]*doubtBatch
	// readBack are deliveries below the verified tail, to read again, per
	// shard.
	readBack [crashShards]map[uint64]recordID
	// scratch is reused to build payloads.
	scratch []byte
}

// check begins the verification after kill of the shards, whose tails the
// node reports as tails. Nothing may be in flight.
func (m *soakModel) check(kill int, tails []uint64) *soakCheck {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := &soakCheck{m: m, kill: kill, doubt: m.doubt}
	m.doubt = map[batchKey]*doubtBatch{}
	for s := range uint32(crashShards) {
		v.shards[s] = v.shardLocked(s, tails[s])
	}
	return v
}

// shardCheck verifies one shard's records from its verified tail to tail,
// read in offset order.
type shardCheck struct {
	v     *soakCheck
	shard uint32
	// from is the verified tail it began at; next the offset due next;
	// tail the node's tail.
	from, next, tail uint64
	// acked and delivered are the shard's acks and deliveries since the
	// last verification.
	acked     map[uint64]soakBatch
	delivered map[uint64]recordID
	// cur is the batch the records from curAt belong to, left of its
	// records still due; curDoubt is set when it is a batch in doubt.
	cur      soakBatch
	curAt    uint64
	left     int
	curDoubt *doubtBatch
	// segs and partial continue the shard's checksums.
	segs    []uint64
	partial uint64
}

// shardLocked begins the check of shard, whose tail is tail.
func (v *soakCheck) shardLocked(shard uint32, tail uint64) *shardCheck {
	m := v.m
	sh := &m.shards[shard]
	c := &shardCheck{v: v, shard: shard, from: sh.verified, next: sh.verified, tail: tail,
		acked: sh.acked, delivered: sh.delivered, segs: sh.segs, partial: sh.partial}
	sh.acked, sh.delivered = map[uint64]soakBatch{}, map[uint64]recordID{}
	if tail < sh.verified {
		m.problemLocked("after kill %d: shard %d's tail is %d, below its verified tail %d", v.kill, shard, tail, sh.verified)
		c.tail = sh.verified // nothing to read; finish reports the acks
	}
	sh.checking = c.tail
	return c
}

// span returns the offsets to read: [from, to).
func (c *shardCheck) span() (from, to uint64) { return c.from, c.tail }

// record checks the record at off, the next one due: the record the batch
// under way has next, or the first of a batch acknowledged at off, or the
// first of a batch in doubt on this shard, not seen before. Anything else
// is a duplicate (or garbage).
func (c *shardCheck) record(off uint64, payload []byte) {
	v, m := c.v, c.v.m
	if off != c.next {
		m.problem("after kill %d: read %d/%d where %d was due", v.kill, c.shard, off, c.next)
		c.next = off
	}
	c.next++
	c.partial = sumRecord(c.partial, payload)
	if (off+1)%crashSegment == 0 {
		c.segs = append(c.segs, c.partial)
		c.partial = 0
	}
	id, scratch, ok := parseRecord(payload, v.scratch)
	v.scratch = scratch
	if d, delivered := c.delivered[off]; delivered {
		delete(c.delivered, off)
		if !ok || d != id {
			m.problem("after kill %d: the group delivered %v as %d/%d, which holds %.40q", v.kill, d, c.shard, off, payload)
		}
	}
	if c.left == 0 {
		b, acked := c.acked[off]
		var d *doubtBatch
		if !acked && ok {
			d = v.doubt[batchKey{id.who, id.first}]
		}
		switch {
		case acked:
			delete(c.acked, off)
			c.cur, c.curAt, c.left, c.curDoubt = b, off, b.n, nil
		case d != nil && !d.seen && d.shard == c.shard && id.seq == id.first:
			d.seen, d.at = true, off
			c.cur, c.curAt, c.left, c.curDoubt = d.soakBatch, off, d.n, d
		default:
			m.mu.Lock()
			defer m.mu.Unlock()
			m.stats.duplicated++
			switch {
			case !ok:
				m.problemLocked("after kill %d: %d/%d holds %.40q, which no publisher wrote", v.kill, c.shard, off, payload)
			case id.seq <= m.issued[id.who]:
				m.problemLocked("after kill %d: %d/%d holds %v, neither acknowledged there nor in doubt: a duplicate", v.kill, c.shard, off, id)
			default:
				m.problemLocked("after kill %d: %d/%d holds %v, which was never published", v.kill, c.shard, off, id)
			}
			return
		}
	}
	want := c.cur.record(c.cur.n - c.left)
	c.left--
	if ok && id == want {
		return
	}
	m.count(func(s *soakStats) { s.lost++ })
	if c.curDoubt != nil {
		m.problem("after kill %d: %v, in doubt, is torn: %d/%d holds %.40q, not %v", v.kill, c.cur, c.shard, off, payload, want)
	} else {
		m.problem("after kill %d: %v was acknowledged at %d/%d, but %d/%d holds %.40q, not %v", v.kill, c.cur, c.shard, c.curAt, c.shard, off, payload, want)
	}
}

// finish ends the shard's check: every acknowledged batch was found, no
// batch is cut off at the tail, every delivery was checked or is to be
// read again; the shard's verified tail becomes its tail.
func (c *shardCheck) finish() {
	v, m := c.v, c.v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.next != c.tail {
		m.problemLocked("after kill %d: shard %d read up to %d, its tail is %d", v.kill, c.shard, c.next, c.tail)
	}
	if c.left > 0 {
		m.stats.lost += c.left
		m.problemLocked("after kill %d: %v at %d/%d is cut off at the tail %d", v.kill, c.cur, c.shard, c.curAt, c.tail)
	}
	for _, off := range slices.Sorted(maps.Keys(c.acked)) {
		b := c.acked[off]
		m.stats.lost += b.n
		m.problemLocked("after kill %d: %v was acknowledged at %d/%d; the tail is %d: lost", v.kill, b, c.shard, off, c.tail)
	}
	for off, id := range c.delivered {
		switch {
		case off >= c.tail:
			m.problemLocked("after kill %d: the group delivered %v as %d/%d, past the tail %d", v.kill, id, c.shard, off, c.tail)
		case off < c.from:
			if v.readBack[c.shard] == nil {
				v.readBack[c.shard] = map[uint64]recordID{}
			}
			v.readBack[c.shard][off] = id
		}
	}
	sh := &m.shards[c.shard]
	if c.next > sh.verified {
		m.stats.verifiedRecords += c.next - sh.verified
		sh.verified, sh.segs, sh.partial = c.next, c.segs, c.partial
	}
}

// readBackRanges returns the deliveries of shard to read again, as ranges
// [from, to) in order.
func (v *soakCheck) readBackRanges(shard uint32) [][2]uint64 {
	var out [][2]uint64
	for _, off := range slices.Sorted(maps.Keys(v.readBack[shard])) {
		if n := len(out); n > 0 && out[n-1][1] == off {
			out[n-1][1]++
		} else {
			out = append(out, [2]uint64{off, off + 1})
		}
	}
	return out
}

// readBackRecord checks a delivery read again: off of shard holds payload.
func (v *soakCheck) readBackRecord(shard uint32, off uint64, payload []byte) {
	d, ok := v.readBack[shard][off]
	if !ok {
		return
	}
	delete(v.readBack[shard], off)
	id, scratch, ok := parseRecord(payload, v.scratch)
	v.scratch = scratch
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	v.m.stats.groupReadBack++
	if !ok || id != d {
		v.m.problemLocked("after kill %d: the group delivered %v as %d/%d, which holds %.40q", v.kill, d, shard, off, payload)
	}
}

// end ends the verification: every batch in doubt was found whole, once,
// or not at all (and now never will be: nothing re-sends it), and every
// delivery to read again was.
func (v *soakCheck) end() {
	m := v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range v.doubt {
		if d.seen {
			m.stats.doubtLanded++
		}
	}
	for s := range crashShards {
		for off, id := range v.readBack[s] {
			m.problemLocked("after kill %d: the group delivered %v as %d/%d, which was not read again", v.kill, id, s, off)
		}
	}
}

// segments returns how many full checksum segments shard has, and its
// verified tail.
func (m *soakModel) segments(shard uint32) (int, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.shards[shard].segs), m.shards[shard].verified
}

// reread checks records of shard read again from offset from (a multiple
// of crashSegment) against the checksums of their first verification.
type reread struct {
	m     *soakModel
	kill  int
	shard uint32
	next  uint64
	crc   uint64
}

// reread begins a re-read of shard from the segment seg.
func (m *soakModel) reread(kill int, shard uint32, seg int) *reread {
	return &reread{m: m, kill: kill, shard: shard, next: uint64(seg) * crashSegment}
}

// record adds the record read again at off.
func (r *reread) record(off uint64, payload []byte) {
	if off != r.next {
		r.m.problem("after kill %d: re-read %d/%d where %d was due", r.kill, r.shard, off, r.next)
		r.next = off
	}
	r.next++
	r.crc = sumRecord(r.crc, payload)
	if r.next%crashSegment != 0 {
		return
	}
	seg := r.next/crashSegment - 1
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	r.m.stats.rereadRecords += crashSegment
	sh := &r.m.shards[r.shard]
	if seg < uint64(len(sh.segs)) && sh.segs[seg] != r.crc {
		r.m.problemLocked("after kill %d: records %d-%d of shard %d changed since they were verified", r.kill, seg*crashSegment, r.next-1, r.shard)
	}
	r.crc = 0
}

// finish ends a re-read that went up to the verified tail, checking the
// last, partial segment.
func (r *reread) finish() {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	sh := &r.m.shards[r.shard]
	if r.next != sh.verified {
		r.m.problemLocked("after kill %d: re-read shard %d up to %d, its verified tail is %d", r.kill, r.shard, r.next, sh.verified)
		return
	}
	r.m.stats.rereadRecords += r.next % crashSegment
	if r.crc != sh.partial {
		r.m.problemLocked("after kill %d: records %d-%d of shard %d changed since they were verified", r.kill, r.next/crashSegment*crashSegment, r.next-1, r.shard)
	}
}

// The soak model's checks find what they are for: each case feeds a model
// acks, doubts and deliveries, then the records a node might store, and
// expects the problems (none for a faithful node), so that the soak cannot
// pass because its checks are blind.
func TestSoakModelChecks(t *testing.T) {
	type stored struct {
		shard uint32
		id    recordID
	}
	// a, b and c are batches of the batch publisher (records 1-3, 4-5 and
	// 6); d is one of the single publisher.
	a := soakBatch{who: whoBatch, first: 1, n: 3}
	b := soakBatch{who: whoBatch, first: 4, n: 2}
	c := soakBatch{who: whoBatch, first: 6, n: 1}
	d := soakBatch{who: whoSingle, first: 1, n: 1}
	recs := func(shard uint32, bs ...soakBatch) []stored {
		var out []stored
		for _, b := range bs {
			for j := range b.n {
				out = append(out, stored{shard, b.record(j)})
			}
		}
		return out
	}
	cases := []struct {
		name string
		// setup acks a at 0/0 and d at 1/0; b is in doubt on shard 0 unless
		// the case says otherwise.
		setup func(m *soakModel)
		// node is what the node stores, in order per shard.
		node []stored
		// want are substrings of the problems, in order; none for a
		// faithful node.
		want []string
	}{
		{name: "faithful, the batch in doubt stored", node: append(recs(0, a, b), recs(1, d)...)},
		{name: "faithful, the batch in doubt not stored", node: append(recs(0, a), recs(1, d)...)},
		{name: "an acked record lost", node: append(recs(0, a)[:2], recs(1, d)...),
			want: []string{"cut off at the tail"}},
		{name: "an acked batch lost, the tail before it", node: recs(0, a),
			want: []string{"acknowledged at 1/0; the tail is 0: lost"}},
		{name: "an acked batch replaced", node: append(recs(0, b), recs(1, d)...),
			want: []string{"was acknowledged at 0/0, but 0/0 holds", "was acknowledged at 0/0, but 0/1 holds", "cut off at the tail 2"}},
		{name: "a record stored twice", node: append(append(recs(0, a), recs(0, a)[2]), recs(1, d)...),
			want: []string{"holds batch-3-1, neither acknowledged there nor in doubt: a duplicate"}},
		{name: "the batch in doubt stored twice", node: append(recs(0, a, b, b), recs(1, d)...),
			want: []string{"batch-4-4, neither acknowledged", "batch-5-4, neither acknowledged"}},
		{name: "the batch in doubt torn", node: append(append(recs(0, a), recs(0, b)[0]), recs(1, d)...),
			want: []string{"is cut off at the tail"}},
		{name: "the batch in doubt on another shard", node: append(recs(0, a), recs(1, d, b)...),
			want: []string{"1/1 holds batch-4-4, neither acknowledged there nor in doubt", "1/2 holds batch-5-4"}},
		{name: "a record never published", node: append(recs(0, a, c), recs(1, d)...),
			want: []string{"batch-6-6, which was never published"}},
		{name: "a delivery not as stored",
			setup: func(m *soakModel) {
				m.delivered(0, 1, recordID{who: whoBatch, first: 4, seq: 4}.appendPayload(nil), nil)
			},
			node: append(recs(0, a), recs(1, d)...),
			want: []string{"the group delivered batch-4-4 as 0/1, which holds"}},
		{name: "a delivery past the tail",
			setup: func(m *soakModel) {
				m.delivered(1, 1, recordID{who: whoBatch, first: 4, seq: 4}.appendPayload(nil), nil)
			},
			node: append(recs(0, a), recs(1, d)...),
			want: []string{"the group delivered batch-4-4 as 1/1, past the tail 1"}},
		{name: "an offset acknowledged twice",
			setup: func(m *soakModel) { m.acked(0, 0, c) },
			node:  append(recs(0, a), recs(1, d)...),
			want:  []string{"both acknowledged at 0/0"}},
		{name: "a fresh idempotent sequence answered as a duplicate without a kill",
			setup: func(m *soakModel) { m.idemAcked(2, 0, 1, soakBatch{who: whoIdem, first: 1, n: 1}, true, false) },
			node:  append(append(recs(0, a), recs(1, d)...), recs(2, soakBatch{who: whoIdem, first: 1, n: 1})...),
			want:  []string{"answered as a duplicate at 2/0 with no kill meanwhile"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newSoakModel()
			m.issued[whoBatch], m.issued[whoSingle] = 5, 1
			m.acked(0, 0, a)
			m.acked(1, 0, d)
			m.inDoubt(0, b)
			if tc.setup != nil {
				tc.setup(m)
			}
			var tails [crashShards]uint64
			for _, r := range tc.node {
				tails[r.shard]++
			}
			v := m.check(1, tails[:])
			var off [crashShards]uint64
			for _, r := range tc.node {
				v.shards[r.shard].record(off[r.shard], r.id.appendPayload(nil))
				off[r.shard]++
			}
			for _, sc := range v.shards {
				sc.finish()
			}
			v.end()
			got, _ := m.takeProblems()
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d: %q, want it to say %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// Payloads parse back to their identity, and nothing else parses.
func TestSoakModelPayloads(t *testing.T) {
	for _, id := range []recordID{{whoSingle, 1, 1}, {whoBatch, 1, 8}, {whoIdem, 123456789, 123456790}} {
		p := id.appendPayload(nil)
		got, _, ok := parseRecord(p, nil)
		if !ok || got != id {
			t.Errorf("%q parses as %v, %v; want %v", p, got, ok, id)
		}
		for _, bad := range [][]byte{p[:len(p)-1], append(slices.Clone(p), '.'), append([]byte("x"), p...), []byte("batch-9-1")} {
			if got, _, ok := parseRecord(bad, nil); ok {
				t.Errorf("%q parses as %v", bad, got)
			}
		}
	}
	padded := 0
	for first := range uint64(300) {
		if soakPad(whoBatch, first+1) > 0 {
			padded++
		}
	}
	if padded < 60 || padded > 140 {
		t.Errorf("%d of 300 batches padded, want about a third", padded)
	}
}

// A re-read finds a record changed since it was verified.
func TestSoakModelReread(t *testing.T) {
	m := newSoakModel()
	b := soakBatch{who: whoBatch, first: 1, n: crashMaxBatch}
	var n uint64
	for ; n < crashSegment+crashMaxBatch; n += crashMaxBatch {
		b.first = n + 1
		m.acked(0, n, b)
	}
	m.issued[whoBatch] = n
	v := m.check(1, []uint64{n, 0, 0})
	for off := range n {
		v.shards[0].record(off, recordID{who: whoBatch, first: off/crashMaxBatch*crashMaxBatch + 1, seq: off + 1}.appendPayload(nil))
	}
	for _, sc := range v.shards {
		sc.finish()
	}
	v.end()
	if got, _ := m.takeProblems(); len(got) > 0 {
		t.Fatalf("problems %q after a faithful node", got)
	}
	for _, changed := range []uint64{n, 5, crashSegment + 2} {
		r := m.reread(2, 0, 0)
		for off := range n {
			id := recordID{who: whoBatch, first: off/crashMaxBatch*crashMaxBatch + 1, seq: off + 1}
			if off == changed {
				id.who = whoIdem
			}
			r.record(off, id.appendPayload(nil))
		}
		r.finish()
		got, _ := m.takeProblems()
		if want := changed < n; (len(got) == 1) != want || want && !strings.Contains(got[0], "changed since they were verified") {
			t.Errorf("record %d changed: problems %q", changed, got)
		}
	}
}
