// Package storage holds Herald's logs and metadata: a Badger-backed log that
// survives restarts and an in-memory log for ephemeral streams and tests,
// both behind the Log interface.
//
// A shard's log is stored a batch per key: the key is
// 'r' | stream id (u64) | shard (u32) | first offset (u64), all big-endian,
// and the value is the batch envelope (checksum, version, record count,
// timestamp, then the records exactly as the publisher encoded them). The
// records bytes are opaque here: storage never parses them. Metadata keys are
// stored behind the prefix 'm', so no caller key can collide with a batch key.
//
// Durable appends are group-committed by the caller: Log.Commit writes every
// append and metadata put it is given in one write with one sync, so the
// storage writer actor can gather the batches of many shards into one
// commit. Storage imports nothing else of Herald.
//
// BadgerLog (badger.go) is the durable log: it truncates a torn batch at the
// end of a shard's log when Tail recovers it, and refuses to serve a corrupt
// batch anywhere else (ErrCorrupt). MemoryLog (memory.go) keeps everything in
// memory, optionally capped per shard, and is the model the Badger log is
// tested against. The envelope and key layouts are in envelope.go.
package storage
