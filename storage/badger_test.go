package storage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// testBadgerOptions returns small options for a test database in dir.
func testBadgerOptions(dir string) BadgerOptions {
	o := DefaultBadgerOptions(dir)
	o.MemTableSize = 4 << 20
	o.BlockCacheSize = 1 << 20
	o.IndexCacheSize = 1 << 20
	o.ValueLogFileSize = 16 << 20
	return o
}

// openTestBadger opens a BadgerLog in dir with testBadgerOptions and closes it
// at the end of the test.
func openTestBadger(t testing.TB, dir string) *BadgerLog {
	t.Helper()
	l, err := OpenBadger(testBadgerOptions(dir))
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// rawBadger opens the database in dir directly, bypassing BadgerLog; the
// log using dir must be closed.
func rawBadger(t *testing.T, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(testBadgerOptions(dir).withDefaults().badgerOptions())
	if err != nil {
		t.Fatalf("badger.Open: %v", err)
	}
	return db
}

// corruptBatch rewrites the stored value of s's batch at base with
// f(value), directly in the database in dir.
func corruptBatch(t *testing.T, dir string, s ShardKey, base uint64, f func([]byte) []byte) {
	t.Helper()
	db := rawBadger(t, dir)
	defer db.Close()
	err := db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(batchKey(s, base))
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		return txn.Set(batchKey(s, base), f(v))
	})
	if err != nil {
		t.Fatalf("corrupt batch %d: %v", base, err)
	}
}

// logBuffer collects what a slog.Logger writes, safely across goroutines.
type logBuffer struct {
	// mu guards buf.
	mu sync.Mutex
	// buf holds the text written.
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestBadgerDurability(t *testing.T) {
	dir := t.TempDir()
	a, b := ShardKey{Stream: 1, Shard: 0}, ShardKey{Stream: 9, Shard: 3}
	ba, bb := chain(0, 3, 4, 5, 6), chain(50, 1, 1)
	metas := []MetaPut{{Key: []byte("cfg/a"), Value: []byte("A")}, {Key: []byte("id"), Value: []byte("42")}}

	l := openTestBadger(t, dir)
	mustCommit(t, l, append(appendsOf(a, ba[:2]...), appendsOf(b, bb[0])...), metas)
	mustCommit(t, l, append(appendsOf(a, ba[2:]...), appendsOf(b, bb[1])...),
		[]MetaPut{{Key: []byte("id"), Value: []byte("43")}})
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	l = openTestBadger(t, dir)
	wantTailFirst(t, l, a, 18, 0)
	wantTailFirst(t, l, b, 52, 50)
	wantRead(t, l, a, 0, 0, 0, ba)
	wantRead(t, l, a, 8, 0, 0, ba[2:])
	wantRead(t, l, b, 0, 0, 0, bb)
	if v, err := l.GetMeta([]byte("id")); err != nil || string(v) != "43" {
		t.Fatalf("GetMeta(id) = %q, %v", v, err)
	}
	if v, err := l.GetMeta([]byte("cfg/a")); err != nil || string(v) != "A" {
		t.Fatalf("GetMeta(cfg/a) = %q, %v", v, err)
	}
}

func TestBadgerDurabilityWithoutSyncWrites(t *testing.T) {
	dir := t.TempDir()
	s := ShardKey{Stream: 1}
	o := testBadgerOptions(dir)
	o.SyncWrites = false
	l, err := OpenBadger(o)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	bs := chain(0, 2, 2)
	mustCommit(t, l, appendsOf(s, bs...), nil)
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	l = openTestBadger(t, dir)
	wantTailFirst(t, l, s, 4, 0)
	wantRead(t, l, s, 0, 0, 0, bs)
}

func TestBadgerTornTail(t *testing.T) {
	s, other := ShardKey{Stream: 4, Shard: 2}, ShardKey{Stream: 4, Shard: 3}
	bs := chain(0, 2, 3, 4, 5) // [0,2) [2,5) [5,9) [9,14)
	ob := chain(0, 7)
	flip := func(v []byte) []byte { v[len(v)-1] ^= 0x55; return v }
	tests := []struct {
		name    string
		corrupt map[uint64]func([]byte) []byte // by base
		tail    uint64
	}{
		{"flipped record byte", map[uint64]func([]byte) []byte{9: flip}, 9},
		{"flipped header byte", map[uint64]func([]byte) []byte{9: func(v []byte) []byte { v[6] ^= 1; return v }}, 9},
		{"truncated value", map[uint64]func([]byte) []byte{9: func(v []byte) []byte { return v[:len(v)/2] }}, 9},
		{"short value", map[uint64]func([]byte) []byte{9: func(v []byte) []byte { return v[:3] }}, 9},
		{"two torn batches", map[uint64]func([]byte) []byte{5: flip, 9: flip}, 5},
		{"whole log torn", map[uint64]func([]byte) []byte{0: flip, 2: flip, 5: flip, 9: flip}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openTestBadger(t, dir)
			mustCommit(t, l, append(appendsOf(s, bs...), appendsOf(other, ob...)...), nil)
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			for base, f := range tt.corrupt {
				corruptBatch(t, dir, s, base, f)
			}

			var logs logBuffer
			o := testBadgerOptions(dir)
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			l, err := OpenBadger(o)
			if err != nil {
				t.Fatalf("OpenBadger: %v", err)
			}
			defer l.Close()

			// Before recovery, Read refuses the corrupt batch rather than
			// serving it.
			if got, err := l.Read(s, 0, 0, 0); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read before Tail = %v, %v; want ErrCorrupt", bases(got), err)
			}
			if got, err := l.Read(s, tt.tail, 0, 0); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read(torn) before Tail = %v, %v; want ErrCorrupt", bases(got), err)
			}

			if tail, err := l.Tail(s); err != nil || tail != tt.tail {
				t.Fatalf("Tail = %d, %v; want %d", tail, err, tt.tail)
			}
			if n := strings.Count(logs.String(), "truncated corrupt batch"); n != len(tt.corrupt) {
				t.Fatalf("%d truncation warnings, want %d; log:\n%s", n, len(tt.corrupt), logs.String())
			}
			var good []Batch
			for _, b := range bs {
				if b.End() <= tt.tail {
					good = append(good, b)
				}
			}
			wantRead(t, l, s, 0, 0, 0, good)
			wantRead(t, l, s, tt.tail, 0, 0, nil)
			// The torn batches' index entries went with them.
			wantRawBases(t, l, s, good)
			checkIndex(t, l, s)
			wantTailFirst(t, l, other, 7, 0)
			wantRead(t, l, other, 0, 0, 0, ob)

			// The shard continues from the recovered tail.
			next := testBatch(tt.tail, 1, 10)
			mustCommit(t, l, appendsOf(s, next), nil)
			wantRead(t, l, s, 0, 0, 0, append(good, next))
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			// The truncation was durable: nothing left to truncate.
			logs = logBuffer{}
			l, err = OpenBadger(o)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer l.Close()
			wantTailFirst(t, l, s, tt.tail+1, 0)
			wantRead(t, l, s, 0, 0, 0, append(good, next))
			if strings.Contains(logs.String(), "truncated") {
				t.Fatalf("truncation after reopen:\n%s", logs.String())
			}
		})
	}
}

func TestBadgerCorruptMiddle(t *testing.T) {
	dir := t.TempDir()
	s := ShardKey{Stream: 5}
	bs := chain(0, 2, 2, 2, 2, 2)
	l := openTestBadger(t, dir)
	mustCommit(t, l, appendsOf(s, bs...), nil)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	corruptBatch(t, dir, s, 4, func(v []byte) []byte { v[envelopeHeaderLen] ^= 1; return v })

	l = openTestBadger(t, dir)
	wantTailFirst(t, l, s, 10, 0) // the tail is intact: nothing truncated
	for _, from := range []uint64{0, 3, 4, 5} {
		got, err := l.Read(s, from, 0, 0)
		if !errors.Is(err, ErrCorrupt) || got != nil {
			t.Fatalf("Read(%d) = %v, %v; want ErrCorrupt", from, bases(got), err)
		}
	}
	wantRead(t, l, s, 0, 2, 0, bs[:2]) // stops before the corrupt batch
	wantRead(t, l, s, 6, 0, 0, bs[3:])
	wantRead(t, l, s, 0, 0, 40, bs[:2])
}

func TestBadgerCommitSplitsBigTransactions(t *testing.T) {
	s := ShardKey{Stream: 6}
	o := testBadgerOptions(t.TempDir())
	o.MemTableSize = 1 << 20 // a transaction holds about 157 KB
	l, err := OpenBadger(o)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	defer l.Close()

	// 300 metadata values of 900 bytes (kept in the LSM tree) are too much
	// for one transaction.
	var metas []MetaPut
	for i := range 300 {
		metas = append(metas, MetaPut{Key: fmt.Appendf(nil, "big/%03d", i), Value: bytes.Repeat([]byte{byte(i)}, 900)})
	}
	err = l.db.Update(func(txn *badger.Txn) error {
		for _, m := range metas {
			if err := txn.Set(metaKey(m.Key), m.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, badger.ErrTxnTooBig) {
		t.Fatalf("one transaction for all the metadata: %v, want ErrTxnTooBig", err)
	}

	bs := chain(0, 1, 2, 3)
	mustCommit(t, l, appendsOf(s, bs...), metas)
	wantRead(t, l, s, 0, 0, 0, bs)
	n := 0
	err = l.ScanMeta([]byte("big/"), func(k, v []byte) error {
		if want := fmt.Sprintf("big/%03d", n); string(k) != want || len(v) != 900 || v[0] != byte(n) {
			return fmt.Errorf("entry %d = %q (%d bytes), want %q", n, k, len(v), want)
		}
		n++
		return nil
	})
	if err != nil || n != len(metas) {
		t.Fatalf("ScanMeta: %d entries, %v", n, err)
	}
}

func TestBadgerDropShardLeavesNeighbours(t *testing.T) {
	// Shards whose prefixes are adjacent in key order.
	s := ShardKey{Stream: 1, Shard: 1}
	before, after := ShardKey{Stream: 1, Shard: 0}, ShardKey{Stream: 1, Shard: 2}
	l := openTestBadger(t, t.TempDir())
	var appends []Append
	for _, k := range []ShardKey{before, s, after} {
		appends = append(appends, appendsOf(k, chain(0, 1, 1, 1)...)...)
	}
	mustCommit(t, l, appends, nil)
	if err := l.DropShard(s); err != nil {
		t.Fatalf("DropShard: %v", err)
	}
	wantTailFirst(t, l, s, 0, 0)
	wantTailFirst(t, l, before, 3, 0)
	wantTailFirst(t, l, after, 3, 0)
}

func TestBadgerOptionsDefaults(t *testing.T) {
	if _, err := OpenBadger(BadgerOptions{}); err == nil {
		t.Fatal("OpenBadger without Dir succeeded")
	}
	o := BadgerOptions{Dir: "x", NumCompactors: 3}.withDefaults()
	d := DefaultBadgerOptions("x")
	if o.NumCompactors != 3 || o.MemTableSize != d.MemTableSize || o.ValueThreshold != 1024 || o.SyncWrites {
		t.Fatalf("withDefaults = %+v", o)
	}
	if !d.SyncWrites || d.ValueThreshold != 1024 {
		t.Fatalf("DefaultBadgerOptions = %+v", d)
	}

	// A zero-valued BadgerOptions with a Dir opens.
	l, err := OpenBadger(BadgerOptions{Dir: t.TempDir(), ValueLogFileSize: 16 << 20})
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestBadgerLogger(t *testing.T) {
	var logs logBuffer
	bl := badgerLogger{slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	bl.Debugf("debug %d\n", 1)
	bl.Infof("info %d\n", 2)
	bl.Warningf("warning %d\n", 3)
	bl.Errorf("error %d\n", 4)
	// Badger's cache reports, once a minute on a healthy node: debug.
	bl.Warningf("%s might be too small. Metrics: %s\n", "Block cache", "hit: 1 miss: 9")
	bl.Warningf("Cache life expectancy (in seconds): %+v\n", "{Count: 3}")
	out := logs.String()
	if strings.Contains(out, "debug 1") || strings.Contains(out, "info 2") {
		t.Fatalf("debug or info message logged:\n%s", out)
	}
	for _, want := range []string{`level=WARN msg="warning 3" component=badger`, `level=ERROR msg="error 4" component=badger`,
		`level=DEBUG msg="Block cache might be too small. Metrics: hit: 1 miss: 9" component=badger`,
		`level=DEBUG msg="Cache life expectancy (in seconds): {Count: 3}" component=badger`} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestBadgerCloseStopsGC(t *testing.T) {
	o := testBadgerOptions(t.TempDir())
	o.ValueLogGCInterval = 1 // as often as possible
	l, err := OpenBadger(o)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	s := ShardKey{Stream: 8}
	for i := range 10 {
		mustCommit(t, l, appendsOf(s, testBatch(uint64(i), 1, 2000)), nil)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close waited for the GC goroutine; it exits right after signalling.
	for i := 0; ; i++ {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "runValueLogGC") {
			break
		}
		if i == 10000 {
			t.Fatalf("GC goroutine still running after Close:\n%s", stacks)
		}
		runtime.Gosched()
	}
}

// A batch's own metadata is written with it, in the same group, even when a
// commit has to be split across transactions.
func TestBadgerAppendMetasTravelWithTheirBatch(t *testing.T) {
	opts := DefaultBadgerOptions(t.TempDir())
	l, err := OpenBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key := ShardKey{Stream: 1}
	var appends []Append
	for i := range 50 {
		appends = append(appends, Append{Shard: key,
			Batch: Batch{Base: uint64(i), Count: 1, Records: []byte{0, 0, 1, 'x'}},
			Metas: []MetaPut{{Key: []byte(fmt.Sprintf("producer/%02d", i)), Value: []byte{byte(i)}}}})
	}
	if err := l.Commit(appends, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		v, err := l.GetMeta([]byte(fmt.Sprintf("producer/%02d", i)))
		if err != nil || len(v) != 1 || v[0] != byte(i) {
			t.Fatalf("meta %d: %v %v", i, v, err)
		}
	}
	m := NewMemoryLog(MemoryOptions{})
	if err := m.Commit(appends, []MetaPut{{Key: []byte("other"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if v, err := m.GetMeta([]byte("producer/07")); err != nil || v[0] != 7 {
		t.Fatalf("memory: %v %v", v, err)
	}
}

// A read bounded by maxBytes stops before the batch that does not fit
// without copying its value: a poll reading one 256 KiB batch copied the
// next one too, and dropped it.
func TestBadgerReadDoesNotCopyTheBatchPastItsBound(t *testing.T) {
	l := openTestBadger(t, t.TempDir())
	const batchBytes = 200 << 10
	k := ShardKey{Stream: 1}
	records := bytes.Repeat([]byte{7}, batchBytes)
	var appends []Append
	for i := range 4 {
		appends = append(appends, Append{Shard: k, Batch: Batch{Base: uint64(i * 10), Count: 10, Records: records}})
	}
	mustCommit(t, l, appends, nil)
	var allocated uint64
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := l.Read(k, 0, 0, batchBytes+batchBytes/2)
		runtime.ReadMemStats(&after)
		if err != nil || len(out) != 1 || len(out[0].Records) != batchBytes {
			t.Fatalf("Read: %d batches, %v", len(out), err)
		}
		allocated = after.TotalAlloc - before.TotalAlloc
		if allocated < 3*batchBytes/2 {
			return
		}
		// Something beside the read (Badger's own goroutines) allocated
		// meanwhile: measure again.
	}
	t.Fatalf("a read of one %d-byte batch allocated %d bytes: the next batch's value was copied", batchBytes, allocated)
}
