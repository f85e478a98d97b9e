package storage

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBadgerMatchesMemory runs the same random operations against a
// BadgerLog and an unbounded MemoryLog (the model) and checks that every
// answer is the same, reopening the Badger log now and then. Batch
// timestamps follow a clock that mostly moves forward, as a shard's do, so
// that age retention deletes some batches and not others.
func TestBadgerMatchesMemory(t *testing.T) {
	const ops = 1500
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	bl := openTestBadger(t, dir)
	ml := NewMemoryLog(MemoryOptions{})
	defer ml.Close()

	shards := []ShardKey{{Stream: 1, Shard: 0}, {Stream: 1, Shard: 1}, {Stream: 2, Shard: 0}, {Stream: 1<<63 + 5, Shard: 1<<32 - 1}}
	tails := map[ShardKey]uint64{}
	metaKeys := []string{"a", "a/1", "a/2", "b", "b/x", ""}
	randShard := func() ShardKey { return shards[rng.IntN(len(shards))] }
	var commits, refused, reads, batchesRead, reopens int // to check the test is not vacuous
	var deletes, retains, batchesDeleted, scanned int     // idem, for retention
	var offsetsAt int
	clock := int64(1_700_000_000_000_000_000) // batch timestamps, in ns

	// check compares one answer of both logs.
	check := func(i int, what string, mv, bv any, merr, berr error) {
		t.Helper()
		if (merr == nil) != (berr == nil) || (merr != nil && !sameSentinel(merr, berr)) {
			t.Fatalf("op %d %s: memory err %v, badger err %v", i, what, merr, berr)
		}
		if fmt.Sprint(mv) != fmt.Sprint(bv) {
			t.Fatalf("op %d %s: memory %v, badger %v", i, what, mv, bv)
		}
	}

	for i := range ops {
		switch p := rng.IntN(100); {
		case p < 35: // commit
			var appends []Append
			next := maps.Clone(tails)
			for range rng.IntN(5) {
				s := randShard()
				count := uint32(1 + rng.IntN(8))
				if rng.IntN(50) == 0 {
					count = 0 // invalid: the whole commit is refused
				}
				clock += int64(rng.IntN(1000))
				ts := clock - int64(rng.IntN(300)) // now and then older than the batch before
				b := Batch{Base: next[s], Count: count, Timestamp: ts, Records: randBytes(rng, 1+rng.IntN(3000))}
				appends = append(appends, Append{Shard: s, Batch: b})
				next[s] = b.End()
			}
			var metas []MetaPut
			for range rng.IntN(3) {
				m := MetaPut{Key: []byte(metaKeys[rng.IntN(len(metaKeys))])}
				if rng.IntN(3) > 0 {
					m.Value = randBytes(rng, rng.IntN(1500))
				}
				metas = append(metas, m)
			}
			merr := ml.Commit(appends, metas)
			berr := bl.Commit(appends, metas)
			check(i, "Commit", nil, nil, merr, berr)
			if merr == nil {
				tails = next
				commits++
			} else {
				refused++
			}
		case p < 55: // read
			s := randShard()
			from := uint64(rng.IntN(int(tails[s]) + 10))
			maxBatches, maxBytes := rng.IntN(6), rng.IntN(8000)
			mb, merr := ml.Read(s, from, maxBatches, maxBytes)
			bb, berr := bl.Read(s, from, maxBatches, maxBytes)
			check(i, fmt.Sprintf("Read(%v, %d, %d, %d)", s, from, maxBatches, maxBytes), "", sameBatches(bb, mb), merr, berr)
			reads++
			batchesRead += len(mb)
		case p < 63: // tail and first
			s := randShard()
			mt, merr := ml.Tail(s)
			bt, berr := bl.Tail(s)
			check(i, "Tail", mt, bt, merr, berr)
			if mt != tails[s] {
				t.Fatalf("op %d: model tail %d, want %d", i, mt, tails[s])
			}
			mf, merr := ml.First(s)
			bf, berr := bl.First(s)
			check(i, "First", mf, bf, merr, berr)
		case p < 70: // metadata
			k := []byte(metaKeys[rng.IntN(len(metaKeys))])
			mv, merr := ml.GetMeta(k)
			bv, berr := bl.GetMeta(k)
			check(i, fmt.Sprintf("GetMeta(%q)", k), mv, bv, merr, berr)
			ms, merr := scanAll(ml, k)
			bs, berr := scanAll(bl, k)
			check(i, fmt.Sprintf("ScanMeta(%q)", k), ms, bs, merr, berr)
		case p < 73: // drop a shard
			s := randShard()
			check(i, "DropShard", nil, nil, ml.DropShard(s), bl.DropShard(s))
			tails[s] = 0
		case p < 75: // reopen the Badger log
			if err := bl.Close(); err != nil {
				t.Fatalf("op %d: Close: %v", i, err)
			}
			bl = openTestBadger(t, dir)
			reopens++
		case p < 82: // delete before an offset; the tail stays
			s := randShard()
			off := uint64(rng.IntN(int(tails[s]) + 5))
			before, _ := ml.Stats(s)
			mf, merr := ml.DeleteBefore(s, off)
			bf, berr := bl.DeleteBefore(s, off)
			check(i, fmt.Sprintf("DeleteBefore(%v, %d)", s, off), mf, bf, merr, berr)
			after, _ := ml.Stats(s)
			if after.Tail != tails[s] {
				t.Fatalf("op %d: model tail %d after DeleteBefore, want %d", i, after.Tail, tails[s])
			}
			deletes++
			batchesDeleted += before.Batches - after.Batches
		case p < 89: // retention
			s := randShard()
			var policy RetentionPolicy
			if rng.IntN(3) > 0 {
				policy.MaxAge = time.Duration(rng.IntN(20_000))
			}
			if rng.IntN(3) > 0 {
				policy.MaxBytes = int64(rng.IntN(20_000))
			}
			now := time.Unix(0, clock+int64(rng.IntN(2000)))
			mr, merr := ml.Retain(s, policy, now)
			br, berr := bl.Retain(s, policy, now)
			check(i, fmt.Sprintf("Retain(%v, %+v, %d)", s, policy, now.UnixNano()), mr, br, merr, berr)
			retains++
			batchesDeleted += mr.DeletedBatches
		case p < 95: // scan the index
			s := randShard()
			from := uint64(rng.IntN(int(tails[s]) + 5))
			limit := rng.IntN(5) // 0: all
			scan := func(l Log) ([]BatchInfo, error) {
				var out []BatchInfo
				err := l.ScanBatches(s, from, func(b BatchInfo) bool {
					out = append(out, b)
					return limit == 0 || len(out) < limit
				})
				return out, err
			}
			mi, merr := scan(ml)
			bi, berr := scan(bl)
			check(i, fmt.Sprintf("ScanBatches(%v, %d)", s, from), mi, bi, merr, berr)
			scanned += len(mi)
		case p < 97: // stats
			s := randShard()
			ms, merr := ml.Stats(s)
			bs, berr := bl.Stats(s)
			check(i, fmt.Sprintf("Stats(%v)", s), ms, bs, merr, berr)
		case p < 98: // the first offset at or after a time
			s := randShard()
			at := clock - int64(rng.IntN(30_000))
			mo, merr := ml.OffsetAt(s, at)
			bo, berr := bl.OffsetAt(s, at)
			check(i, fmt.Sprintf("OffsetAt(%v, %d)", s, at), mo, bo, merr, berr)
			// And both say what reading every batch says.
			all, _ := ml.Read(s, 0, 0, 0)
			want := tails[s]
			for _, b := range all {
				if b.Timestamp >= at {
					want = b.Base
					break
				}
			}
			if st, _ := ml.Stats(s); len(all) == 0 {
				want = st.Tail
			}
			if mo != want {
				t.Fatalf("op %d: OffsetAt(%v, %d) = %d, the batches say %d", i, s, at, mo, want)
			}
			offsetsAt++
		default: // sync
			check(i, "Sync", nil, nil, ml.Sync(), bl.Sync())
		}
	}

	// Finally, everything matches.
	for _, s := range shards {
		mb, merr := ml.Read(s, 0, 0, 0)
		bb, berr := bl.Read(s, 0, 0, 0)
		check(ops, fmt.Sprintf("final Read(%v)", s), "", sameBatches(bb, mb), merr, berr)
		checkIndex(t, ml, s)
		checkIndex(t, bl, s)
	}
	ms, merr := scanAll(ml, nil)
	bs, berr := scanAll(bl, nil)
	check(ops, "final ScanMeta", ms, bs, merr, berr)
	t.Logf("%d commits, %d refused, %d reads returning %d batches, %d reopens", commits, refused, reads, batchesRead, reopens)
	t.Logf("%d deletes and %d retains deleting %d batches, %d batches scanned, %d offsets at a time", deletes, retains, batchesDeleted, scanned, offsetsAt)
	if commits < ops/4 || refused == 0 || batchesRead < reads || reopens == 0 ||
		deletes == 0 || retains == 0 || batchesDeleted < (deletes+retains)/2 || scanned == 0 || offsetsAt == 0 {
		t.Fatal("the random operations did not cover enough ground")
	}
}

// sameSentinel reports whether a and b wrap the same storage sentinel.
func sameSentinel(a, b error) bool {
	for _, s := range []error{ErrNotFound, ErrCorrupt, ErrInvalidBatch, ErrClosed} {
		if errors.Is(a, s) != errors.Is(b, s) {
			return false
		}
	}
	return true
}

// scanAll returns "key=value" for every metadata entry under prefix.
func scanAll(l Log, prefix []byte) ([]string, error) {
	var out []string
	var last []byte
	err := l.ScanMeta(prefix, func(k, v []byte) error {
		if len(out) > 0 && bytes.Compare(last, k) >= 0 {
			return fmt.Errorf("ScanMeta: key %q after %q", k, last)
		}
		last = bytes.Clone(k)
		out = append(out, fmt.Sprintf("%q=%x", k, v))
		return nil
	})
	return out, err
}

// randBytes returns n random bytes.
func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
