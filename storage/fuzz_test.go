package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/heraldmq/herald/net/fuzzseed"
)

// Every decoder of bytes read back from Badger is fuzzed here (the batch
// envelope's target, FuzzDecodeEnvelope, is in envelope_test.go): index
// values, batch and index keys, floors, and a whole database image that a
// BadgerLog opens (the layout version, a version 1 database's upgrade, and
// every read path over keys and values the fuzzer chose). Each target checks
// that nothing panics, that a refusal wraps ErrCorrupt, and that what is
// accepted re-encodes to the stored bytes.
//
// The seed corpora under testdata/fuzz/<FuzzName>/ are built from real
// encodings by fuzzSeedFiles; TestFuzzSeedFilesCurrent fails when one is
// stale, and
//
//	go test -run '^TestFuzzSeedFilesCurrent$' -update-seeds ./storage/
//
// rewrites them. Files the fuzzer adds (failing inputs, named by hash) are
// left alone.

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the seed files under testdata/fuzz from the encoders")

func FuzzDecodeIndex(f *testing.F) {
	f.Fuzz(func(t *testing.T, base uint64, v []byte) {
		b, err := decodeIndex(base, v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if b.Base != base || b.Count == 0 || b.Bytes < 0 || b.Bytes > math.MaxUint32 {
			t.Fatalf("decoded %+v from base %d", b, base)
		}
		if re := encodeIndex(b); !bytes.Equal(re, v) {
			t.Fatalf("re-encoded %x, want %x", re, v)
		}
	})
}

func FuzzBatchKeyBase(f *testing.F) {
	f.Fuzz(func(t *testing.T, key []byte) {
		base, err := batchKeyBase(key)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			if len(key) == batchKeyLen {
				t.Fatalf("refused a key of the right length: %v", err)
			}
			return
		}
		s := ShardKey{Stream: binary.BigEndian.Uint64(key[1:9]), Shard: binary.BigEndian.Uint32(key[9:13])}
		if re := binary.BigEndian.AppendUint64(keyPrefix(key[0], s), base); !bytes.Equal(re, key) {
			t.Fatalf("re-encoded %x, want %x", re, key)
		}
		if key[0] == recordPrefix && !bytes.Equal(batchKey(s, base), key) || key[0] == indexPrefix && !bytes.Equal(indexKey(s, base), key) {
			t.Fatalf("key %x is not the key of shard %+v base %d", key, s, base)
		}
	})
}

func FuzzDecodeFloor(f *testing.F) {
	f.Fuzz(func(t *testing.T, v []byte) {
		floor, err := decodeFloor(v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if re := encodeFloor(floor); !bytes.Equal(re, v) {
			t.Fatalf("re-encoded %x, want %x", re, v)
		}
	})
}

// fuzzShards are the shards FuzzBadgerReopen reads; its seeds store their
// batches.
var fuzzShards = []ShardKey{{Stream: 1, Shard: 0}, {Stream: 1, Shard: 1}}

// FuzzBadgerReopen writes the key/value pairs of image (see encodeImage)
// into an empty database, opens a BadgerLog over it and reads every shard of
// fuzzShards through each read path. Whatever the bytes, opening fails only
// for a layout version it cannot read, and every later error wraps
// ErrCorrupt; every batch Read returns re-encodes to the value stored under
// its key, and the two index walks (Stats, ScanBatches) agree.
func FuzzBadgerReopen(f *testing.F) {
	f.Fuzz(func(t *testing.T, image []byte) {
		db := openFuzzBadger(t)
		defer db.Close()
		pairs := decodeImage(image)
		if err := db.Update(func(txn *badger.Txn) error {
			for _, p := range pairs {
				if err := txn.Set(p[0], p[1]); err != nil && !errors.Is(err, badger.ErrEmptyKey) && !errors.Is(err, badger.ErrInvalidKey) {
					return err
				}
			}
			return nil
		}); err != nil {
			// The image does not fit one Badger transaction: nothing to
			// open; the input says nothing about the decoders.
			return
		}
		version, hasVersion := []byte(nil), false
		for _, p := range pairs {
			if bytes.Equal(p[0], formatKey) {
				version, hasVersion = p[1], true
			}
		}
		l := newFuzzLog(db)
		err := l.upgrade()
		switch {
		case hasVersion && len(version) != 1:
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("layout version %x: open error %v, want ErrCorrupt", version, err)
			}
			return
		case hasVersion && version[0] > formatVersion:
			if err == nil {
				t.Fatalf("opened a database of layout version %d", version[0])
			}
			return
		case err != nil:
			t.Fatalf("open: %v", err)
		}
		for _, s := range fuzzShards {
			checkFuzzShard(t, l, db, s)
		}
		metas := 0
		if err := l.ScanMeta(nil, func(key, value []byte) error { metas++; return nil }); err != nil {
			t.Fatalf("ScanMeta: %v", err)
		}
		want := 0
		_ = db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{metaPrefix}})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				want++
			}
			return nil
		})
		if metas != want {
			t.Fatalf("ScanMeta saw %d entries, the database holds %d", metas, want)
		}
	})
}

// checkFuzzShard reads shard s of l through every read path and checks
// what each returns.
func checkFuzzShard(t *testing.T, l *BadgerLog, db *badger.DB, s ShardKey) {
	t.Helper()
	corrupt := func(what string, err error) bool {
		t.Helper()
		if err == nil {
			return false
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v %s: error %v does not wrap ErrCorrupt", s, what, err)
		}
		return true
	}
	tail, err := l.Tail(s)
	if corrupt("Tail", err) {
		return
	}
	first, err := l.First(s)
	if corrupt("First", err) {
		return
	}
	batches, err := l.Read(s, first, 0, 0)
	if !corrupt("Read", err) {
		for i, b := range batches {
			if b.Count == 0 || i > 0 && b.Base <= batches[i-1].Base {
				t.Fatalf("%v Read batch %d: %+v after %v", s, i, b, bases(batches[:i]))
			}
			var stored []byte
			if err := db.View(func(txn *badger.Txn) error {
				item, err := txn.Get(batchKey(s, b.Base))
				if err != nil {
					return err
				}
				stored, err = item.ValueCopy(nil)
				return err
			}); err != nil {
				t.Fatalf("%v batch %d: %v", s, b.Base, err)
			}
			if re := encodeEnvelope(b); !bytes.Equal(re, stored) {
				t.Fatalf("%v batch %d re-encodes to %x, stored %x", s, b.Base, re, stored)
			}
		}
		if n := len(batches); n > 0 && batches[n-1].End() > tail && batches[n-1].End() > batches[n-1].Base {
			t.Fatalf("%v: last batch read ends at %d, past the tail %d", s, batches[n-1].End(), tail)
		}
	}
	st, err := l.Stats(s)
	if !corrupt("Stats", err) {
		var scanned int
		var size int64
		err := l.ScanBatches(s, 0, func(b BatchInfo) bool {
			if b.Count == 0 {
				t.Fatalf("%v ScanBatches: %+v", s, b)
			}
			scanned++
			size += b.Bytes
			return true
		})
		// ScanBatches skips the batches that end at or below 0: only those
		// whose End wrapped around.
		if !corrupt("ScanBatches", err) && (scanned > st.Batches || scanned == st.Batches && size != st.Bytes) {
			t.Fatalf("%v: ScanBatches saw %d batches of %d bytes, Stats %+v", s, scanned, size, st)
		}
	}
	// Retention over whatever the index says: the index and the batches
	// need not agree here (an index entry without its batch), so only the
	// errors are checked.
	if _, err := l.DeleteBefore(s, first+(tail-first)/2); corrupt("DeleteBefore", err) {
		return
	}
	_, err = l.Retain(s, RetentionPolicy{MaxBytes: 1}, time.Unix(0, 0))
	corrupt("Retain", err)
}

// openFuzzBadger opens a small in-memory database.
func openFuzzBadger(t testing.TB) *badger.DB {
	t.Helper()
	o := badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(1 << 20).WithValueThreshold(1024).WithBlockCacheSize(0).WithIndexCacheSize(0).
		WithNumCompactors(2).WithNumGoroutines(1).WithDetectConflicts(false).WithCompression(options.None)
	db, err := badger.Open(o)
	if err != nil {
		t.Fatalf("badger.Open: %v", err)
	}
	return db
}

// newFuzzLog is OpenBadger on an open database, without the GC goroutine
// and before upgrade, which the caller runs.
func newFuzzLog(db *badger.DB) *BadgerLog {
	return &BadgerLog{db: db, logger: slog.New(slog.DiscardHandler), stop: make(chan struct{})}
}

// An image is a database's key/value pairs as FuzzBadgerReopen takes them:
// each pair is key length u16 | key | value length u16 | value. A cut pair
// at the end is dropped; a key set twice keeps its last value.
func encodeImage(pairs [][2][]byte) []byte {
	var b []byte
	for _, p := range pairs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(p[0])))
		b = append(b, p[0]...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p[1])))
		b = append(b, p[1]...)
	}
	return b
}

func decodeImage(b []byte) [][2][]byte {
	var out [][2][]byte
	for {
		if len(b) < 2 {
			return out
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n+2 {
			return out
		}
		k := b[2 : 2+n]
		b = b[2+n:]
		m := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+m {
			return out
		}
		out = append(out, [2][]byte{k, b[2 : 2+m]})
		b = b[2+m:]
	}
}

// dumpImage returns every key/value pair of db in key order.
func dumpImage(t testing.TB, db *badger.DB) [][2][]byte {
	t.Helper()
	var out [][2][]byte
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out = append(out, [2][]byte{it.Item().KeyCopy(nil), v})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seedImages builds database images through a BadgerLog and then damages
// them: the layouts the fuzzer starts from.
func seedImages(t testing.TB) map[string][][2][]byte {
	build := func(f func(l *BadgerLog)) [][2][]byte {
		db := openFuzzBadger(t)
		defer db.Close()
		l := newFuzzLog(db)
		if err := l.upgrade(); err != nil {
			t.Fatal(err)
		}
		f(l)
		return dumpImage(t, db)
	}
	commit := func(l *BadgerLog, appends []Append, metas []MetaPut) {
		if err := l.Commit(appends, metas); err != nil {
			t.Fatal(err)
		}
	}
	a, b := fuzzShards[0], fuzzShards[1]
	two := func(l *BadgerLog) {
		commit(l, append(appendsOf(a, chain(0, 2, 3, 1)...), appendsOf(b, chain(0, 4)...)...),
			[]MetaPut{{Key: []byte("stream/x"), Value: []byte(`{"id":1}`)}, {Key: []byte("empty"), Value: []byte{}}})
	}
	edit := func(img [][2][]byte, f func(k, v []byte) ([]byte, bool)) [][2][]byte {
		var out [][2][]byte
		for _, p := range img {
			if v, keep := f(p[0], bytes.Clone(p[1])); keep {
				out = append(out, [2][]byte{p[0], v})
			}
		}
		return out
	}
	base := build(two)
	images := map[string][][2][]byte{
		"empty":      nil,
		"new":        build(func(*BadgerLog) {}),
		"two_shards": base,
		"deleted_before": build(func(l *BadgerLog) {
			two(l)
			if _, err := l.DeleteBefore(a, 4); err != nil {
				t.Fatal(err)
			}
		}),
		"emptied_shard": build(func(l *BadgerLog) {
			two(l)
			if _, err := l.DeleteBefore(b, 10); err != nil {
				t.Fatal(err)
			}
		}),
		// A database of layout version 1: no version key, no index.
		"version_1": edit(base, func(k, v []byte) ([]byte, bool) { return v, k[0] != indexPrefix && k[0] != formatKey[0] }),
		"version_newer": edit(base, func(k, v []byte) ([]byte, bool) {
			if bytes.Equal(k, formatKey) {
				return []byte{formatVersion + 1}, true
			}
			return v, true
		}),
		"version_long": edit(base, func(k, v []byte) ([]byte, bool) {
			if bytes.Equal(k, formatKey) {
				return []byte{formatVersion, 0}, true
			}
			return v, true
		}),
		"torn_tail": edit(base, func(k, v []byte) ([]byte, bool) {
			if bytes.Equal(k, batchKey(a, 5)) {
				return v[:len(v)-1], true
			}
			return v, true
		}),
		"corrupt_middle": edit(base, func(k, v []byte) ([]byte, bool) {
			if bytes.Equal(k, batchKey(a, 2)) {
				v[len(v)-1] ^= 0xff
			}
			return v, true
		}),
		"bad_index": edit(base, func(k, v []byte) ([]byte, bool) {
			if bytes.Equal(k, indexKey(a, 2)) {
				return v[:5], true
			}
			return v, true
		}),
		"bad_floor": build(func(l *BadgerLog) {
			two(l)
			if err := l.writeDurably([][]writeOp{{setOp(floorKey(a), []byte{1, 2, 3})}}); err != nil {
				t.Fatal(err)
			}
		}),
		"short_batch_key":     append(slices.Clone(base), [2][]byte{batchKey(a, 100)[:batchKeyLen-2], encodeEnvelope(testBatch(100, 1, 3))}),
		"index_without_batch": append(slices.Clone(base), [2][]byte{indexKey(a, 6), encodeIndex(BatchInfo{Base: 6, Count: 2, Bytes: 20})}),
		"offset_overflow": build(func(l *BadgerLog) {
			commit(l, appendsOf(a, testBatch(math.MaxUint64-1, 3, 30)), nil)
		}),
	}
	return images
}

func fuzzSeedFiles(t testing.TB) []fuzzseed.Seed {
	var out []fuzzseed.Seed
	add := func(target, name string, vals ...any) {
		out = append(out, fuzzseed.Seed{Target: target, Name: name, Vals: vals})
	}

	// The envelope (FuzzDecodeEnvelope in envelope_test.go).
	good := encodeEnvelope(Batch{Base: 1, Count: 3, Timestamp: 77, Records: []byte("abcdefgh")})
	add("FuzzDecodeEnvelope", "valid", uint64(1), good)
	add("FuzzDecodeEnvelope", "one_record", uint64(0), encodeEnvelope(Batch{Count: 1, Records: []byte{0}}))
	add("FuzzDecodeEnvelope", "extremes", uint64(math.MaxUint64-1), encodeEnvelope(Batch{Base: math.MaxUint64 - 1, Count: math.MaxUint32, Timestamp: math.MinInt64, Records: []byte{0}}))
	add("FuzzDecodeEnvelope", "header_only", uint64(9), good[:envelopeHeaderLen])
	add("FuzzDecodeEnvelope", "truncated", uint64(1), good[:len(good)-1])
	add("FuzzDecodeEnvelope", "flipped_checksum", uint64(1), append([]byte{good[0] ^ 0x80}, good[1:]...))
	add("FuzzDecodeEnvelope", "version_2", uint64(1), reseal(append(bytes.Clone(good[:4]), append([]byte{2}, good[5:]...)...)))
	add("FuzzDecodeEnvelope", "zero_count", uint64(1), reseal(append(bytes.Clone(good[:5]), append([]byte{0, 0, 0, 0}, good[9:]...)...)))
	add("FuzzDecodeEnvelope", "empty", uint64(0), []byte{})

	idx := encodeIndex(BatchInfo{Base: 9, Count: 0x01020304, Timestamp: -2, Bytes: 0xa0b0c0d0})
	add("FuzzDecodeIndex", "valid", uint64(9), idx)
	add("FuzzDecodeIndex", "extremes", uint64(math.MaxUint64), encodeIndex(BatchInfo{Base: math.MaxUint64, Count: math.MaxUint32, Timestamp: math.MaxInt64, Bytes: math.MaxUint32}))
	add("FuzzDecodeIndex", "short", uint64(9), idx[:indexValueLen-1])
	add("FuzzDecodeIndex", "long", uint64(9), append(bytes.Clone(idx), 0))
	add("FuzzDecodeIndex", "version_2", uint64(9), append([]byte{2}, idx[1:]...))
	add("FuzzDecodeIndex", "zero_count", uint64(9), append([]byte{1, 0, 0, 0, 0}, idx[5:]...))

	s := ShardKey{Stream: 0x0102030405060708, Shard: 0x0a0b0c0d}
	add("FuzzBatchKeyBase", "batch", batchKey(s, 0x1112131415161718))
	add("FuzzBatchKeyBase", "index", indexKey(s, 0))
	add("FuzzBatchKeyBase", "short", batchKey(s, 1)[:batchKeyLen-1])
	add("FuzzBatchKeyBase", "long", append(batchKey(s, 1), 0))
	add("FuzzBatchKeyBase", "floor_key", floorKey(s))

	add("FuzzDecodeFloor", "valid", encodeFloor(1<<50))
	add("FuzzDecodeFloor", "short", encodeFloor(1)[:7])
	add("FuzzDecodeFloor", "empty", []byte{})

	for name, img := range seedImages(t) {
		add("FuzzBadgerReopen", name, encodeImage(img))
	}
	return out
}
func TestFuzzSeedFilesCurrent(t *testing.T) {
	fuzzseed.Check(t, fuzzSeedFiles(t), *updateSeeds)
}
