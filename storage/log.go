package storage

import (
	"errors"
	"time"
)

// ShardKey names one shard's log: the numeric id of its stream (assigned by
// the catalog) and the shard index.
type ShardKey struct {
	// Stream is the stream's numeric id; ids are never reused.
	Stream uint64
	// Shard is the shard index within the stream.
	Shard uint32
}

// Batch is one published batch as stored: the records of one publish request,
// with contiguous offsets [Base, Base+Count).
type Batch struct {
	// Base is the offset of the first record.
	Base uint64
	// Count is the number of records; at least 1.
	Count uint32
	// Timestamp is when the shard accepted the batch, in Unix nanoseconds.
	Timestamp int64
	// Records are the encoded records, opaque to storage. The slice must not
	// be modified by the caller after it is handed to Commit. Slices returned
	// by Read must be treated as read-only: MemoryLog shares them with its
	// store (BadgerLog returns fresh ones).
	Records []byte
}

// End returns the offset after the batch's last record.
func (b Batch) End() uint64 { return b.Base + uint64(b.Count) }

// BatchInfo describes a stored batch without its records: what the batch
// index holds, so retention and statistics never read records.
type BatchInfo struct {
	// Base is the offset of the batch's first record.
	Base uint64
	// Count is the number of records; at least 1.
	Count uint32
	// Timestamp is when the shard accepted the batch, in Unix nanoseconds.
	Timestamp int64
	// Bytes is the size of the batch's Records in bytes (not counting the
	// envelope or the key).
	Bytes int64
}

// End returns the offset after the batch's last record.
func (b BatchInfo) End() uint64 { return b.Base + uint64(b.Count) }

// infoOf returns the description of b.
func infoOf(b Batch) BatchInfo {
	return BatchInfo{Base: b.Base, Count: b.Count, Timestamp: b.Timestamp, Bytes: int64(len(b.Records))}
}

// RetentionPolicy bounds how much of a shard's log Retain keeps. The zero
// policy keeps everything.
type RetentionPolicy struct {
	// MaxAge deletes the batches accepted more than MaxAge before Retain's
	// now (by Batch.Timestamp); 0 or less means no age bound.
	MaxAge time.Duration
	// MaxBytes deletes the oldest batches while the shard's Records bytes
	// exceed it, but never the newest batch; 0 or less means no byte bound.
	MaxBytes int64
}

// RetainResult is what one Retain call did.
type RetainResult struct {
	// First is the shard's First after the call (its tail when no batch is
	// left).
	First uint64
	// DeletedBatches is the number of batches deleted.
	DeletedBatches int
	// DeletedBytes is the Records bytes of the deleted batches.
	DeletedBytes int64
}

// ShardStats describes a shard's stored log, computed from the batch index.
type ShardStats struct {
	// First is the offset of the first stored record, or Tail when the shard
	// holds no batch.
	First uint64
	// Tail is the next offset the shard will assign. Stats reads no record,
	// so a torn last batch that Tail has not yet truncated is still counted.
	Tail uint64
	// Batches is the number of stored batches.
	Batches int
	// Bytes is the sum of the stored batches' Records bytes.
	Bytes int64
}

// Append is one batch to be appended to one shard's log.
type Append struct {
	// Shard is the log appended to.
	Shard ShardKey
	// Batch is the batch appended; its Base must be the shard's tail.
	Batch Batch
	// Metas are metadata writes that belong to this batch (an idempotent
	// producer's state): they are written in the same transaction as the
	// batch even when a commit has to be split.
	Metas []MetaPut
}

// MetaPut writes (or, with a nil Value, deletes) one metadata entry: stream
// configs, the catalog's id counter and, later, group cursors and producer
// state. Keys are namespaced by the caller.
type MetaPut struct {
	// Key is the metadata key, namespaced by the caller; any bytes.
	Key []byte
	// Value is the value to store; nil deletes the key, while an empty
	// non-nil value is stored as such.
	Value []byte
}

// Log is a set of shard logs plus a metadata keyspace.
//
// Commit is called by one goroutine at a time (the storage writer); reads and
// retention (DeleteBefore, Retain) may run concurrently with it and with each
// other. All methods are safe for concurrent use unless noted.
type Log interface {
	// Commit writes all appends and metadata puts atomically and durably (for a
	// durable log: synced before it returns). Appends to one shard must be in
	// offset order and contiguous with that shard's tail; Commit does not
	// check contiguity (the shard actor owns offsets), but it refuses empty or
	// zero-count batches with ErrInvalidBatch.
	Commit(appends []Append, metas []MetaPut) error

	// Tail returns the next offset the shard will assign: the End of the
	// shard's last stored batch, or 0 when the shard was never written (or
	// was dropped). A shard whose batches were all deleted by DeleteBefore
	// or Retain keeps its tail: offsets are never reused. Durable logs find
	// it with a reverse seek, never from a counter.
	Tail(shard ShardKey) (uint64, error)

	// First returns the offset of the first record still stored for the
	// shard, or the tail when the shard holds no batch. It reflects
	// DeleteBefore and Retain (and a MemoryLog's byte cap), which delete the
	// oldest batches whole: First is always the Base of a stored batch or
	// the tail.
	First(shard ShardKey) (uint64, error)

	// Read returns stored batches in offset order, starting with the batch
	// that contains offset from or, if from is below First (its batch was
	// deleted), with the first stored batch: the caller compares the first
	// Base with from to see what was deleted. It stops once maxBatches batches or more than maxBytes of
	// records have been gathered (at least one batch is always returned when
	// one exists at or after from). It never waits. A batch whose checksum
	// does not match returns ErrCorrupt (wrapped with its key).
	//
	// The byte limit is checked before a batch is added: a batch that would
	// take the total Records bytes past maxBytes is left out unless it is
	// the first. A maxBatches or maxBytes of 0 or less means no such limit.
	// from at or past the tail returns no batches.
	Read(shard ShardKey, from uint64, maxBatches int, maxBytes int) ([]Batch, error)

	// GetMeta returns a copy of a metadata value, or ErrNotFound.
	GetMeta(key []byte) ([]byte, error)

	// ScanMeta calls fn for every metadata entry whose key starts with prefix,
	// in key order; fn's arguments are valid only during the call.
	ScanMeta(prefix []byte, fn func(key, value []byte) error) error

	// ScanMetaKeys calls fn for metadata keys that start with prefix, in key
	// order, without reading values. When fn returns a seek key (greater
	// than the key it was given) the scan goes on at the first key at or
	// after it, skipping those between; nil goes on with the next key. An
	// error fn returns stops the scan and is returned unchanged; fn's
	// argument is valid only during the call.
	ScanMetaKeys(prefix []byte, fn func(key []byte) (seek []byte, err error)) error

	// ScanBatches calls fn for each stored batch of the shard whose End is
	// after from, in offset order, until fn returns false or the batches run
	// out. It reads only the batch index, never records (so it does not
	// detect corrupt batches). fn runs with no lock held and may call the
	// log; batches committed or deleted during the scan may or may not be
	// seen, but the offsets fn sees always increase.
	ScanBatches(shard ShardKey, from uint64, fn func(BatchInfo) bool) error

	// DeleteBefore deletes every whole batch of the shard whose End is at or
	// below offset (a batch holding offset is kept whole) and returns the
	// shard's new First (the tail when no batch is left; the tail is kept).
	// Deleting is always a prefix of the log: the oldest batches go first.
	// It reads only the batch index. Durable logs make the deletes durable
	// before returning, in one synced write (split into several in offset
	// order if too big, so that a crash part way leaves a suffix of the
	// log). It is safe to call concurrently with Commit and Read: a Read
	// racing with it returns either the deleted batch or the next one, never
	// a torn result, and a batch committed while it runs may survive it.
	// Calls that delete (DeleteBefore, Retain, DropShard) are serialized.
	DeleteBefore(shard ShardKey, offset uint64) (first uint64, err error)

	// Retain applies a retention policy at time now. Walking the batch index
	// from the oldest batch, it deletes each batch while the batch is expired
	// (p.MaxAge > 0 and its Timestamp is before now-p.MaxAge) or the shard is
	// over its byte bound (p.MaxBytes > 0, the Records bytes still stored
	// exceed p.MaxBytes and the batch is not the newest one), and stops at
	// the first batch that is neither. It thus deletes whole batches, always
	// a prefix of the log: age alone may delete every batch, the byte bound
	// alone never the newest. Timestamps are per batch: a batch accepted at
	// or after the cutoff is kept whole, and so is everything after it (even
	// a later batch with an older timestamp). The deletes are made as
	// DeleteBefore makes them.
	Retain(shard ShardKey, p RetentionPolicy, now time.Time) (RetainResult, error)

	// Stats describes the shard's stored log from the batch index (no record
	// is read).
	Stats(shard ShardKey) (ShardStats, error)

	// OffsetAt returns the first offset of the shard whose record was
	// accepted at or after unixNano: the Base of the first stored batch, in
	// offset order, whose Timestamp is at or after unixNano (a batch's
	// records share its timestamp). Timestamps come from the shard's wall
	// clock and need not increase from one batch to the next; the answer is
	// still the first such batch in offset order, even when a batch before
	// it is stamped earlier than one after it: it is the cut age retention
	// makes with a cutoff of unixNano (Retain keeps that batch and every
	// batch after it). A time after every stored batch returns the shard's
	// tail (the End of its last indexed batch, or its First when it holds
	// none); a time at or before the first batch returns First. It reads
	// only the batch index, never records, from the oldest batch up to the
	// answer.
	OffsetAt(shard ShardKey, unixNano int64) (uint64, error)

	// DropShard removes every batch of the shard and forgets its tail (a
	// dropped shard starts again at offset 0).
	DropShard(shard ShardKey) error

	// Sync flushes anything not yet durable (a no-op for a log that syncs on
	// every Commit). Called at shutdown.
	Sync() error

	// Close releases the log. It is idempotent. Calls after Close return
	// ErrClosed.
	Close() error
}

// Errors returned by logs.
var (
	// ErrNotFound is returned by GetMeta for a missing key.
	ErrNotFound = errors.New("storage: not found")
	// ErrCorrupt is returned when a stored batch fails its checksum or cannot
	// be decoded; the batch is never served as data.
	ErrCorrupt = errors.New("storage: corrupt batch")
	// ErrInvalidBatch is returned by Commit for a batch with no records (or
	// more than 4 GiB of them).
	ErrInvalidBatch = errors.New("storage: invalid batch")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("storage: closed")
)
