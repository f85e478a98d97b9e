package actors

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"

	"github.com/heraldmq/herald/net/fuzzseed"
)

// The actors' decoders of bytes from a client or from storage are fuzzed
// here: group cursors (parseCursor), idempotent producer records
// (decodeProducerState), stream records (decodeStoredStream) and a group's
// persisted state (groupCore.load). Each target checks that the decoder
// never panics, that a refusal is its typed error, and that what it accepts
// re-encodes to the same bytes or, where the encoding is not canonical, to a
// value that decodes the same.
//
// The seed corpora under testdata/fuzz/<FuzzName>/ are built from real
// encodings by fuzzSeedFiles; TestFuzzSeedFilesCurrent fails when one is
// stale, and
//
//	go test -run '^TestFuzzSeedFilesCurrent$' -update-seeds ./actors/
//
// rewrites them. Files the fuzzer adds (failing inputs, named by hash) are
// left alone.

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the seed files under testdata/fuzz from the encoders")

// fuzzSecret is the node secret the cursor targets verify with: the seeds
// minted under it verify, anything else the fuzzer makes must not.
var fuzzSecret = bytes.Repeat([]byte{0x5a}, 32)

// wantInvalidCursor fails unless err is the invalid_cursor error.
func wantInvalidCursor(t *testing.T, what string, err *wire.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: the cursor verified", what)
	}
	if err.Code != wire.CodeInvalidCursor || !errors.Is(err, &wire.Error{Code: wire.CodeInvalidCursor}) {
		t.Fatalf("%s: error %v, want invalid_cursor", what, err)
	}
}

// FuzzParseCursor parses arbitrary bytes as a cursor: they verify only when
// they are exactly what mintCursor makes under the node's secret, and
// nothing verifies under another secret.
func FuzzParseCursor(f *testing.F) {
	other := bytes.Repeat([]byte{0xa5}, 32)
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, werr := parseCursor(fuzzSecret, b)
		if werr != nil {
			wantInvalidCursor(t, "parse", werr)
			return
		}
		if len(tok.ranges) > maxCursorRanges {
			t.Fatalf("verified a cursor of %d ranges; a node mints at most %d", len(tok.ranges), maxCursorRanges)
		}
		if re := mintCursor(fuzzSecret, tok); !bytes.Equal(re, b) {
			t.Fatalf("re-minted %x, want %x", re, b)
		}
		_, werr = parseCursor(other, b)
		wantInvalidCursor(t, "another node's secret", werr)
	})
}

// FuzzCursorTamper mints a cursor for a token the fuzzer picks (ranges:
// 16 bytes per range) and checks that it parses back to that token, and
// that the cursor with one byte changed, cut, or lengthened does not
// verify.
func FuzzCursorTamper(f *testing.F) {
	f.Fuzz(func(t *testing.T, stream, group, epoch uint64, ranges []byte, pos uint32, flip byte) {
		tok := cursorToken{stream: stream, group: group, epoch: epoch}
		for len(ranges) >= cursorRange && len(tok.ranges) < maxCursorRanges {
			tok.ranges = append(tok.ranges, cursorRangeOf{shard: binary.BigEndian.Uint32(ranges), first: binary.BigEndian.Uint64(ranges[4:]),
				count: binary.BigEndian.Uint32(ranges[12:])})
			ranges = ranges[cursorRange:]
		}
		b := mintCursor(fuzzSecret, tok)
		if len(b) > wire.MaxCursorBytes {
			t.Fatalf("minted %d bytes, more than a cursor may hold (%d)", len(b), wire.MaxCursorBytes)
		}
		got, werr := parseCursor(fuzzSecret, b)
		if werr != nil {
			t.Fatalf("a minted cursor does not parse: %v", werr)
		}
		if got.stream != tok.stream || got.group != tok.group || got.epoch != tok.epoch || !slices.Equal(got.ranges, tok.ranges) {
			t.Fatalf("parsed %+v, minted %+v", got, tok)
		}
		i := int(pos % uint32(len(b)))
		if flip != 0 {
			m := bytes.Clone(b)
			m[i] ^= flip
			_, werr = parseCursor(fuzzSecret, m)
			wantInvalidCursor(t, fmt.Sprintf("byte %d xor %#x", i, flip), werr)
		}
		_, werr = parseCursor(fuzzSecret, b[:i])
		wantInvalidCursor(t, fmt.Sprintf("cut to %d bytes", i), werr)
		_, werr = parseCursor(fuzzSecret, append(bytes.Clone(b), flip))
		wantInvalidCursor(t, "one byte longer", werr)
	})
}

// FuzzDecodeProducerState decodes a shard's idempotent producer record:
// refusals are errBadProducerState, and an accepted record re-encodes to
// the same bytes and remembers at most producerMemory batches.
func FuzzDecodeProducerState(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeProducerState(b)
		if err != nil {
			if !errors.Is(err, errBadProducerState) {
				t.Fatalf("error %v is not errBadProducerState", err)
			}
			return
		}
		if len(p.recent) > producerMemory {
			t.Fatalf("decoded %d recent batches, more than the %d remembered", len(p.recent), producerMemory)
		}
		if re := p.encode(); !bytes.Equal(re, b) {
			t.Fatalf("re-encoded %x, want %x", re, b)
		}
	})
}

// FuzzDecodeStoredStream decodes a stream record as the catalog does at
// start: refusals wrap errBadStreamRecord; an accepted record is one
// onCreate could have written (storedFrom of a valid name and config), and
// what the catalog would write for it decodes to the same record.
func FuzzDecodeStoredStream(f *testing.F) {
	f.Fuzz(func(t *testing.T, value []byte) {
		st, err := decodeStoredStream(value)
		if err != nil {
			if !errors.Is(err, errBadStreamRecord) {
				t.Fatalf("error %v does not wrap errBadStreamRecord", err)
			}
			return
		}
		name := wire.StreamName{Tenant: st.Tenant, Namespace: st.NS, Stream: st.Stream}
		if err := name.Validate(); err != nil {
			t.Fatalf("accepted stream name %q: %v", name, err)
		}
		if err := ValidateConfig(st.config()); err != nil {
			t.Fatalf("accepted config %+v: %v", st.config(), err)
		}
		if st.ID == 0 {
			t.Fatal("accepted stream id 0")
		}
		again := storedFrom(st.ID, name, st.config(), st.Created)
		again.CreatedReplicas, again.CreatedNodes = st.CreatedReplicas, st.CreatedNodes
		if !reflect.DeepEqual(again, st) {
			t.Fatalf("record %+v is not what the catalog writes for it: %+v", st, again)
		}
		re, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeStoredStream(re)
		if err != nil || !reflect.DeepEqual(back, st) {
			t.Fatalf("re-encoded record %s decodes to %+v, %v; want %+v", re, back, err, st)
		}
	})
}

// The group whose state FuzzGroupCoreLoad loads.
const (
	fuzzGroupStream = 7
	fuzzGroupName   = "g"
)

// A group records blob is a group's metadata as FuzzGroupCoreLoad takes
// it: each record is key suffix length u8 | key suffix (the key after
// groupPrefix) | value length u16 | value. A cut record at the end is
// dropped.
func encodeGroupRecords(prefix []byte, puts []storage.MetaPut) []byte {
	var b []byte
	for _, p := range puts {
		suffix := p.Key[len(prefix):]
		b = append(b, byte(len(suffix)))
		b = append(b, suffix...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.Value)))
		b = append(b, p.Value...)
	}
	return b
}

func decodeGroupRecords(prefix, b []byte) []storage.MetaPut {
	var out []storage.MetaPut
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+2 {
			break
		}
		key := append(bytes.Clone(prefix), b[1:1+n]...)
		b = b[1+n:]
		m := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+m {
			break
		}
		out = append(out, storage.MetaPut{Key: key, Value: bytes.Clone(b[2 : 2+m])})
		b = b[2+m:]
	}
	return out
}

// loadGroup stores puts in a fresh MemoryLog and loads a core of the given
// shard count from it, as a coordinator does at start.
func loadGroup(t *testing.T, shards int, puts []storage.MetaPut) (*groupCore, bool, error) {
	t.Helper()
	log := storage.NewMemoryLog(storage.MemoryOptions{})
	defer log.Close()
	if err := log.Commit(nil, puts); err != nil {
		t.Fatal(err)
	}
	c := newGroupCore(fuzzGroupStream, fuzzGroupName, shards, GroupLimits{})
	found, err := c.load(func(fn func(k, v []byte) error) error {
		return log.ScanMeta(groupPrefix(fuzzGroupStream, fuzzGroupName), fn)
	})
	return c, found, err
}

// groupStatePuts encodes everything load rebuilds of c as the metadata
// records the core writes: the generation, each shard's cursor, a 'k' key
// per settled record above committed, a 'd' key per dead letter, and the
// attempts of every owed record ('o' below committed, 'a' above).
func groupStatePuts(t testing.TB, c *groupCore) []storage.MetaPut {
	puts := []storage.MetaPut{{Key: c.key('g', 0, 0, false), Value: c.generationValue()}}
	for _, s := range c.shards {
		v := binary.BigEndian.AppendUint64(nil, s.committed)
		v = binary.BigEndian.AppendUint64(v, s.next)
		v = binary.BigEndian.AppendUint64(v, s.floor)
		puts = append(puts, storage.MetaPut{Key: c.key('c', s.index, 0, false), Value: v})
		view := s.offs.view(t)
		for off := range view.done {
			if _, dead := s.dead[off]; !dead {
				puts = append(puts, storage.MetaPut{Key: c.key('k', s.index, off, true), Value: []byte{}})
			}
		}
		for off, d := range s.dead {
			puts = append(puts, storage.MetaPut{Key: c.key('d', s.index, off, true), Value: encodeDeadLetter(d)})
		}
		for _, off := range s.owed {
			kind := byte('a')
			if off < s.committed {
				kind = 'o'
			}
			puts = append(puts, storage.MetaPut{Key: c.key(kind, s.index, off, true), Value: u32Value(view.attempts[off])})
		}
	}
	return puts
}

// checkLoadedGroup checks the invariants of groupCore on a freshly loaded
// core: per shard, every offset in [committed, next) is exactly one of
// settled (done) or owed (nothing is claimed yet), the first of them is
// owed (committed moved over every settled one), owed records are sorted
// and below next, each with its attempts, and dead letters were delivered.
func checkLoadedGroup(t *testing.T, c *groupCore) {
	t.Helper()
	if c.claimCount != 0 || c.deadlines.len() != 0 || len(c.members) != 0 {
		t.Fatalf("loaded %d claims, %d deadlines, %d members", c.claimCount, c.deadlines.len(), len(c.members))
	}
	for _, s := range c.shards {
		if s.committed > s.next {
			t.Fatalf("shard %d: committed %d past next %d", s.index, s.committed, s.next)
		}
		view := s.offs.view(t)
		if len(view.claims) != 0 {
			t.Fatalf("shard %d: %d claims after load", s.index, len(view.claims))
		}
		for off := range view.done {
			if off < s.committed || off >= s.next {
				t.Fatalf("shard %d: settled offset %d outside [%d, %d)", s.index, off, s.committed, s.next)
			}
		}
		inRange := uint64(0)
		for i, off := range s.owed {
			if i > 0 && off <= s.owed[i-1] {
				t.Fatalf("shard %d: owed %v not sorted and unique", s.index, s.owed)
			}
			if off >= s.next {
				t.Fatalf("shard %d: owed offset %d was never delivered (next %d)", s.index, off, s.next)
			}
			if _, ok := view.attempts[off]; !ok {
				t.Fatalf("shard %d: owed offset %d has no attempts", s.index, off)
			}
			if off >= s.committed {
				inRange++
				if _, ok := view.done[off]; ok {
					t.Fatalf("shard %d: offset %d is both owed and settled", s.index, off)
				}
			}
		}
		if len(view.attempts) != len(s.owed) {
			t.Fatalf("shard %d: attempts of %d records, %d owed", s.index, len(view.attempts), len(s.owed))
		}
		if inRange+uint64(len(view.done)) != s.next-s.committed {
			t.Fatalf("shard %d: [%d, %d) holds %d owed and %d settled offsets", s.index, s.committed, s.next, inRange, len(view.done))
		}
		if s.committed < s.next && !slices.Contains(s.owed, s.committed) {
			t.Fatalf("shard %d: committed %d stopped at an offset that is not owed", s.index, s.committed)
		}
		for off := range s.dead {
			if off >= s.next {
				t.Fatalf("shard %d: dead letter %d was never delivered (next %d)", s.index, off, s.next)
			}
			if _, ok := view.done[off]; off >= s.committed && !ok {
				t.Fatalf("shard %d: dead letter %d above committed is not settled", s.index, off)
			}
		}
	}
}

// fuzzLoadGap is the widest [committed, next) range FuzzGroupCoreLoad
// loads: load owes every unsettled offset of it, so a wide range that is
// still legal (up to maxLoadedUnsettled) takes seconds and gigabytes and
// would only slow the fuzzer down. Wider ones that load refuses are fuzzed.
const fuzzLoadGap = 1 << 16

// FuzzGroupCoreLoad loads a group's state from records the fuzzer makes
// under the group's prefix. Load either fails or rebuilds a state that
// keeps the core's invariants (checkLoadedGroup), and that state, written
// back as the core writes it (groupStatePuts), loads to the same state.
func FuzzGroupCoreLoad(f *testing.F) {
	prefix := groupPrefix(fuzzGroupStream, fuzzGroupName)
	f.Fuzz(func(t *testing.T, shards uint8, records []byte) {
		n := 1 + int(shards%4)
		puts := decodeGroupRecords(prefix, records)
		for _, p := range puts {
			suffix := p.Key[len(prefix):]
			if len(suffix) < 5 || suffix[0] != 'c' || len(p.Value) != 16 && len(p.Value) != 24 {
				continue
			}
			committed, next := binary.BigEndian.Uint64(p.Value), binary.BigEndian.Uint64(p.Value[8:])
			floor := uint64(0)
			if len(p.Value) == 24 {
				floor = binary.BigEndian.Uint64(p.Value[16:])
			}
			if start := max(committed, min(floor, next)); next > start && next-start > fuzzLoadGap && next-start <= maxLoadedUnsettled {
				// A legal range of offsets to owe, too long to load in a
				// fuzz iteration: not a decoder question; leave it.
				return
			}
		}
		c, found, err := loadGroup(t, n, puts)
		if err != nil {
			return
		}
		if found != (len(puts) > 0) {
			t.Fatalf("load found %t with %d records", found, len(puts))
		}
		checkLoadedGroup(t, c)
		again, _, err := loadGroup(t, n, groupStatePuts(t, c))
		if err != nil {
			t.Fatalf("the loaded state written back does not load: %v", err)
		}
		if again.generation != c.generation || again.incarnation != c.incarnation {
			t.Fatalf("generation %d, incarnation %d after the round trip, want %d, %d", again.generation, again.incarnation, c.generation, c.incarnation)
		}
		for i, s := range c.shards {
			a := again.shards[i]
			wantDead := map[uint64]deadLetter{}
			for off, d := range s.dead {
				w := *d
				if len(w.reason) > 1024 {
					w.reason = w.reason[:1024] // encodeDeadLetter keeps 1024 bytes
				}
				wantDead[off] = w
			}
			gotDead := map[uint64]deadLetter{}
			for off, d := range a.dead {
				gotDead[off] = *d
			}
			av, sv := a.offs.view(t), s.offs.view(t)
			if a.committed != s.committed || a.next != s.next || a.floor != s.floor || !maps.Equal(av.done, sv.done) ||
				!slices.Equal(a.owed, s.owed) || !maps.Equal(av.attempts, sv.attempts) || !maps.Equal(gotDead, wantDead) {
				t.Fatalf("shard %d after the round trip:\n got %s\nwant %s", i, describeShard(t, a), describeShard(t, s))
			}
		}
	})
}

func describeShard(t testing.TB, s *groupShard) string {
	v := s.offs.view(t)
	return fmt.Sprintf("committed %d next %d floor %d done %v owed %v attempts %v dead %d", s.committed, s.next, s.floor,
		slices.Sorted(maps.Keys(v.done)), s.owed, v.attempts, len(s.dead))
}

// seedGroupStates runs a coordinator's core through typical histories and
// returns the metadata each leaves, as the coordinator would have flushed
// it.
func seedGroupStates(t *testing.T) map[string][]storage.MetaPut {
	dump := func(h *coreHarness) []storage.MetaPut {
		h.flush()
		var out []storage.MetaPut
		if err := h.log.ScanMeta(groupPrefix(fuzzGroupStream, fuzzGroupName), func(k, v []byte) error {
			out = append(out, storage.MetaPut{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	newH := func(shards int, limits GroupLimits) *coreHarness {
		h := newCoreHarness(t, shards, 100, limits)
		h.core.stream, h.core.group = fuzzGroupStream, fuzzGroupName
		return h
	}
	states := map[string][]storage.MetaPut{}

	h := newH(2, GroupLimits{})
	h.core.join("a", 10, h.now)
	h.core.join("b", 10, h.now)
	states["members"] = dump(h)

	h = newH(1, GroupLimits{})
	h.poll("", 0, 8)
	h.core.ack(0, []uint64{0, 1, 3, 4, 7})
	h.core.nack(0, []uint64{5}, h.now)
	h.poll("", 0, 1)
	states["acked_out_of_order"] = dump(h)

	h = newH(2, GroupLimits{MaxAttempts: 2})
	h.poll("", 0, 4)
	h.poll("", 1, 2)
	h.core.nack(0, []uint64{1, 2}, h.now)
	h.poll("", 0, 2)
	h.core.nack(0, []uint64{1, 2}, h.now)
	h.core.ack(0, []uint64{0})
	states["dead_letters"] = dump(h)

	h.core.ack(0, []uint64{3})
	h.core.redrive([]uint32{0}, []uint64{1})
	h.core.discard([]uint32{0}, []uint64{2})
	states["redriven"] = dump(h)

	h = newH(1, GroupLimits{})
	h.poll("", 0, 3)
	h.core.ack(0, []uint64{1})
	h.core.shards[0].first = 50 // retention deleted [0, 50) of the shard
	h.core.shards[0].tail = 60
	h.poll("", 0, 2)
	states["retention_floor"] = dump(h)

	// A group created after one of its name was deleted, then moved back
	// by a seek over its owed records and dead letters.
	h = newH(1, GroupLimits{MaxAttempts: 1})
	h.core.incarnation = 0x5eed
	h.core.saveGeneration()
	h.poll("", 0, 6)
	h.core.ack(0, []uint64{0, 2})
	h.core.nack(0, []uint64{1, 3}, h.now) // dead letters at 1 and 3
	h.core.ack(0, []uint64{4, 5})
	h.core.redrive([]uint32{0}, []uint64{1})
	if _, err := h.core.seek([]uint32{0}, []uint64{2}); err != nil {
		t.Fatal(err)
	}
	states["seek_back_new_incarnation"] = dump(h)
	return states
}

func fuzzSeedFiles(t *testing.T) []fuzzseed.Seed {
	var out []fuzzseed.Seed
	add := func(target, name string, vals ...any) {
		out = append(out, fuzzseed.Seed{Target: target, Name: name, Vals: vals})
	}

	// Cursors: minted ones, damaged ones, and ones correctly signed but
	// malformed (what a leaked secret would allow).
	sign := func(body []byte) []byte { return signedCursor(fuzzSecret, body) }
	recs := []wire.GroupRecord{{Shard: 0, Offset: 5}, {Shard: 0, Offset: 6}, {Shard: 1, Offset: 2}, {Shard: 0, Offset: 9}}
	tok := cursorToken{stream: 7, group: groupHash("billing"), epoch: 3, ranges: cursorRanges(recs)}
	cur := mintCursor(fuzzSecret, tok)
	add("FuzzParseCursor", "valid", cur)
	add("FuzzParseCursor", "no_ranges", mintCursor(fuzzSecret, cursorToken{stream: 1, group: groupHash("g"), epoch: 1}))
	many := cursorToken{stream: math.MaxUint64, group: math.MaxUint64, epoch: math.MaxUint64}
	for i := range 64 {
		many.ranges = append(many.ranges, cursorRangeOf{shard: uint32(i), first: uint64(i) << 40, count: math.MaxUint32})
	}
	add("FuzzParseCursor", "many_ranges", mintCursor(fuzzSecret, many))
	add("FuzzParseCursor", "flipped", append(bytes.Clone(cur[:10]), append([]byte{cur[10] ^ 1}, cur[11:]...)...))
	add("FuzzParseCursor", "truncated", cur[:len(cur)-1])
	add("FuzzParseCursor", "other_secret", mintCursor(bytes.Repeat([]byte{1}, 32), tok))
	add("FuzzParseCursor", "empty", []byte{})
	add("FuzzParseCursor", "version_2", sign(append([]byte{2}, cur[1:len(cur)-cursorMACSize]...)))
	body := bytes.Clone(cur[:len(cur)-cursorMACSize])
	binary.BigEndian.PutUint16(body[25:], 4)
	add("FuzzParseCursor", "signed_count_lies", sign(body))
	binary.BigEndian.PutUint16(body[25:], math.MaxUint16)
	add("FuzzParseCursor", "signed_count_max", sign(body))
	add("FuzzParseCursor", "signed_short_head", sign(cur[:cursorHead-1]))

	add("FuzzCursorTamper", "valid", uint64(7), groupHash("billing"), uint64(3), cursorRangeBytes(tok.ranges), uint32(10), byte(1))
	add("FuzzCursorTamper", "no_ranges", uint64(0), uint64(0), uint64(0), []byte{}, uint32(0), byte(0))
	add("FuzzCursorTamper", "mac_byte", uint64(1), uint64(2), uint64(3), cursorRangeBytes(many.ranges), uint32(math.MaxUint32), byte(0x80))

	// Producer records.
	p := &producerState{id: 42, lastSeq: 9}
	add("FuzzDecodeProducerState", "none_recent", p.encode())
	for i := range uint64(3) {
		p.admit(producerBatch{seq: 7 + i, base: 100 * i, count: uint32(i + 1)})
	}
	add("FuzzDecodeProducerState", "three_recent", p.encode())
	full := &producerState{id: math.MaxUint64}
	for i := range uint64(producerMemory + 1) {
		full.admit(producerBatch{seq: i, base: i << 32, count: math.MaxUint32})
	}
	add("FuzzDecodeProducerState", "full", full.encode())
	over := *full
	over.recent = append(slices.Clone(full.recent), producerBatch{seq: 99})
	add("FuzzDecodeProducerState", "too_many", over.encode())
	add("FuzzDecodeProducerState", "truncated", p.encode()[:30])
	add("FuzzDecodeProducerState", "trailing_byte", append(p.encode(), 0))
	add("FuzzDecodeProducerState", "version_2", append([]byte{2}, p.encode()[1:]...))
	add("FuzzDecodeProducerState", "empty", []byte{})

	// Stream records, as onCreate writes them, then damaged.
	name := wire.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	record := func(id uint64, n wire.StreamName, cfg wire.StreamConfig) []byte {
		b, err := json.Marshal(storedFrom(id, n, cfg, 1_700_000_000_000_000_000))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cfg := wire.StreamConfig{Shards: 4, Durable: true, Routing: wire.RoutingJump, Overflow: wire.OverflowBlock,
		QueueCapacity: 512, QueueMaxBytes: 1 << 20, RetentionAgeMillis: 3_600_000, RetentionBytes: 1 << 30}
	add("FuzzDecodeStoredStream", "valid", record(1, name, cfg))
	add("FuzzDecodeStoredStream", "defaults", record(2, wire.StreamName{Tenant: "default", Namespace: "default", Stream: "x"}, wire.StreamConfig{Shards: 1}))
	add("FuzzDecodeStoredStream", "max_shards", record(math.MaxUint64, name, wire.StreamConfig{Shards: MaxShards, QueueCapacity: MaxQueueCapacity}))
	add("FuzzDecodeStoredStream", "zero_shards", record(3, name, wire.StreamConfig{}))
	add("FuzzDecodeStoredStream", "huge_shards", record(3, name, wire.StreamConfig{Shards: math.MaxUint32}))
	add("FuzzDecodeStoredStream", "unknown_routing", record(3, name, wire.StreamConfig{Shards: 1, Routing: 9}))
	add("FuzzDecodeStoredStream", "unknown_overflow", record(3, name, wire.StreamConfig{Shards: 1, Overflow: 9}))
	add("FuzzDecodeStoredStream", "short_retention", record(3, name, wire.StreamConfig{Shards: 1, RetentionAgeMillis: 1}))
	add("FuzzDecodeStoredStream", "bad_name", record(3, wire.StreamName{Tenant: "a b", Namespace: "", Stream: "c"}, cfg))
	add("FuzzDecodeStoredStream", "id_zero", record(0, name, cfg))
	add("FuzzDecodeStoredStream", "not_json", []byte(`{"id":1,`))
	add("FuzzDecodeStoredStream", "null", []byte(`null`))
	add("FuzzDecodeStoredStream", "wrong_types", []byte(`{"id":"1","shards":-1}`))
	add("FuzzDecodeStoredStream", "other_case_and_extra_keys", []byte(`{"ID":5,"Tenant":"t","NAMESPACE":"n","stream":"s","shards":2,"shards":3,"color":"red"}`))

	// Group state.
	prefix := groupPrefix(fuzzGroupStream, fuzzGroupName)
	states := seedGroupStates(t)
	for name, puts := range states {
		add("FuzzGroupCoreLoad", name, byte(len(name)%4), encodeGroupRecords(prefix, puts))
	}
	key := func(kind byte, shard uint32, off uint64) []byte {
		c := newGroupCore(fuzzGroupStream, fuzzGroupName, 1, GroupLimits{})
		return c.key(kind, shard, off, kind != 'c')
	}
	cursorValue := func(committed, next, floor uint64) []byte {
		v := binary.BigEndian.AppendUint64(nil, committed)
		v = binary.BigEndian.AppendUint64(v, next)
		return binary.BigEndian.AppendUint64(v, floor)
	}
	corrupt := map[string][]storage.MetaPut{
		"committed_past_next": {{Key: key('c', 0, 0), Value: cursorValue(10, 5, 0)}},
		"huge_gap":            {{Key: key('c', 0, 0), Value: cursorValue(0, math.MaxUint64, 0)}},
		"huge_floor":          {{Key: key('c', 0, 0), Value: cursorValue(0, math.MaxUint64-1, math.MaxUint64-1)}},
		"floor_past_next":     {{Key: key('c', 0, 0), Value: cursorValue(3, 10, 1<<40)}, {Key: key('k', 0, 4), Value: []byte{}}},
		"short_cursor":        {{Key: key('c', 0, 0), Value: cursorValue(1, 2, 3)[:15]}},
		"redriven_above_committed": {{Key: key('c', 0, 0), Value: cursorValue(2, 5, 0)},
			{Key: key('o', 0, 3), Value: u32Value(4)}, {Key: key('o', 0, 9), Value: u32Value(1)}},
		"dead_letter_past_next": {{Key: key('c', 0, 0), Value: cursorValue(2, 5, 0)},
			{Key: key('d', 0, 50), Value: encodeDeadLetter(&deadLetter{attempts: 5, at: 1, reason: "nacked"})}},
		"dead_letter_long_reason": {{Key: key('c', 0, 0), Value: cursorValue(0, 2, 0)},
			{Key: key('d', 0, 1), Value: append(binary.BigEndian.AppendUint16(make([]byte, 12), 2000), strings.Repeat("r", 2000)...)}},
		"dead_letter_reason_lies": {{Key: key('c', 0, 0), Value: cursorValue(0, 2, 0)},
			{Key: key('d', 0, 0), Value: append(binary.BigEndian.AppendUint16(make([]byte, 12), 9), 'r')}},
		"short_key":           {{Key: append(bytes.Clone(prefix), 'a', 0), Value: u32Value(2)}},
		"offset_cut":          {{Key: key('k', 0, 7)[:len(prefix)+1+4+3], Value: []byte{}}},
		"unknown_shard":       {{Key: key('c', 9, 0), Value: cursorValue(1, 2, 0)}},
		"generation_bad_size": {{Key: key('g', 0, 0), Value: []byte{1, 2, 3}}},
	}
	for name, puts := range corrupt {
		add("FuzzGroupCoreLoad", name, byte(0), encodeGroupRecords(prefix, puts))
	}
	return out
}

// signedCursor signs body as mintCursor does, whatever body holds.
func signedCursor(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return append(bytes.Clone(body), m.Sum(nil)[:cursorMACSize]...)
}

// cursorRangeBytes encodes ranges as FuzzCursorTamper takes them.
func cursorRangeBytes(ranges []cursorRangeOf) []byte {
	var b []byte
	for _, r := range ranges {
		b = binary.BigEndian.AppendUint32(b, r.shard)
		b = binary.BigEndian.AppendUint64(b, r.first)
		b = binary.BigEndian.AppendUint32(b, r.count)
	}
	return b
}
func TestFuzzSeedFilesCurrent(t *testing.T) {
	fuzzseed.Check(t, fuzzSeedFiles(t), *updateSeeds)
}
