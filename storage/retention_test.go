package storage

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// infosOf returns the descriptions of bs.
func infosOf(bs []Batch) []BatchInfo {
	out := make([]BatchInfo, len(bs))
	for i, b := range bs {
		out[i] = infoOf(b)
	}
	return out
}

// scanBatches returns every batch ScanBatches reports from from.
func scanBatches(l Log, s ShardKey, from uint64) ([]BatchInfo, error) {
	var out []BatchInfo
	err := l.ScanBatches(s, from, func(b BatchInfo) bool {
		out = append(out, b)
		return true
	})
	return out, err
}

// wantScan checks that ScanBatches from from reports want.
func wantScan(t *testing.T, l Log, s ShardKey, from uint64, want []BatchInfo) {
	t.Helper()
	got, err := scanBatches(l, s, from)
	if err != nil {
		t.Fatalf("ScanBatches(%v, %d): %v", s, from, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ScanBatches(%v, %d) = %v, want %v", s, from, got, want)
	}
}

// wantStats checks Stats.
func wantStats(t *testing.T, l Log, s ShardKey, want ShardStats) {
	t.Helper()
	if got, err := l.Stats(s); err != nil || got != want {
		t.Fatalf("Stats(%v) = %+v, %v; want %+v", s, got, err, want)
	}
}

// checkIndex checks that the shard's index agrees with its records:
// ScanBatches describes exactly the batches Read returns, and Stats, First
// and Tail agree with them.
func checkIndex(t *testing.T, l Log, s ShardKey) {
	t.Helper()
	bs, err := l.Read(s, 0, 0, 0)
	if err != nil {
		t.Fatalf("Read(%v): %v", s, err)
	}
	wantScan(t, l, s, 0, infosOf(bs))
	tail, err := l.Tail(s)
	if err != nil {
		t.Fatalf("Tail(%v): %v", s, err)
	}
	want := ShardStats{First: tail, Tail: tail, Batches: len(bs)}
	for _, b := range bs {
		want.Bytes += int64(len(b.Records))
	}
	if len(bs) > 0 {
		want.First = bs[0].Base
	}
	wantStats(t, l, s, want)
	wantTailFirst(t, l, s, tail, want.First)
}

// tsChain returns batches of 2 records (20 bytes) from 0, one per timestamp.
func tsChain(timestamps ...int64) []Batch {
	bs := make([]Batch, len(timestamps))
	for i, ts := range timestamps {
		bs[i] = testBatch(uint64(2*i), 2, 20)
		bs[i].Timestamp = ts
	}
	return bs
}

// bytesOf returns the Records bytes of bs.
func bytesOf(bs []Batch) int64 {
	var n int64
	for _, b := range bs {
		n += int64(len(b.Records))
	}
	return n
}

// testRetentionConformance runs the retention behaviour every Log must have
// (DeleteBefore, Retain, ScanBatches, Stats). open returns a new, empty log
// that the test closes.
func testRetentionConformance(t *testing.T, open func(t *testing.T) Log) {
	a := ShardKey{Stream: 1, Shard: 0}
	b := ShardKey{Stream: 1, Shard: 1}

	t.Run("ScanBatches", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		wantScan(t, l, a, 0, nil)
		bs := chain(0, 3, 5, 1, 10) // [0,3) [3,8) [8,9) [9,19)
		mustCommit(t, l, append(appendsOf(a, bs...), appendsOf(b, chain(0, 4)...)...), nil)
		want := infosOf(bs)
		if want[1] != (BatchInfo{Base: 3, Count: 5, Timestamp: 3001, Bytes: 50}) || want[1].End() != 8 {
			t.Fatalf("infoOf = %+v", want[1])
		}
		for _, tt := range []struct {
			from uint64
			want []BatchInfo
		}{
			{0, want}, {2, want}, {3, want[1:]}, {7, want[1:]}, {8, want[2:]},
			{9, want[3:]}, {18, want[3:]}, {19, nil}, {1 << 60, nil},
		} {
			wantScan(t, l, a, tt.from, tt.want)
		}
		// fn stops the scan, and may call the log.
		var got []BatchInfo
		err := l.ScanBatches(a, 0, func(bi BatchInfo) bool {
			got = append(got, bi)
			if _, err := l.Stats(a); err != nil {
				t.Errorf("Stats inside ScanBatches: %v", err)
			}
			return len(got) < 2
		})
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want[:2]) {
			t.Fatalf("ScanBatches stopped after 2 = %v, %v", got, err)
		}
		wantScan(t, l, b, 0, infosOf(chain(0, 4)))
	})

	t.Run("ScanBatchesLongLog", func(t *testing.T) {
		// More batches than a BadgerLog reads per chunk.
		l := open(t)
		defer l.Close()
		counts := make([]uint32, 2*scanChunk+3)
		for i := range counts {
			counts[i] = 1
		}
		bs := chain(0, counts...)
		mustCommit(t, l, appendsOf(a, bs...), nil)
		wantScan(t, l, a, 0, infosOf(bs))
		wantScan(t, l, a, scanChunk-1, infosOf(bs[scanChunk-1:]))
		checkIndex(t, l, a)
	})

	t.Run("Stats", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		wantStats(t, l, a, ShardStats{})
		bs := chain(100, 3, 5) // a log that starts above 0
		mustCommit(t, l, appendsOf(a, bs...), nil)
		wantStats(t, l, a, ShardStats{First: 100, Tail: 108, Batches: 2, Bytes: 80})
		wantStats(t, l, b, ShardStats{})
		checkIndex(t, l, a)
	})

	t.Run("DeleteBefore", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		bs := chain(0, 3, 5, 1, 10) // [0,3) [3,8) [8,9) [9,19)
		tests := []struct {
			offset uint64
			first  uint64
			left   []Batch
		}{
			{0, 0, bs},
			{2, 0, bs}, // the batch holding offset is kept whole
			{3, 3, bs[1:]},
			{7, 3, bs[1:]},
			{8, 8, bs[2:]},
			{9, 9, bs[3:]},
			{18, 9, bs[3:]},
			{19, 19, nil},      // everything: First is the tail
			{1 << 40, 19, nil}, // past the tail: the tail stays
		}
		var appends []Append
		for i := range tests {
			appends = append(appends, appendsOf(ShardKey{Stream: 10, Shard: uint32(i)}, bs...)...)
		}
		mustCommit(t, l, appends, nil)
		for i, tt := range tests {
			s := ShardKey{Stream: 10, Shard: uint32(i)}
			first, err := l.DeleteBefore(s, tt.offset)
			if err != nil || first != tt.first {
				t.Fatalf("DeleteBefore(%d) = %d, %v; want %d", tt.offset, first, err, tt.first)
			}
			wantTailFirst(t, l, s, 19, tt.first)
			wantRead(t, l, s, 0, 0, 0, tt.left) // from below First: the first stored batch
			wantRead(t, l, s, tt.offset, 0, 0, tt.left)
			wantScan(t, l, s, 0, infosOf(tt.left))
			wantStats(t, l, s, ShardStats{First: tt.first, Tail: 19, Batches: len(tt.left), Bytes: bytesOf(tt.left)})
			checkIndex(t, l, s)
			// Again, or lower: nothing more goes.
			for _, off := range []uint64{tt.offset, tt.offset / 2} {
				if first, err := l.DeleteBefore(s, off); err != nil || first != tt.first {
					t.Fatalf("DeleteBefore(%d) again = %d, %v; want %d", off, first, err, tt.first)
				}
			}
			wantRead(t, l, s, 0, 0, 0, tt.left)
		}
		// A shard never written.
		if first, err := l.DeleteBefore(a, 100); err != nil || first != 0 {
			t.Fatalf("DeleteBefore(empty) = %d, %v", first, err)
		}
		wantTailFirst(t, l, a, 0, 0)
	})

	t.Run("DeleteEverythingKeepsTail", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		bs := chain(0, 2, 2)
		mustCommit(t, l, append(appendsOf(a, bs...), appendsOf(b, bs...)...), nil)
		if first, err := l.DeleteBefore(a, 4); err != nil || first != 4 {
			t.Fatalf("DeleteBefore = %d, %v", first, err)
		}
		wantTailFirst(t, l, a, 4, 4)
		wantStats(t, l, a, ShardStats{First: 4, Tail: 4})
		wantRead(t, l, a, 0, 0, 0, nil)
		// The shard continues at its tail, and can be emptied again.
		more := chain(4, 3)
		mustCommit(t, l, appendsOf(a, more...), nil)
		wantTailFirst(t, l, a, 7, 4)
		wantRead(t, l, a, 0, 0, 0, more)
		checkIndex(t, l, a)
		if first, err := l.DeleteBefore(a, 100); err != nil || first != 7 {
			t.Fatalf("DeleteBefore(100) = %d, %v; want 7", first, err)
		}
		wantTailFirst(t, l, a, 7, 7)
		// DropShard forgets the tail.
		if err := l.DropShard(a); err != nil {
			t.Fatalf("DropShard: %v", err)
		}
		wantTailFirst(t, l, a, 0, 0)
		wantStats(t, l, a, ShardStats{})
		wantScan(t, l, a, 0, nil)
		checkIndex(t, l, b)
		wantRead(t, l, b, 0, 0, 0, bs)
	})

	t.Run("RetainByAge", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		const t0 = int64(1_700_000_000_000_000_000)
		now := time.Unix(0, t0+1000)
		bs := tsChain(t0+100, t0+200, t0+300, t0+400) // [0,2) [2,4) [4,6) [6,8)
		backwards := tsChain(t0+100, t0+500, t0+100, t0+100)
		tests := []struct {
			name    string
			bs      []Batch
			cutoff  int64 // now - MaxAge
			deleted int
		}{
			{"cutoff at the first timestamp", bs, t0 + 100, 0},
			{"cutoff just after the first", bs, t0 + 101, 1},
			{"cutoff between two batches", bs, t0 + 250, 2},
			{"cutoff at a batch's timestamp", bs, t0 + 300, 2},
			{"cutoff just before the last", bs, t0 + 399, 3},
			{"cutoff after the last", bs, t0 + 401, 4},
			{"a fresher batch stops the walk", backwards, t0 + 250, 1},
			{"no age bound", bs, t0 + 1000, 0},
		}
		for i, tt := range tests {
			s := ShardKey{Stream: 20, Shard: uint32(i)}
			mustCommit(t, l, appendsOf(s, tt.bs...), nil)
			p := RetentionPolicy{MaxAge: time.Duration(t0 + 1000 - tt.cutoff)}
			got, err := l.Retain(s, p, now)
			left := tt.bs[tt.deleted:]
			first := uint64(2 * tt.deleted)
			want := RetainResult{First: first, DeletedBatches: tt.deleted, DeletedBytes: int64(20 * tt.deleted)}
			if err != nil || got != want {
				t.Fatalf("%s: Retain = %+v, %v; want %+v", tt.name, got, err, want)
			}
			wantTailFirst(t, l, s, 8, first)
			wantRead(t, l, s, 0, 0, 0, left)
			checkIndex(t, l, s)
			// Retain again: nothing more.
			if got, err := l.Retain(s, p, now); err != nil || got != (RetainResult{First: first}) {
				t.Fatalf("%s: Retain again = %+v, %v", tt.name, got, err)
			}
		}
		// A negative MaxAge is no bound either; an empty shard has nothing.
		s := ShardKey{Stream: 20, Shard: 0}
		if got, err := l.Retain(s, RetentionPolicy{MaxAge: -time.Hour, MaxBytes: -1}, now.Add(time.Hour)); err != nil || got != (RetainResult{First: 0}) {
			t.Fatalf("Retain(negative policy) = %+v, %v", got, err)
		}
		if got, err := l.Retain(a, RetentionPolicy{MaxAge: 1}, now); err != nil || got != (RetainResult{}) {
			t.Fatalf("Retain(empty shard) = %+v, %v", got, err)
		}
	})

	t.Run("RetainByBytes", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		bs := chain(0, 3, 5, 1, 10) // 30, 50, 10, 100 bytes: 190
		tests := []struct {
			maxBytes int64
			deleted  int
		}{
			{190, 0}, {189, 1}, {160, 1}, {159, 2}, {110, 2}, {109, 3}, {100, 3},
			{99, 3}, {1, 3}, // the newest batch stays
			{0, 0}, // no bound
		}
		for i, tt := range tests {
			s := ShardKey{Stream: 30, Shard: uint32(i)}
			mustCommit(t, l, appendsOf(s, bs...), nil)
			got, err := l.Retain(s, RetentionPolicy{MaxBytes: tt.maxBytes}, time.Now())
			left := bs[tt.deleted:]
			want := RetainResult{First: left[0].Base, DeletedBatches: tt.deleted, DeletedBytes: bytesOf(bs[:tt.deleted])}
			if err != nil || got != want {
				t.Fatalf("MaxBytes %d: Retain = %+v, %v; want %+v", tt.maxBytes, got, err, want)
			}
			wantTailFirst(t, l, s, 19, left[0].Base)
			wantRead(t, l, s, 0, 0, 0, left)
			checkIndex(t, l, s)
		}
	})

	t.Run("RetainByAgeAndBytes", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		const t0 = int64(1_000_000)
		now := time.Unix(0, t0+1000)
		fresh, old := t0+900, t0+100
		// 4 batches of 20 bytes: 80 in all.
		tests := []struct {
			name       string
			timestamps []int64
			maxAge     time.Duration // cutoff t0+250 when 750
			maxBytes   int64
			deleted    int
		}{
			{"age deletes more", []int64{old, old, old, fresh}, 750, 70, 3},
			{"bytes delete more", []int64{old, fresh, fresh, fresh}, 750, 40, 2},
			{"age deletes the newest too", []int64{old, old, old, old}, 750, 1000, 4},
			{"bytes never the newest", []int64{fresh, fresh, fresh, fresh}, 750, 1, 3},
			{"bytes then age", []int64{fresh, old, old, fresh}, 750, 60, 3},
			{"neither", []int64{fresh, old, old, old}, 750, 80, 0},
		}
		for i, tt := range tests {
			s := ShardKey{Stream: 40, Shard: uint32(i)}
			bs := tsChain(tt.timestamps...)
			mustCommit(t, l, appendsOf(s, bs...), nil)
			got, err := l.Retain(s, RetentionPolicy{MaxAge: tt.maxAge, MaxBytes: tt.maxBytes}, now)
			first := uint64(2 * tt.deleted)
			want := RetainResult{First: first, DeletedBatches: tt.deleted, DeletedBytes: int64(20 * tt.deleted)}
			if err != nil || got != want {
				t.Fatalf("%s: Retain = %+v, %v; want %+v", tt.name, got, err, want)
			}
			wantTailFirst(t, l, s, 8, first)
			wantRead(t, l, s, 0, 0, 0, bs[tt.deleted:])
			checkIndex(t, l, s)
		}
	})

	t.Run("OffsetAt", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		const t0 = int64(1_700_000_000_000_000_000)
		// [0,2)@100 [2,4)@200 [4,6)@200 [6,8)@400, and a clock that stepped
		// back: [0,2)@100 [2,4)@500 [4,6)@300 [6,8)@300.
		bs := tsChain(t0+100, t0+200, t0+200, t0+400)
		back := tsChain(t0+100, t0+500, t0+300, t0+300)
		s, sb, empty := ShardKey{Stream: 50, Shard: 0}, ShardKey{Stream: 50, Shard: 1}, ShardKey{Stream: 50, Shard: 2}
		mustCommit(t, l, append(appendsOf(s, bs...), appendsOf(sb, back...)...), nil)
		for _, tt := range []struct {
			shard ShardKey
			at    int64
			want  uint64
		}{
			{s, math.MinInt64, 0}, // before everything: First
			{s, t0, 0},
			{s, t0 + 100, 0}, // at a batch's timestamp: that batch
			{s, t0 + 101, 2},
			{s, t0 + 200, 2}, // two batches share it: the first of them
			{s, t0 + 201, 6},
			{s, t0 + 400, 6},
			{s, t0 + 401, 8}, // after everything: the tail
			{s, math.MaxInt64, 8},
			// The first batch in offset order at or after the time, even
			// with an older one after it (the cut age retention makes).
			{sb, t0 + 150, 2},
			{sb, t0 + 300, 2},
			{sb, t0 + 501, 8},
			{empty, t0, 0}, // never written
		} {
			if got, err := l.OffsetAt(tt.shard, tt.at); err != nil || got != tt.want {
				t.Fatalf("OffsetAt(%v, t0%+d) = %d, %v; want %d", tt.shard, tt.at-t0, got, err, tt.want)
			}
		}
		// After retention the answer moves with First; with every batch
		// deleted it is the tail that stays.
		if _, err := l.DeleteBefore(s, 4); err != nil {
			t.Fatal(err)
		}
		for at, want := range map[int64]uint64{t0: 4, t0 + 100: 4, t0 + 300: 6, t0 + 401: 8} {
			if got, err := l.OffsetAt(s, at); err != nil || got != want {
				t.Fatalf("after DeleteBefore(4): OffsetAt(t0%+d) = %d, %v; want %d", at-t0, got, err, want)
			}
		}
		if _, err := l.DeleteBefore(s, 8); err != nil {
			t.Fatal(err)
		}
		if got, err := l.OffsetAt(s, t0); err != nil || got != 8 {
			t.Fatalf("emptied shard: OffsetAt = %d, %v; want its tail 8", got, err)
		}
	})

	t.Run("OffsetAtIsTheAgeRetentionCut", func(t *testing.T) {
		// For any cutoff, OffsetAt is where Retain by age leaves First.
		l := open(t)
		defer l.Close()
		const t0 = int64(1_000_000)
		timestamps := []int64{t0 + 10, t0 + 40, t0 + 20, t0 + 20, t0 + 50, t0 + 30, t0 + 60}
		now := time.Unix(0, t0+1000)
		for i, cut := 0, t0; cut <= t0+70; i, cut = i+1, cut+5 {
			sk := ShardKey{Stream: 51, Shard: uint32(i)}
			mustCommit(t, l, appendsOf(sk, tsChain(timestamps...)...), nil)
			at, err := l.OffsetAt(sk, cut)
			if err != nil {
				t.Fatal(err)
			}
			r, err := l.Retain(sk, RetentionPolicy{MaxAge: time.Duration(now.UnixNano() - cut)}, now)
			if err != nil || r.First != at {
				t.Fatalf("cutoff t0%+d: OffsetAt %d, Retain left First %d (%v)", cut-t0, at, r.First, err)
			}
		}
	})

	t.Run("ConcurrentDeleteBefore", func(t *testing.T) {
		testConcurrentDeleteBefore(t, open(t))
	})
}

// testConcurrentDeleteBefore runs a writer committing batches of 2 records,
// a deleter deleting behind it and readers, checking that every read is whole:
// contiguous intact batches, starting with the batch holding from or, if it
// was deleted, a later one no further than the deleter had gone. It closes l.
func testConcurrentDeleteBefore(t *testing.T, l Log) {
	defer l.Close()
	s := ShardKey{Stream: 7, Shard: 7}
	const commits = 60
	var (
		committed atomic.Uint64 // the tail the writer has committed
		target    atomic.Uint64 // the offset the deleter deletes before, set before it starts
		reads     atomic.Int64  // checks the readers made, to pace the writer
		failed    atomic.Bool   // set with the first error
		wg        sync.WaitGroup
		readersWG sync.WaitGroup
		stop      = make(chan struct{})
		tails     = make(chan uint64, commits)
		errs      = make(chan error, 8)
	)
	report := func(err error) {
		failed.Store(true)
		select {
		case errs <- err:
		default:
		}
	}
	wg.Add(2)
	go func() { // writer
		defer wg.Done()
		defer close(tails)
		for i := range uint64(commits) {
			// Let the readers overlap every commit, even a fast one.
			for reads.Load() < 2*int64(i) && !failed.Load() {
				runtime.Gosched()
			}
			if err := l.Commit(appendsOf(s, testBatch(2*i, 2, 20)), nil); err != nil {
				report(err)
				return
			}
			committed.Store(2*i + 2)
			tails <- 2*i + 2
		}
	}()
	go func() { // deleter
		defer wg.Done()
		rng := rand.New(rand.NewPCG(5, 6))
		for tail := range tails {
			off := tail - 2*min(tail/2, uint64(rng.IntN(4)))
			target.Store(max(target.Load(), off))
			first, err := l.DeleteBefore(s, off)
			if err == nil && first != target.Load() {
				err = fmt.Errorf("DeleteBefore(%d) = %d, want %d", off, first, target.Load())
			}
			if err != nil {
				report(err)
				return
			}
		}
	}()
	for r := range 2 {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			rng := rand.New(rand.NewPCG(7, uint64(r)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := checkConcurrentRead(l, s, rng, &committed, &target); err != nil {
					report(err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	readersWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantTailFirst(t, l, s, 2*commits, target.Load())
	checkIndex(t, l, s)
}

// checkConcurrentRead makes one Read, one ScanBatches and one Stats of s
// while the writer and deleter of testConcurrentDeleteBefore run.
func checkConcurrentRead(l Log, s ShardKey, rng *rand.Rand, committed, target *atomic.Uint64) error {
	from := uint64(rng.IntN(int(committed.Load()) + 3))
	got, err := l.Read(s, from, rng.IntN(4), 0)
	if err != nil {
		return err
	}
	deleted := target.Load() // loaded after the Read: the deletes it may have seen
	for i, b := range got {
		if d := sameBatches(got[i:i+1], []Batch{testBatch(b.Base, 2, 20)}); d != "" || b.Base%2 != 0 {
			return fmt.Errorf("Read(%d) batch %d at %d: %s", from, i, b.Base, d)
		}
		if i > 0 && b.Base != got[i-1].End() {
			return fmt.Errorf("Read(%d): batch at %d after one ending at %d", from, b.Base, got[i-1].End())
		}
	}
	if len(got) > 0 && got[0].Base > from && got[0].Base > deleted {
		return fmt.Errorf("Read(%d) starts at %d, but only offsets below %d were deleted", from, got[0].Base, deleted)
	}
	if len(got) > 0 && got[0].Base <= from && got[0].End() <= from {
		return fmt.Errorf("Read(%d) starts with a batch ending at %d", from, got[0].End())
	}
	infos, err := scanBatches(l, s, 0)
	if err != nil {
		return err
	}
	for i, b := range infos {
		if b.Count != 2 || b.Bytes != 20 || (i > 0 && b.Base != infos[i-1].End()) {
			return fmt.Errorf("ScanBatches: batch %d = %+v after %v", i, b, infos[:i])
		}
	}
	st, err := l.Stats(s)
	if err != nil {
		return err
	}
	if st.First > st.Tail || st.Tail-st.First != 2*uint64(st.Batches) || st.Bytes != 20*int64(st.Batches) {
		return fmt.Errorf("Stats = %+v", st)
	}
	return nil
}

func TestRetainPlan(t *testing.T) {
	// The plan alone, including the edges of the cutoff's arithmetic.
	b := func(ts, bytes int64) BatchInfo { return BatchInfo{Count: 1, Timestamp: ts, Bytes: bytes} }
	now := time.Unix(0, 1000)
	tests := []struct {
		name    string
		p       RetentionPolicy
		now     time.Time
		batches []BatchInfo
		deleted int
	}{
		{"zero policy", RetentionPolicy{}, now, []BatchInfo{b(0, 10), b(1, 10)}, 0},
		{"age", RetentionPolicy{MaxAge: 500}, now, []BatchInfo{b(499, 1), b(500, 1), b(0, 1)}, 1},
		{"huge age", RetentionPolicy{MaxAge: 1<<63 - 1}, time.Unix(0, -2), []BatchInfo{b(-1<<63, 1)}, 0},
		{"bytes", RetentionPolicy{MaxBytes: 15}, now, []BatchInfo{b(0, 10), b(0, 10), b(0, 10)}, 2},
		{"bytes keep the newest", RetentionPolicy{MaxBytes: 1}, now, []BatchInfo{b(0, 10)}, 0},
		{"age takes the newest", RetentionPolicy{MaxAge: 1, MaxBytes: 1}, now, []BatchInfo{b(0, 10)}, 1},
	}
	for _, tt := range tests {
		var total int64
		for _, bi := range tt.batches {
			total += bi.Bytes
		}
		plan := newRetainPlan(tt.p, tt.now, len(tt.batches), total)
		n := 0
		for n < len(tt.batches) && plan.deletes(tt.batches[n]) {
			n++
		}
		if n != tt.deleted {
			t.Errorf("%s: %d deleted, want %d", tt.name, n, tt.deleted)
		}
	}
}

func TestMemoryLogEvictionKeepsIndex(t *testing.T) {
	s := ShardKey{Stream: 3, Shard: 1}
	l := NewMemoryLog(MemoryOptions{MaxShardBytes: 100})
	defer l.Close()
	bs := chain(0, 4, 4, 4) // 40 bytes each
	mustCommit(t, l, appendsOf(s, bs...), nil)
	wantStats(t, l, s, ShardStats{First: 4, Tail: 12, Batches: 2, Bytes: 80})
	wantScan(t, l, s, 0, infosOf(bs[1:]))
	checkIndex(t, l, s)
	// Retention after eviction sees only what is left.
	got, err := l.Retain(s, RetentionPolicy{MaxBytes: 50}, time.Now())
	if err != nil || got != (RetainResult{First: 8, DeletedBatches: 1, DeletedBytes: 40}) {
		t.Fatalf("Retain = %+v, %v", got, err)
	}
	// Eviction after retention emptied the shard keeps the tail.
	if first, err := l.DeleteBefore(s, 12); err != nil || first != 12 {
		t.Fatalf("DeleteBefore = %d, %v", first, err)
	}
	more := chain(12, 6, 6) // 60 bytes each: the first is evicted
	mustCommit(t, l, appendsOf(s, more...), nil)
	wantStats(t, l, s, ShardStats{First: 18, Tail: 24, Batches: 1, Bytes: 60})
	checkIndex(t, l, s)
}
