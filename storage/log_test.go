package storage

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// testRecords returns n deterministic bytes standing for encoded records.
func testRecords(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// testBatch returns a batch at base with count records in size bytes.
func testBatch(base uint64, count uint32, size int) Batch {
	return Batch{Base: base, Count: count, Timestamp: int64(base)*1000 + 1, Records: testRecords(size, byte(base))}
}

// chain returns batches that follow each other from base, one per count,
// each with 10 bytes per record.
func chain(base uint64, counts ...uint32) []Batch {
	var bs []Batch
	for _, c := range counts {
		bs = append(bs, testBatch(base, c, int(c)*10))
		base += uint64(c)
	}
	return bs
}

// appendsOf returns the appends of bs to shard s.
func appendsOf(s ShardKey, bs ...Batch) []Append {
	as := make([]Append, len(bs))
	for i, b := range bs {
		as[i] = Append{Shard: s, Batch: b}
	}
	return as
}

// sameBatches reports the first difference between got and want, or "".
func sameBatches(got, want []Batch) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d batches %v, want %d %v", len(got), bases(got), len(want), bases(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Base != w.Base || g.Count != w.Count || g.Timestamp != w.Timestamp || !bytes.Equal(g.Records, w.Records) {
			return fmt.Sprintf("batch %d = {%d %d %d %d bytes}, want {%d %d %d %d bytes}",
				i, g.Base, g.Count, g.Timestamp, len(g.Records), w.Base, w.Count, w.Timestamp, len(w.Records))
		}
	}
	return ""
}

// bases lists the bases of bs, for messages.
func bases(bs []Batch) []uint64 {
	out := make([]uint64, len(bs))
	for i, b := range bs {
		out[i] = b.Base
	}
	return out
}

// mustCommit commits or fails the test.
func mustCommit(t *testing.T, l Log, appends []Append, metas []MetaPut) {
	t.Helper()
	if err := l.Commit(appends, metas); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// wantRead checks that Read returns want.
func wantRead(t *testing.T, l Log, s ShardKey, from uint64, maxBatches, maxBytes int, want []Batch) {
	t.Helper()
	got, err := l.Read(s, from, maxBatches, maxBytes)
	if err != nil {
		t.Fatalf("Read(%v, %d, %d, %d): %v", s, from, maxBatches, maxBytes, err)
	}
	if d := sameBatches(got, want); d != "" {
		t.Fatalf("Read(%v, %d, %d, %d): %s", s, from, maxBatches, maxBytes, d)
	}
}

// wantTailFirst checks Tail and First.
func wantTailFirst(t *testing.T, l Log, s ShardKey, tail, first uint64) {
	t.Helper()
	if got, err := l.Tail(s); err != nil || got != tail {
		t.Fatalf("Tail(%v) = %d, %v; want %d", s, got, err, tail)
	}
	if got, err := l.First(s); err != nil || got != first {
		t.Fatalf("First(%v) = %d, %v; want %d", s, got, err, first)
	}
}

// testLogConformance runs the behaviour every Log must have. open returns a
// new, empty log that the test closes.
func testLogConformance(t *testing.T, open func(t *testing.T) Log) {
	a := ShardKey{Stream: 1, Shard: 0}
	b := ShardKey{Stream: 1, Shard: 1}
	c := ShardKey{Stream: 2, Shard: 0}

	t.Run("EmptyShard", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		wantTailFirst(t, l, a, 0, 0)
		wantRead(t, l, a, 0, 10, 1<<20, nil)
		wantRead(t, l, a, 5, 0, 0, nil)
	})

	t.Run("CommitSeveralShards", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		ba, bb, bc := chain(0, 3, 5), chain(0, 1), chain(0, 2, 2, 2)
		var appends []Append
		appends = append(appends, appendsOf(a, ba...)...)
		appends = append(appends, appendsOf(c, bc[0])...)
		appends = append(appends, appendsOf(b, bb...)...)
		appends = append(appends, appendsOf(c, bc[1:]...)...)
		mustCommit(t, l, appends, []MetaPut{{Key: []byte("cfg/1"), Value: []byte("one")}})
		wantTailFirst(t, l, a, 8, 0)
		wantTailFirst(t, l, b, 1, 0)
		wantTailFirst(t, l, c, 6, 0)
		wantRead(t, l, a, 0, 0, 0, ba)
		wantRead(t, l, b, 0, 0, 0, bb)
		wantRead(t, l, c, 0, 0, 0, bc)
		if v, err := l.GetMeta([]byte("cfg/1")); err != nil || string(v) != "one" {
			t.Fatalf("GetMeta = %q, %v", v, err)
		}
		// A second commit continues the logs.
		more := chain(8, 4)
		mustCommit(t, l, appendsOf(a, more...), nil)
		wantTailFirst(t, l, a, 12, 0)
		wantRead(t, l, a, 0, 0, 0, append(ba, more...))
	})

	t.Run("ReadFrom", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		bs := chain(0, 3, 5, 1, 10) // [0,3) [3,8) [8,9) [9,19)
		mustCommit(t, l, appendsOf(a, bs...), nil)
		for _, tt := range []struct {
			from uint64
			want []Batch
		}{
			{0, bs}, {1, bs}, {2, bs},
			{3, bs[1:]}, {5, bs[1:]}, {7, bs[1:]},
			{8, bs[2:]},
			{9, bs[3:]}, {18, bs[3:]},
			{19, nil}, {20, nil}, {1 << 62, nil},
		} {
			wantRead(t, l, a, tt.from, 0, 0, tt.want)
		}
	})

	t.Run("ReadBelowFirst", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		bs := chain(100, 2, 2)
		mustCommit(t, l, appendsOf(a, bs...), nil)
		wantTailFirst(t, l, a, 104, 100)
		wantRead(t, l, a, 0, 0, 0, bs)
		wantRead(t, l, a, 99, 1, 0, bs[:1])
		wantRead(t, l, a, 103, 0, 0, bs[1:])
	})

	t.Run("ReadLimits", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		bs := chain(0, 3, 5, 1, 10) // 30, 50, 10, 100 bytes
		mustCommit(t, l, appendsOf(a, bs...), nil)
		for _, tt := range []struct {
			from                 uint64
			maxBatches, maxBytes int
			want                 []Batch
		}{
			{0, 1, 0, bs[:1]},
			{0, 2, 0, bs[:2]},
			{0, 4, 0, bs},
			{0, 100, 0, bs},
			{4, 2, 0, bs[1:3]},
			{0, 0, 1, bs[:1]},       // the first batch even past maxBytes
			{0, 0, 29, bs[:1]},      // idem
			{0, 0, 30, bs[:1]},      // exactly one batch
			{0, 0, 79, bs[:1]},      // the second would exceed
			{0, 0, 80, bs[:2]},      // exactly two
			{0, 0, 90, bs[:3]},      // exactly three
			{0, 0, 189, bs[:3]},     // the fourth would exceed
			{0, 0, 190, bs},         // all
			{0, 2, 1 << 20, bs[:2]}, // batches bind first
			{4, 10, 60, bs[1:3]},    // bytes bind first
			{9, 1, 1, bs[3:]},       // one batch bigger than maxBytes
		} {
			wantRead(t, l, a, tt.from, tt.maxBatches, tt.maxBytes, tt.want)
		}
	})

	t.Run("InvalidBatch", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		good := testBatch(0, 1, 10)
		for name, bad := range map[string]Batch{
			"zero count":    {Base: 1, Count: 0, Records: []byte("x")},
			"no records":    {Base: 1, Count: 1, Records: nil},
			"empty records": {Base: 1, Count: 1, Records: []byte{}},
		} {
			err := l.Commit([]Append{{Shard: a, Batch: good}, {Shard: a, Batch: bad}},
				[]MetaPut{{Key: []byte("k"), Value: []byte("v")}})
			if !errors.Is(err, ErrInvalidBatch) {
				t.Fatalf("%s: Commit err = %v, want ErrInvalidBatch", name, err)
			}
		}
		// Nothing of a refused commit is written.
		wantTailFirst(t, l, a, 0, 0)
		if _, err := l.GetMeta([]byte("k")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetMeta after refused commit: %v, want ErrNotFound", err)
		}
		// An empty commit is fine.
		mustCommit(t, l, nil, nil)
	})

	t.Run("Meta", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		if _, err := l.GetMeta([]byte("missing")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetMeta(missing) err = %v, want ErrNotFound", err)
		}
		// Metadata keys that look like batch keys do not collide with them.
		rkey := batchKey(a, 0)
		mustCommit(t, l, appendsOf(a, chain(0, 1)...), []MetaPut{
			{Key: []byte("s/b"), Value: []byte("2")},
			{Key: []byte("s/a"), Value: []byte("1")},
			{Key: []byte("s/c"), Value: []byte("3")},
			{Key: []byte("t/a"), Value: []byte("other")},
			{Key: []byte("s"), Value: []byte("prefix itself")},
			{Key: rkey, Value: []byte("not a batch")},
			{Key: []byte("empty"), Value: []byte{}},
		})
		v, err := l.GetMeta([]byte("s/a"))
		if err != nil || string(v) != "1" {
			t.Fatalf("GetMeta(s/a) = %q, %v", v, err)
		}
		v[0] = 'X' // the returned value is a copy
		if v, _ := l.GetMeta([]byte("s/a")); string(v) != "1" {
			t.Fatalf("GetMeta after modifying a returned value = %q", v)
		}
		if v, err := l.GetMeta([]byte("empty")); err != nil || v == nil || len(v) != 0 {
			t.Fatalf("GetMeta(empty) = %#v, %v; want an empty non-nil value", v, err)
		}
		if v, err := l.GetMeta(rkey); err != nil || string(v) != "not a batch" {
			t.Fatalf("GetMeta(batch-like key) = %q, %v", v, err)
		}
		wantRead(t, l, a, 0, 0, 0, chain(0, 1))

		scan := func(prefix string) []string {
			t.Helper()
			var got []string
			err := l.ScanMeta([]byte(prefix), func(k, v []byte) error {
				got = append(got, string(k)+"="+string(v))
				return nil
			})
			if err != nil {
				t.Fatalf("ScanMeta(%q): %v", prefix, err)
			}
			return got
		}
		if got, want := fmt.Sprint(scan("s/")), "[s/a=1 s/b=2 s/c=3]"; got != want {
			t.Fatalf("ScanMeta(s/) = %s, want %s", got, want)
		}
		if got := scan(""); len(got) != 7 {
			t.Fatalf("ScanMeta(\"\") = %q, want the 7 entries and no batch", got)
		}
		if got := scan("zzz"); len(got) != 0 {
			t.Fatalf("ScanMeta(zzz) = %q", got)
		}

		// Overwrite and delete (a nil Value deletes; deleting a missing key is fine).
		mustCommit(t, l, nil, []MetaPut{
			{Key: []byte("s/a"), Value: []byte("one")},
			{Key: []byte("s/b"), Value: nil},
			{Key: []byte("never"), Value: nil},
		})
		if got, want := fmt.Sprint(scan("s/")), "[s/a=one s/c=3]"; got != want {
			t.Fatalf("ScanMeta(s/) after update = %s, want %s", got, want)
		}
		if _, err := l.GetMeta([]byte("s/b")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetMeta(deleted) err = %v, want ErrNotFound", err)
		}

		// fn's error stops the scan and is returned.
		stop := errors.New("stop")
		n := 0
		err = l.ScanMeta([]byte("s/"), func(k, v []byte) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("ScanMeta with failing fn = %v after %d calls", err, n)
		}
	})

	t.Run("ScanMetaKeys", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		var puts []MetaPut
		for _, k := range []string{"g/a/1", "g/a/2", "g/a/3", "g/b/1", "g/c/1", "g/c/2", "h/x"} {
			puts = append(puts, MetaPut{Key: []byte(k), Value: []byte("v")})
		}
		mustCommit(t, l, nil, puts)
		keys := func(prefix string, seek func(k string) string) []string {
			t.Helper()
			var got []string
			err := l.ScanMetaKeys([]byte(prefix), func(k []byte) ([]byte, error) {
				got = append(got, string(k))
				if s := seek(string(k)); s != "" {
					return []byte(s), nil
				}
				return nil, nil
			})
			if err != nil {
				t.Fatalf("ScanMetaKeys(%q): %v", prefix, err)
			}
			return got
		}
		none := func(string) string { return "" }
		if got, want := fmt.Sprint(keys("g/", none)), "[g/a/1 g/a/2 g/a/3 g/b/1 g/c/1 g/c/2]"; got != want {
			t.Fatalf("ScanMetaKeys(g/) = %s, want %s", got, want)
		}
		// Skip the rest of each "directory": one key per group.
		past := func(k string) string { return k[:4] + "\xff" }
		if got, want := fmt.Sprint(keys("g/", past)), "[g/a/1 g/b/1 g/c/1]"; got != want {
			t.Fatalf("ScanMetaKeys(g/) seeking past each group = %s, want %s", got, want)
		}
		// A seek past the prefix ends the scan; one not after the key is a Next.
		if got, want := fmt.Sprint(keys("g/", func(string) string { return "zz" })), "[g/a/1]"; got != want {
			t.Fatalf("seek past the prefix = %s, want %s", got, want)
		}
		if got, want := fmt.Sprint(keys("g/b", func(string) string { return "a" })), "[g/b/1]"; got != want {
			t.Fatalf("seek backwards = %s, want %s", got, want)
		}
		stop := errors.New("stop")
		n := 0
		if err := l.ScanMetaKeys([]byte("g/"), func([]byte) ([]byte, error) { n++; return nil, stop }); !errors.Is(err, stop) || n != 1 {
			t.Fatalf("ScanMetaKeys with failing fn = %v after %d calls", err, n)
		}
	})

	t.Run("DropShard", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		ba, bb := chain(0, 2, 3, 4), chain(0, 5)
		mustCommit(t, l, append(appendsOf(a, ba...), appendsOf(b, bb...)...),
			[]MetaPut{{Key: []byte("keep"), Value: []byte("me")}})
		if err := l.DropShard(a); err != nil {
			t.Fatalf("DropShard: %v", err)
		}
		wantTailFirst(t, l, a, 0, 0)
		wantRead(t, l, a, 0, 0, 0, nil)
		wantTailFirst(t, l, b, 5, 0)
		wantRead(t, l, b, 0, 0, 0, bb)
		if v, err := l.GetMeta([]byte("keep")); err != nil || string(v) != "me" {
			t.Fatalf("GetMeta after DropShard = %q, %v", v, err)
		}
		if err := l.DropShard(c); err != nil { // an empty shard
			t.Fatalf("DropShard(empty): %v", err)
		}
		// The shard can be written again.
		again := chain(0, 1)
		mustCommit(t, l, appendsOf(a, again...), nil)
		wantRead(t, l, a, 0, 0, 0, again)
	})

	t.Run("ConcurrentReads", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		const commits = 20
		var wg sync.WaitGroup
		stop := make(chan struct{})
		errs := make(chan error, 4)
		for r := 0; r < 3; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					bs, err := l.Read(a, 0, 0, 0)
					if err == nil {
						for i, b := range bs {
							if b.Base != uint64(i)*2 || b.Count != 2 {
								err = fmt.Errorf("read batch %d = base %d count %d", i, b.Base, b.Count)
								break
							}
						}
					}
					if err == nil {
						_, err = l.Tail(a)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for i := 0; i < commits; i++ {
			mustCommit(t, l, appendsOf(a, testBatch(uint64(i)*2, 2, 20)), nil)
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		wantTailFirst(t, l, a, 2*commits, 0)
	})

	t.Run("Closed", func(t *testing.T) {
		l := open(t)
		mustCommit(t, l, appendsOf(a, chain(0, 1)...), nil)
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		check := func(name string, err error) {
			t.Helper()
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
		check("Commit", l.Commit(appendsOf(a, chain(1, 1)...), nil))
		check("Commit(empty)", l.Commit(nil, nil))
		_, err := l.Tail(a)
		check("Tail", err)
		_, err = l.First(a)
		check("First", err)
		_, err = l.Read(a, 0, 1, 1)
		check("Read", err)
		_, err = l.GetMeta([]byte("k"))
		check("GetMeta", err)
		check("ScanMeta", l.ScanMeta(nil, func(k, v []byte) error { return nil }))
		check("ScanMetaKeys", l.ScanMetaKeys(nil, func([]byte) ([]byte, error) { return nil, nil }))
		check("DropShard", l.DropShard(a))
		check("Sync", l.Sync())
		check("ScanBatches", l.ScanBatches(a, 0, func(BatchInfo) bool { return true }))
		_, err = l.DeleteBefore(a, 1)
		check("DeleteBefore", err)
		_, err = l.Retain(a, RetentionPolicy{MaxBytes: 1}, time.Now())
		check("Retain", err)
		_, err = l.Stats(a)
		check("Stats", err)
		_, err = l.OffsetAt(a, 0)
		check("OffsetAt", err)
	})

	testRetentionConformance(t, open)
}

func TestMemoryLogConformance(t *testing.T) {
	testLogConformance(t, func(t *testing.T) Log { return NewMemoryLog(MemoryOptions{}) })
}

func TestBadgerLogConformance(t *testing.T) {
	testLogConformance(t, func(t *testing.T) Log { return openTestBadger(t, t.TempDir()) })
}

func TestMemoryLogEviction(t *testing.T) {
	s := ShardKey{Stream: 3, Shard: 1}
	l := NewMemoryLog(MemoryOptions{MaxShardBytes: 100})
	defer l.Close()
	bs := chain(0, 4, 4, 4) // 40 bytes each
	mustCommit(t, l, appendsOf(s, bs[:2]...), nil)
	wantTailFirst(t, l, s, 8, 0)
	mustCommit(t, l, appendsOf(s, bs[2]), nil) // 120 bytes: the oldest goes
	wantTailFirst(t, l, s, 12, 4)
	wantRead(t, l, s, 0, 0, 0, bs[1:])
	wantRead(t, l, s, 5, 0, 0, bs[1:])

	// A batch bigger than the cap evicts everything else but is kept.
	big := testBatch(12, 20, 200)
	mustCommit(t, l, appendsOf(s, big), nil)
	wantTailFirst(t, l, s, 32, 12)
	wantRead(t, l, s, 0, 0, 0, []Batch{big})

	// Within one commit, the cap applies batch by batch.
	more := chain(32, 3, 3, 3, 3) // 30 bytes each
	mustCommit(t, l, appendsOf(s, more...), nil)
	wantTailFirst(t, l, s, 44, 35)
	wantRead(t, l, s, 0, 0, 0, more[1:])

	// Other shards are capped independently.
	o := ShardKey{Stream: 3, Shard: 2}
	mustCommit(t, l, appendsOf(o, chain(0, 9)...), nil)
	wantTailFirst(t, l, o, 9, 0)
	wantTailFirst(t, l, s, 44, 35)
}

func TestMemoryLogReadSharesRecords(t *testing.T) {
	s := ShardKey{Stream: 1}
	l := NewMemoryLog(MemoryOptions{})
	defer l.Close()
	mustCommit(t, l, appendsOf(s, chain(0, 2)...), nil)
	got, err := l.Read(s, 0, 1, 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("Read = %v, %v", got, err)
	}
	got[0].Base = 99 // the struct is a copy
	wantTailFirst(t, l, s, 2, 0)
}
