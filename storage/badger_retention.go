package storage

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Retention and statistics of a BadgerLog: they walk the batch index (small
// values in the LSM tree) and never read a batch.

// scanChunk is how many index entries ScanBatches reads per read transaction.
const scanChunk = 256

// ScanBatches implements Log.ScanBatches. It reads the index scanChunk
// entries at a time, each chunk in its own read transaction, and calls fn
// between them with no lock held.
func (l *BadgerLog) ScanBatches(shard ShardKey, from uint64, fn func(BatchInfo) bool) error {
	for {
		chunk, err := l.indexChunk(shard, from, scanChunk)
		if err != nil {
			return fmt.Errorf("storage: scan batches of stream %d shard %d from %d: %w", shard.Stream, shard.Shard, from, err)
		}
		for _, b := range chunk {
			if !fn(b) {
				return nil
			}
		}
		if len(chunk) < scanChunk {
			return nil
		}
		from = chunk[len(chunk)-1].End()
	}
}

// indexChunk returns up to limit index entries of the shard's batches whose
// End is after from, in offset order.
func (l *BadgerLog) indexChunk(shard ShardKey, from uint64, limit int) ([]BatchInfo, error) {
	if err := l.acquire(); err != nil {
		return nil, err
	}
	defer l.mu.RUnlock()
	var out []BatchInfo
	err := l.db.View(func(txn *badger.Txn) error {
		prefix := indexShardPrefix(shard)
		// The batch holding from is the last one whose base is <= from.
		start := prefix
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		o.Reverse = true
		o.PrefetchValues = false
		rit := txn.NewIterator(o)
		rit.Seek(indexKey(shard, from))
		if rit.ValidForPrefix(prefix) {
			start = rit.Item().KeyCopy(nil)
		}
		rit.Close()

		it := newKeyIterator(txn, prefix)
		defer it.Close()
		for it.Seek(start); it.ValidForPrefix(prefix) && len(out) < limit; it.Next() {
			b, err := readIndex(it.Item())
			if err != nil {
				return err
			}
			if b.End() > from {
				out = append(out, b)
			}
		}
		return nil
	})
	return out, err
}

// DeleteBefore implements Log.DeleteBefore: it deletes the batches (and their
// index entries) below the first indexed batch that ends after offset, each
// batch with its index entry in one transaction, in offset order, after
// raising the shard's floor (see BadgerLog), and syncs.
func (l *BadgerLog) DeleteBefore(shard ShardKey, offset uint64) (uint64, error) {
	if err := l.acquire(); err != nil {
		return 0, err
	}
	defer l.mu.RUnlock()
	l.deletes.Lock()
	defer l.deletes.Unlock()
	var d deletePlan
	err := l.db.View(func(txn *badger.Txn) error {
		var err error
		d, err = planDelete(txn, shard, offset)
		return err
	})
	if err == nil {
		err = l.deleteLocked(shard, d)
	}
	if err != nil {
		return 0, fmt.Errorf("storage: delete stream %d shard %d before %d: %w", shard.Stream, shard.Shard, offset, err)
	}
	return d.first, nil
}

// Retain implements Log.Retain: it decides the cut from the index (with a
// byte bound, after a first pass that sums the shard's bytes), then deletes
// as DeleteBefore does, all from one snapshot.
func (l *BadgerLog) Retain(shard ShardKey, p RetentionPolicy, now time.Time) (RetainResult, error) {
	if err := l.acquire(); err != nil {
		return RetainResult{}, err
	}
	defer l.mu.RUnlock()
	l.deletes.Lock()
	defer l.deletes.Unlock()
	var d deletePlan
	err := l.db.View(func(txn *badger.Txn) error {
		var batches int
		var bytes int64
		if needsTotals(p) {
			err := walkIndex(txn, shard, func(b BatchInfo) bool {
				batches++
				bytes += b.Bytes
				return true
			})
			if err != nil {
				return err
			}
		}
		plan := newRetainPlan(p, now, batches, bytes)
		var cut uint64
		n := 0
		err := walkIndex(txn, shard, func(b BatchInfo) bool {
			if !plan.deletes(b) {
				return false
			}
			cut = b.End()
			n++
			return true
		})
		if err != nil {
			return err
		}
		if n == 0 {
			d.first, err = firstOf(txn, shard)
			return err
		}
		d, err = planDelete(txn, shard, cut)
		return err
	})
	if err == nil {
		err = l.deleteLocked(shard, d)
	}
	if err != nil {
		return RetainResult{}, fmt.Errorf("storage: retain stream %d shard %d: %w", shard.Stream, shard.Shard, err)
	}
	return RetainResult{First: d.first, DeletedBatches: d.batches, DeletedBytes: d.bytes}, nil
}

// Stats implements Log.Stats from one walk of the shard's index and its
// floor.
func (l *BadgerLog) Stats(shard ShardKey) (ShardStats, error) {
	if err := l.acquire(); err != nil {
		return ShardStats{}, err
	}
	defer l.mu.RUnlock()
	var st ShardStats
	err := l.db.View(func(txn *badger.Txn) error {
		floor, err := readFloor(txn, shard)
		if err != nil {
			return err
		}
		st.Tail = floor
		return walkIndex(txn, shard, func(b BatchInfo) bool {
			if st.Batches == 0 {
				st.First = b.Base
			}
			st.Batches++
			st.Bytes += b.Bytes
			st.Tail = max(st.Tail, b.End())
			return true
		})
	})
	if err != nil {
		return ShardStats{}, fmt.Errorf("storage: stats of stream %d shard %d: %w", shard.Stream, shard.Shard, err)
	}
	if st.Batches == 0 {
		st.First = st.Tail
	}
	return st, nil
}

// OffsetAt implements Log.OffsetAt from one walk of the shard's index (up
// to the answer) and its floor, in one read transaction.
func (l *BadgerLog) OffsetAt(shard ShardKey, unixNano int64) (uint64, error) {
	if err := l.acquire(); err != nil {
		return 0, err
	}
	defer l.mu.RUnlock()
	var off uint64
	err := l.db.View(func(txn *badger.Txn) error {
		floor, err := readFloor(txn, shard)
		if err != nil {
			return err
		}
		off = floor
		return walkIndex(txn, shard, func(b BatchInfo) bool {
			if b.Timestamp >= unixNano {
				off = b.Base
				return false
			}
			off = max(off, b.End())
			return true
		})
	})
	if err != nil {
		return 0, fmt.Errorf("storage: offset at %d of stream %d shard %d: %w", unixNano, shard.Stream, shard.Shard, err)
	}
	return off, nil
}

// deletePlan is what one DeleteBefore deletes, decided from a snapshot.
type deletePlan struct {
	// bases are the bases of the batch and index keys to delete, ascending
	// and unique.
	bases []uint64
	// floor is the shard's floor after the deletes.
	floor uint64
	// first is the shard's First after the deletes.
	first uint64
	// batches is the number of indexed batches deleted.
	batches int
	// bytes is the Records bytes of the indexed batches deleted.
	bytes int64
}

// planDelete decides what DeleteBefore(shard, offset) deletes: the cut is the
// base of the first indexed batch that ends after offset or, when there is
// none, the end of the last one (at least the floor); every batch and index
// key below it goes, including any batch without an index entry there.
func planDelete(txn *badger.Txn, shard ShardKey, offset uint64) (deletePlan, error) {
	var d deletePlan
	floor, err := readFloor(txn, shard)
	if err != nil {
		return d, err
	}
	cut := floor
	err = walkIndex(txn, shard, func(b BatchInfo) bool {
		if b.End() > offset {
			cut = b.Base
			return false
		}
		d.batches++
		d.bytes += b.Bytes
		cut = max(cut, b.End())
		return true
	})
	if err != nil {
		return d, err
	}
	if d.bases, err = storedBases(txn, shard, cut, false); err != nil {
		return d, err
	}
	d.floor = max(floor, cut)
	d.first = d.floor
	o := badger.DefaultIteratorOptions
	o.Prefix = shardPrefix(shard)
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	if it.Seek(batchKey(shard, cut)); it.ValidForPrefix(o.Prefix) {
		if d.first, err = batchKeyBase(it.Item().Key()); err != nil {
			return d, err
		}
	}
	return d, nil
}

// deleteLocked carries out d, durably: the floor first, then each batch with
// its index entry, in offset order, so that a crash part way leaves a suffix
// of the log above the floor. It writes nothing when d deletes nothing. The
// caller holds deletes.
func (l *BadgerLog) deleteLocked(shard ShardKey, d deletePlan) error {
	if len(d.bases) == 0 {
		return nil
	}
	groups := append([][]writeOp{{setOp(floorKey(shard), encodeFloor(d.floor))}}, batchDeletes(shard, d.bases)...)
	return l.writeDurably(groups)
}

// batchDeletes returns one group per base deleting the batch and its index
// entry.
func batchDeletes(shard ShardKey, bases []uint64) [][]writeOp {
	groups := make([][]writeOp, len(bases))
	for i, base := range bases {
		groups[i] = []writeOp{deleteOp(batchKey(shard, base)), deleteOp(indexKey(shard, base))}
	}
	return groups
}

// storedBases returns, ascending and unique, the bases of the shard's batch
// and index keys below below (all of them when all is set). It reads keys
// only.
func storedBases(txn *badger.Txn, shard ShardKey, below uint64, all bool) ([]uint64, error) {
	records, err := keyBases(txn, shardPrefix(shard), below, all)
	if err != nil {
		return nil, err
	}
	index, err := keyBases(txn, indexShardPrefix(shard), below, all)
	if err != nil {
		return nil, err
	}
	// Merge: the two lists are normally equal.
	out := make([]uint64, 0, max(len(records), len(index)))
	for len(records) > 0 || len(index) > 0 {
		switch {
		case len(index) == 0 || (len(records) > 0 && records[0] < index[0]):
			out, records = append(out, records[0]), records[1:]
		case len(records) == 0 || index[0] < records[0]:
			out, index = append(out, index[0]), index[1:]
		default:
			out, records, index = append(out, records[0]), records[1:], index[1:]
		}
	}
	return out, nil
}

// keyBases returns the bases of the keys under prefix (a shard's batch or
// index prefix) below below, or all of them when all is set, in order.
func keyBases(txn *badger.Txn, prefix []byte, below uint64, all bool) ([]uint64, error) {
	var out []uint64
	it := newKeyIterator(txn, prefix)
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		base, err := batchKeyBase(it.Item().Key())
		if err != nil {
			return nil, err
		}
		if !all && base >= below {
			break
		}
		out = append(out, base)
	}
	return out, nil
}

// walkIndex calls fn for each index entry of the shard in offset order until
// fn returns false.
func walkIndex(txn *badger.Txn, shard ShardKey, fn func(BatchInfo) bool) error {
	prefix := indexShardPrefix(shard)
	it := newKeyIterator(txn, prefix)
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		b, err := readIndex(it.Item())
		if err != nil {
			return err
		}
		if !fn(b) {
			return nil
		}
	}
	return nil
}

// newKeyIterator returns a forward iterator over prefix that does not
// prefetch values: index values are read from the LSM tree on demand, and
// batch values not at all.
func newKeyIterator(txn *badger.Txn, prefix []byte) *badger.Iterator {
	o := badger.DefaultIteratorOptions
	o.Prefix = prefix
	o.PrefetchValues = false
	return txn.NewIterator(o)
}

// readIndex decodes the index entry stored in item.
func readIndex(item *badger.Item) (BatchInfo, error) {
	base, err := batchKeyBase(item.Key())
	if err != nil {
		return BatchInfo{}, err
	}
	var b BatchInfo
	err = item.Value(func(v []byte) error {
		b, err = decodeIndex(base, v)
		return err
	})
	return b, err
}

// readFloor returns the shard's floor, or 0 when it has none.
func readFloor(txn *badger.Txn, shard ShardKey) (uint64, error) {
	item, err := txn.Get(floorKey(shard))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var floor uint64
	err = item.Value(func(v []byte) error {
		floor, err = decodeFloor(v)
		return err
	})
	return floor, err
}

// firstOf returns the base of the shard's first batch, or its floor when it
// has none.
func firstOf(txn *badger.Txn, shard ShardKey) (uint64, error) {
	prefix := shardPrefix(shard)
	it := newKeyIterator(txn, prefix)
	defer it.Close()
	if it.Seek(prefix); it.ValidForPrefix(prefix) {
		return batchKeyBase(it.Item().Key())
	}
	return readFloor(txn, shard)
}
