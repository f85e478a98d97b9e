// Package storage holds Herald's logs and metadata: a Badger-backed log that
// survives restarts and an in-memory log for ephemeral streams and tests,
// both behind the Log interface.
//
// A shard's log is stored a batch per key: the key is
// 'r' | stream id (u64) | shard (u32) | first offset (u64), all big-endian,
// and the value is the batch envelope (checksum, version, record count,
// timestamp, then the records exactly as the publisher encoded them). The
// records bytes are opaque here: storage never parses them. Beside each batch,
// in the same transaction, is its index entry under
// 'i' | stream | shard | first offset, whose small value (version, record
// count, timestamp, records bytes) stays in Badger's LSM tree: retention
// (Log.DeleteBefore, Log.Retain) and Log.Stats walk the index and never read
// a batch. A shard's floor, under 'f' | stream | shard, is the offset below
// which retention deleted everything, so that a shard left with no batch
// keeps its tail. Metadata keys are stored behind the prefix 'm', so no
// caller key can collide with a batch key, and the key "v" holds the layout
// version.
//
// Retention deletes whole batches, always the oldest: a shard's log is a
// contiguous run of batches from First to the tail.
//
// Durable appends are group-committed by the caller: Log.Commit writes every
// append and metadata put it is given in one write with one sync, so the
// storage writer actor can gather the batches of many shards into one
// commit. Storage imports nothing else of Herald.
//
// BadgerLog (badger.go) is the durable log: it truncates a torn batch at the
// end of a shard's log when Tail recovers it, and refuses to serve a corrupt
// batch anywhere else (ErrCorrupt); its retention and statistics are in
// badger_retention.go, and the one-time indexing of a database written
// before the batch index in badger_format.go. MemoryLog (memory.go) keeps
// everything in memory, optionally capped per shard, and is the model the
// Badger log is tested against. Both decide what a RetentionPolicy deletes
// with the same I/O-free plan (retention.go). The envelope, index and key
// layouts are in envelope.go.
package storage
