package storage

import "errors"

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

// Append is one batch to be appended to one shard's log.
type Append struct {
	// Shard is the log appended to.
	Shard ShardKey
	// Batch is the batch appended; its Base must be the shard's tail.
	Batch Batch
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
// Commit is called by one goroutine at a time (the storage writer); reads may
// run concurrently with it and with each other. All methods are safe for
// concurrent use unless noted.
type Log interface {
	// Commit writes all appends and metadata puts atomically and durably (for a
	// durable log: synced before it returns). Appends to one shard must be in
	// offset order and contiguous with that shard's tail; Commit does not
	// check contiguity (the shard actor owns offsets), but it refuses empty or
	// zero-count batches with ErrInvalidBatch.
	Commit(appends []Append, metas []MetaPut) error

	// Tail returns the next offset the shard will assign: the End of the
	// shard's last stored batch, or 0 when the shard is empty. Durable logs
	// find it with a reverse seek, never from a counter.
	Tail(shard ShardKey) (uint64, error)

	// First returns the offset of the first record still stored for the shard
	// (retention and memory caps may have removed older batches), or the tail
	// when the shard is empty.
	First(shard ShardKey) (uint64, error)

	// Read returns stored batches in offset order, starting with the batch
	// that contains offset from (or, if from is below First, the first stored
	// batch), stopping once maxBatches batches or more than maxBytes of
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

	// DropShard removes every batch of the shard.
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
	// ErrInvalidBatch is returned by Commit for a batch with no records.
	ErrInvalidBatch = errors.New("storage: invalid batch")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("storage: closed")
)
