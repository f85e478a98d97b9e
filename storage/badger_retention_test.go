package storage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// rawBases returns the bases of the keys of s under kind (recordPrefix or
// indexPrefix), read directly from l's database.
func rawBases(t *testing.T, l *BadgerLog, kind byte, s ShardKey) []uint64 {
	t.Helper()
	var out []uint64
	err := l.db.View(func(txn *badger.Txn) error {
		var err error
		out, err = keyBases(txn, keyPrefix(kind, s), 0, true)
		return err
	})
	if err != nil {
		t.Fatalf("raw keys: %v", err)
	}
	return out
}

// rawFloor returns s's stored floor and whether it has one.
func rawFloor(t *testing.T, l *BadgerLog, s ShardKey) (uint64, bool) {
	t.Helper()
	var floor uint64
	found := true
	err := l.db.View(func(txn *badger.Txn) error {
		if _, err := txn.Get(floorKey(s)); errors.Is(err, badger.ErrKeyNotFound) {
			found = false
			return nil
		}
		var err error
		floor, err = readFloor(txn, s)
		return err
	})
	if err != nil {
		t.Fatalf("raw floor: %v", err)
	}
	return floor, found
}

// wantRawBases checks that s's batch keys and index keys both have exactly
// the bases of want.
func wantRawBases(t *testing.T, l *BadgerLog, s ShardKey, want []Batch) {
	t.Helper()
	w := fmt.Sprint(bases(want))
	if got := fmt.Sprint(rawBases(t, l, recordPrefix, s)); got != w {
		t.Fatalf("batch keys of %v at %s, want %s", s, got, w)
	}
	if got := fmt.Sprint(rawBases(t, l, indexPrefix, s)); got != w {
		t.Fatalf("index keys of %v at %s, want %s", s, got, w)
	}
}

func TestBadgerIndexEntries(t *testing.T) {
	s, other := ShardKey{Stream: 3, Shard: 1}, ShardKey{Stream: 3, Shard: 2}
	l := openTestBadger(t, t.TempDir())
	bs := chain(0, 2, 3, 4)
	mustCommit(t, l, append(appendsOf(s, bs...), appendsOf(other, bs...)...), nil)
	wantRawBases(t, l, s, bs)

	// The stored index value, byte for byte.
	err := l.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(indexKey(s, 2))
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		want := []byte{1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x07, 0xd1, 0, 0, 0, 30} // ts 2001, 30 bytes
		if !bytes.Equal(v, want) {
			return fmt.Errorf("index value %x, want %x", v, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// DeleteBefore removes both keyspaces and sets the floor; DropShard
	// removes everything, the floor included; the neighbour is untouched.
	if _, err := l.DeleteBefore(s, 5); err != nil {
		t.Fatalf("DeleteBefore: %v", err)
	}
	wantRawBases(t, l, s, bs[2:])
	if f, ok := rawFloor(t, l, s); !ok || f != 5 {
		t.Fatalf("floor = %d, %v; want 5", f, ok)
	}
	if err := l.DropShard(s); err != nil {
		t.Fatalf("DropShard: %v", err)
	}
	wantRawBases(t, l, s, nil)
	if f, ok := rawFloor(t, l, s); ok {
		t.Fatalf("floor %d left after DropShard", f)
	}
	wantRawBases(t, l, other, bs)
	if _, ok := rawFloor(t, l, other); ok {
		t.Fatal("the neighbour has a floor")
	}
}

func TestBadgerRetentionDurable(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("SyncWrites=%v", sync), func(t *testing.T) {
			dir := t.TempDir()
			o := testBadgerOptions(dir)
			o.SyncWrites = sync
			a, b, c := ShardKey{Stream: 1}, ShardKey{Stream: 2}, ShardKey{Stream: 3}
			ba := chain(0, 2, 2, 2, 2)    // timestamps 1, 2001, 4001, 6001
			bb := chain(0, 2, 2)          // timestamps 1, 2001
			bc := chain(0, 1, 1, 1, 1, 1) // 10 bytes each
			l, err := OpenBadger(o)
			if err != nil {
				t.Fatalf("OpenBadger: %v", err)
			}
			mustCommit(t, l, append(append(appendsOf(a, ba...), appendsOf(b, bb...)...), appendsOf(c, bc...)...), nil)
			if first, err := l.DeleteBefore(a, 4); err != nil || first != 4 {
				t.Fatalf("DeleteBefore = %d, %v", first, err)
			}
			if r, err := l.Retain(b, RetentionPolicy{MaxAge: time.Microsecond}, time.Unix(0, 1_000_000)); err != nil || r.DeletedBatches != 2 {
				t.Fatalf("Retain(b) = %+v, %v", r, err)
			}
			if r, err := l.Retain(c, RetentionPolicy{MaxBytes: 25}, time.Now()); err != nil || r.DeletedBatches != 3 {
				t.Fatalf("Retain(c) = %+v, %v", r, err)
			}
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			l = openTestBadger(t, dir)
			wantTailFirst(t, l, a, 8, 4)
			wantRead(t, l, a, 0, 0, 0, ba[2:])
			wantStats(t, l, a, ShardStats{First: 4, Tail: 8, Batches: 2, Bytes: 40})
			wantTailFirst(t, l, b, 4, 4) // emptied: the tail survives the reopen
			wantStats(t, l, b, ShardStats{First: 4, Tail: 4})
			wantTailFirst(t, l, c, 5, 3)
			for _, s := range []ShardKey{a, b, c} {
				checkIndex(t, l, s)
			}
			next := testBatch(4, 1, 10)
			mustCommit(t, l, appendsOf(b, next), nil)
			wantRead(t, l, b, 0, 0, 0, []Batch{next})
		})
	}
}

func TestBadgerTornTailAfterDelete(t *testing.T) {
	// The floor keeps the tail when every batch left is torn.
	dir := t.TempDir()
	s := ShardKey{Stream: 4}
	bs := chain(0, 2, 3, 4, 5) // [0,2) [2,5) [5,9) [9,14)
	l := openTestBadger(t, dir)
	mustCommit(t, l, appendsOf(s, bs...), nil)
	if _, err := l.DeleteBefore(s, 5); err != nil {
		t.Fatalf("DeleteBefore: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	flip := func(v []byte) []byte { v[len(v)-1] ^= 1; return v }
	corruptBatch(t, dir, s, 5, flip)
	corruptBatch(t, dir, s, 9, flip)

	l = openTestBadger(t, dir)
	wantTailFirst(t, l, s, 5, 5)
	wantRawBases(t, l, s, nil)
	wantStats(t, l, s, ShardStats{First: 5, Tail: 5})
	next := testBatch(5, 1, 10)
	mustCommit(t, l, appendsOf(s, next), nil)
	wantRead(t, l, s, 0, 0, 0, []Batch{next})
	checkIndex(t, l, s)
}

func TestBadgerSplitKeepsIndexPairs(t *testing.T) {
	// Commits and deletes too big for one transaction keep every batch with
	// its index entry.
	dir := t.TempDir()
	s := ShardKey{Stream: 6}
	o := testBadgerOptions(dir)
	o.MemTableSize = 1 << 20
	l, err := OpenBadger(o)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	defer l.Close()
	n := int(l.db.MaxBatchCount())/2 + 300 // 2 entries per batch: more than one transaction
	counts := make([]uint32, n)
	for i := range counts {
		counts[i] = 1
	}
	bs := chain(0, counts...)
	mustCommit(t, l, appendsOf(s, bs...), nil)
	wantRawBases(t, l, s, bs)
	checkIndex(t, l, s)

	if first, err := l.DeleteBefore(s, uint64(n-2)); err != nil || first != uint64(n-2) {
		t.Fatalf("DeleteBefore = %d, %v", first, err)
	}
	wantRawBases(t, l, s, bs[n-2:])
	checkIndex(t, l, s)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	l = openTestBadger(t, dir)
	wantTailFirst(t, l, s, uint64(n), uint64(n-2))
	wantRawBases(t, l, s, bs[n-2:])
}

func TestSplitWriterKeepsGroupsWhole(t *testing.T) {
	o := testBadgerOptions(t.TempDir())
	o.MemTableSize = 1 << 20
	l, err := OpenBadger(o)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	defer l.Close()
	key := func(g, i int) []byte { return fmt.Appendf(nil, "g%05d/%d", g, i) }
	w := newSplitWriter(l.db)
	defer w.discard()
	// present counts the keys of group g already committed.
	present := func(g int) int {
		n := 0
		err := l.db.View(func(txn *badger.Txn) error {
			for i := range 3 {
				if _, err := txn.Get(key(g, i)); err == nil {
					n++
				} else if !errors.Is(err, badger.ErrKeyNotFound) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	value := bytes.Repeat([]byte{'v'}, 100)
	for g := 0; ; g++ {
		if g == 10000 {
			t.Fatal("no split in 10000 groups")
		}
		before := len(w.ops)
		if err := w.write(setOp(key(g, 0), value), setOp(key(g, 1), value), setOp(key(g, 2), value)); err != nil {
			t.Fatalf("write group %d: %v", g, err)
		}
		if len(w.ops) == before+3 {
			continue
		}
		// The transaction was full: the earlier groups are committed, whole,
		// and this one is entirely in the next transaction.
		if len(w.ops) != 3 {
			t.Fatalf("after the split the open transaction holds %d writes, want 3", len(w.ops))
		}
		for _, h := range []int{0, g / 2, g - 1} {
			if n := present(h); n != 3 {
				t.Fatalf("group %d has %d of its 3 keys committed", h, n)
			}
		}
		if n := present(g); n != 0 {
			t.Fatalf("the group that did not fit has %d keys committed", n)
		}
		break
	}
}

func TestBadgerUpgradeIndexesOldDatabase(t *testing.T) {
	dir := t.TempDir()
	a, b := ShardKey{Stream: 1}, ShardKey{Stream: 2}
	ba, bb := chain(0, 2, 3, 4), chain(0, 1, 1)
	l := openTestBadger(t, dir)
	mustCommit(t, l, append(appendsOf(a, ba...), appendsOf(b, bb...)...), nil)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Make it a database of the layout before the index: no index entries,
	// no version; and tear a's last batch.
	db := rawBadger(t, dir)
	err := db.Update(func(txn *badger.Txn) error {
		for _, k := range [][]byte{indexKey(a, 0), indexKey(a, 2), indexKey(a, 5), indexKey(b, 0), indexKey(b, 1), formatKey} {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("strip the index: %v", err)
	}
	corruptBatch(t, dir, a, 5, func(v []byte) []byte { v[len(v)-1] ^= 1; return v })

	var logs logBuffer
	o := testBadgerOptions(dir)
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l, err = OpenBadger(o)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	defer l.Close()
	if out := logs.String(); !strings.Contains(out, "indexed the batches") || !strings.Contains(out, "indexed=4 corrupt=1") {
		t.Fatalf("log:\n%s", out)
	}
	wantScan(t, l, a, 0, infosOf(ba[:2])) // the torn batch is not indexed
	wantScan(t, l, b, 0, infosOf(bb))
	wantTailFirst(t, l, a, 5, 0) // and Tail truncates it
	checkIndex(t, l, a)
	checkIndex(t, l, b)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// Once upgraded, opening does not index again.
	logs = logBuffer{}
	l, err = OpenBadger(o)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if strings.Contains(logs.String(), "indexed") {
		t.Fatalf("indexed again:\n%s", logs.String())
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A newer layout is refused.
	db = rawBadger(t, dir)
	err = db.Update(func(txn *badger.Txn) error { return txn.Set(formatKey, []byte{formatVersion + 1}) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("set version: %v", err)
	}
	if l, err := OpenBadger(o); err == nil {
		l.Close()
		t.Fatal("OpenBadger accepted a newer layout")
	}
}

// OffsetAt reads the batch index, never a record: with the batch values of
// a shard gone (only the index left), it gives the same answers.
func TestBadgerOffsetAtReadsOnlyTheIndex(t *testing.T) {
	s := ShardKey{Stream: 4, Shard: 0}
	l := openTestBadger(t, t.TempDir())
	bs := tsChain(100, 200, 150, 300) // [0,2)@100 [2,4)@200 [4,6)@150 [6,8)@300
	mustCommit(t, l, appendsOf(s, bs...), nil)
	err := l.db.Update(func(txn *badger.Txn) error {
		for _, b := range bs {
			if err := txn.Delete(batchKey(s, b.Base)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for at, want := range map[int64]uint64{0: 0, 100: 0, 101: 2, 160: 2, 201: 6, 300: 6, 301: 8} {
		if got, err := l.OffsetAt(s, at); err != nil || got != want {
			t.Fatalf("OffsetAt(%d) = %d, %v; want %d", at, got, err, want)
		}
	}
}
