package storage

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// MemoryOptions configures a MemoryLog.
type MemoryOptions struct {
	// MaxShardBytes caps the Records bytes kept per shard: once a commit
	// takes a shard past it, its oldest batches are evicted, whole, until it
	// fits again, but the newest batch is always kept. 0 means no cap.
	MaxShardBytes int64
}

// MemoryLog is a Log kept in memory, for ephemeral streams and tests. Nothing
// survives Close; Sync is a no-op.
//
// Its batch index is the shard's slice of batches itself: ScanBatches,
// Retain and Stats look only at the Batch headers and the shard's byte
// count, which Commit, eviction, DeleteBefore and Retain keep together, so
// the index cannot disagree with the records.
//
// Commit stores the Records slices it is given without copying them (the
// caller must not modify them afterwards, as Batch says), and Read returns
// copies of the Batch structs that share those slices: callers of Read must
// not modify the Records they get. Metadata keys and values are copied in
// and out.
type MemoryLog struct {
	// maxShardBytes is MemoryOptions.MaxShardBytes; immutable.
	maxShardBytes int64

	// mu guards the state below. No method calls out (fn of ScanMeta runs
	// after mu is released), so there is no lock order to respect.
	mu struct {
		sync.Mutex
		// closed is set by Close.
		closed bool
		// shards holds each shard's batches; a shard never written (or
		// dropped) has no entry, while one emptied by DeleteBefore or Retain
		// keeps its entry for its floor.
		shards map[ShardKey]*memShard
		// meta holds the metadata, keyed by string(key).
		meta map[string][]byte
	}
}

// memShard is one shard's log in a MemoryLog, guarded by MemoryLog.mu.
type memShard struct {
	// batches are in offset order; empty only after DeleteBefore or Retain
	// deleted them all.
	batches []Batch
	// bytes is the sum of len(Records) over batches.
	bytes int64
	// floor is the offset below which every batch was deleted (by
	// DeleteBefore, Retain or eviction): the shard's tail and First when
	// batches is empty.
	floor uint64
}

// tail returns the End of the last batch, or the floor when there is none.
func (s *memShard) tail() uint64 {
	if len(s.batches) == 0 {
		return s.floor
	}
	return s.batches[len(s.batches)-1].End()
}

// first returns the Base of the first batch, or the floor when there is none.
func (s *memShard) first() uint64 {
	if len(s.batches) == 0 {
		return s.floor
	}
	return s.batches[0].Base
}

// deleteFirst deletes the first n batches, raises the floor past them, and
// returns their Records bytes.
func (s *memShard) deleteFirst(n int) int64 {
	if n == 0 {
		return 0
	}
	var bytes int64
	for i := range n {
		bytes += int64(len(s.batches[i].Records))
	}
	if n == len(s.batches) {
		s.floor = max(s.floor, s.batches[n-1].End())
	} else {
		s.floor = max(s.floor, s.batches[n].Base)
	}
	clear(s.batches[:n]) // release the records
	s.batches = s.batches[n:]
	s.bytes -= bytes
	return bytes
}

// Compile-time check that MemoryLog implements Log.
var _ Log = (*MemoryLog)(nil)

// NewMemoryLog returns an empty MemoryLog.
func NewMemoryLog(opts MemoryOptions) *MemoryLog {
	l := &MemoryLog{maxShardBytes: opts.MaxShardBytes}
	l.mu.shards = make(map[ShardKey]*memShard)
	l.mu.meta = make(map[string][]byte)
	return l
}

// Commit implements Log.Commit: it applies everything at once, or nothing
// when a batch has a zero Count or no Records bytes (ErrInvalidBatch).
func (l *MemoryLog) Commit(appends []Append, metas []MetaPut) error {
	if err := validateAppends(appends); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	var all []MetaPut
	for _, a := range appends {
		all = append(all, a.Metas...)
		s := l.mu.shards[a.Shard]
		if s == nil {
			s = &memShard{}
			l.mu.shards[a.Shard] = s
		}
		s.batches = append(s.batches, a.Batch)
		s.bytes += int64(len(a.Batch.Records))
		l.evictLocked(s)
	}
	for _, m := range append(all, metas...) {
		if m.Value == nil {
			delete(l.mu.meta, string(m.Key))
			continue
		}
		l.mu.meta[string(m.Key)] = bytes.Clone(m.Value)
	}
	return nil
}

// evictLocked drops s's oldest batches while s is over the byte cap, keeping
// at least the newest one.
func (l *MemoryLog) evictLocked(s *memShard) {
	if l.maxShardBytes <= 0 {
		return
	}
	n, bytes := 0, s.bytes
	for bytes > l.maxShardBytes && n < len(s.batches)-1 {
		bytes -= int64(len(s.batches[n].Records))
		n++
	}
	s.deleteFirst(n)
}

// Tail implements Log.Tail.
func (l *MemoryLog) Tail(shard ShardKey) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	s := l.mu.shards[shard]
	if s == nil {
		return 0, nil
	}
	return s.tail(), nil
}

// First implements Log.First: the base of the oldest batch not evicted or
// deleted, or the tail when there is none.
func (l *MemoryLog) First(shard ShardKey) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	s := l.mu.shards[shard]
	if s == nil {
		return 0, nil
	}
	return s.first(), nil
}

// Read implements Log.Read. A maxBatches or maxBytes of 0 or less means no
// such limit. The Records of the returned batches are shared with the log:
// see MemoryLog.
func (l *MemoryLog) Read(shard ShardKey, from uint64, maxBatches int, maxBytes int) ([]Batch, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, ErrClosed
	}
	s := l.mu.shards[shard]
	if s == nil {
		return nil, nil
	}
	// The first batch that ends after from holds it, or follows it.
	i := sort.Search(len(s.batches), func(i int) bool { return s.batches[i].End() > from })
	var out []Batch
	size := 0
	for ; i < len(s.batches); i++ {
		b := s.batches[i]
		if len(out) > 0 && maxBytes > 0 && size+len(b.Records) > maxBytes {
			break
		}
		out = append(out, b)
		size += len(b.Records)
		if maxBatches > 0 && len(out) >= maxBatches {
			break
		}
	}
	return out, nil
}

// GetMeta implements Log.GetMeta.
func (l *MemoryLog) GetMeta(key []byte) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, ErrClosed
	}
	v, ok := l.mu.meta[string(key)]
	if !ok {
		return nil, fmt.Errorf("storage: meta %q: %w", key, ErrNotFound)
	}
	return bytes.Clone(v), nil
}

// ScanMeta implements Log.ScanMeta. It snapshots the matching entries, then
// calls fn without holding any lock (fn may call the log); an error fn
// returns is returned unchanged.
func (l *MemoryLog) ScanMeta(prefix []byte, fn func(key, value []byte) error) error {
	// entry is one metadata entry to hand to fn.
	type entry struct {
		// key is a copy of the entry's key.
		key []byte
		// value is the stored value (not modified in place by the log).
		value []byte
	}
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	var entries []entry
	for k, v := range l.mu.meta {
		if strings.HasPrefix(k, string(prefix)) {
			entries = append(entries, entry{[]byte(k), v})
		}
	}
	l.mu.Unlock()
	slices.SortFunc(entries, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	for _, e := range entries {
		// Values are never modified in place (Commit replaces them), but fn
		// could modify its argument: hand it a copy.
		if err := fn(e.key, bytes.Clone(e.value)); err != nil {
			return err
		}
	}
	return nil
}

// ScanMetaKeys implements Log.ScanMetaKeys. It snapshots the matching keys,
// then calls fn without holding any lock.
func (l *MemoryLog) ScanMetaKeys(prefix []byte, fn func(key []byte) ([]byte, error)) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	var keys []string
	for k := range l.mu.meta {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	l.mu.Unlock()
	slices.Sort(keys)
	for i := 0; i < len(keys); {
		seek, err := fn([]byte(keys[i]))
		if err != nil {
			return err
		}
		if seek != nil && string(seek) > keys[i] {
			i += sort.SearchStrings(keys[i:], string(seek))
		} else {
			i++
		}
	}
	return nil
}

// ScanBatches implements Log.ScanBatches. It snapshots the descriptions of
// the matching batches, then calls fn without holding any lock.
func (l *MemoryLog) ScanBatches(shard ShardKey, from uint64, fn func(BatchInfo) bool) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	var infos []BatchInfo
	if s := l.mu.shards[shard]; s != nil {
		i := sort.Search(len(s.batches), func(i int) bool { return s.batches[i].End() > from })
		infos = make([]BatchInfo, 0, len(s.batches)-i)
		for _, b := range s.batches[i:] {
			infos = append(infos, infoOf(b))
		}
	}
	l.mu.Unlock()
	for _, b := range infos {
		if !fn(b) {
			return nil
		}
	}
	return nil
}

// DeleteBefore implements Log.DeleteBefore.
func (l *MemoryLog) DeleteBefore(shard ShardKey, offset uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	s := l.mu.shards[shard]
	if s == nil {
		return 0, nil
	}
	s.deleteFirst(sort.Search(len(s.batches), func(i int) bool { return s.batches[i].End() > offset }))
	return s.first(), nil
}

// Retain implements Log.Retain.
func (l *MemoryLog) Retain(shard ShardKey, p RetentionPolicy, now time.Time) (RetainResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return RetainResult{}, ErrClosed
	}
	s := l.mu.shards[shard]
	if s == nil {
		return RetainResult{}, nil
	}
	plan := newRetainPlan(p, now, len(s.batches), s.bytes)
	n := 0
	for n < len(s.batches) && plan.deletes(infoOf(s.batches[n])) {
		n++
	}
	bytes := s.deleteFirst(n)
	return RetainResult{First: s.first(), DeletedBatches: n, DeletedBytes: bytes}, nil
}

// Stats implements Log.Stats.
func (l *MemoryLog) Stats(shard ShardKey) (ShardStats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return ShardStats{}, ErrClosed
	}
	s := l.mu.shards[shard]
	if s == nil {
		return ShardStats{}, nil
	}
	return ShardStats{First: s.first(), Tail: s.tail(), Batches: len(s.batches), Bytes: s.bytes}, nil
}

// OffsetAt implements Log.OffsetAt from the shard's batch headers.
func (l *MemoryLog) OffsetAt(shard ShardKey, unixNano int64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	s := l.mu.shards[shard]
	if s == nil {
		return 0, nil
	}
	for _, b := range s.batches {
		if b.Timestamp >= unixNano {
			return b.Base, nil
		}
	}
	return s.tail(), nil
}

// DropShard implements Log.DropShard.
func (l *MemoryLog) DropShard(shard ShardKey) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	delete(l.mu.shards, shard)
	return nil
}

// Sync implements Log.Sync; there is nothing to flush.
func (l *MemoryLog) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	return nil
}

// Close implements Log.Close and releases everything stored. It is
// idempotent.
func (l *MemoryLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.closed = true
	l.mu.shards = nil
	l.mu.meta = nil
	return nil
}
