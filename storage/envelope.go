package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// The batch envelope is the stored value of one batch:
//
//	crc32c u32 | version u8 | count u32 | timestamp i64 | records
//
// all big-endian. The checksum (Castagnoli) covers every byte after it. The
// batch's base offset is not in the value: it is the last part of the key.
const (
	// envelopeVersion is the only envelope layout written and accepted.
	envelopeVersion = 1
	// envelopeHeaderLen is the size of the fixed part before the records.
	envelopeHeaderLen = 4 + 1 + 4 + 8
)

// castagnoli is the CRC-32C table used by the envelope checksum.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeEnvelope returns the stored value of b in a freshly allocated buffer
// (Badger keeps a reference to it until the commit returns). b.Base is not
// encoded: it lives in the key.
func encodeEnvelope(b Batch) []byte {
	v := make([]byte, envelopeHeaderLen, envelopeHeaderLen+len(b.Records))
	v[4] = envelopeVersion
	binary.BigEndian.PutUint32(v[5:9], b.Count)
	binary.BigEndian.PutUint64(v[9:17], uint64(b.Timestamp))
	v = append(v, b.Records...)
	binary.BigEndian.PutUint32(v[0:4], crc32.Checksum(v[4:], castagnoli))
	return v
}

// decodeEnvelope decodes the stored value v of the batch whose first offset
// is base. The returned Records alias v. It returns an error wrapping
// ErrCorrupt when v is too short, has an unknown version, a zero count or a
// checksum that does not match.
func decodeEnvelope(base uint64, v []byte) (Batch, error) {
	if len(v) < envelopeHeaderLen {
		return Batch{}, fmt.Errorf("%w: base %d: envelope of %d bytes is shorter than its %d-byte header",
			ErrCorrupt, base, len(v), envelopeHeaderLen)
	}
	if want, got := binary.BigEndian.Uint32(v[0:4]), crc32.Checksum(v[4:], castagnoli); want != got {
		return Batch{}, fmt.Errorf("%w: base %d: checksum %08x, stored %08x", ErrCorrupt, base, got, want)
	}
	if v[4] != envelopeVersion {
		return Batch{}, fmt.Errorf("%w: base %d: unknown envelope version %d", ErrCorrupt, base, v[4])
	}
	count := binary.BigEndian.Uint32(v[5:9])
	if count == 0 {
		return Batch{}, fmt.Errorf("%w: base %d: zero record count", ErrCorrupt, base)
	}
	if base > math.MaxUint64-uint64(count) {
		// Its end would wrap: the tail would read as a small offset.
		return Batch{}, fmt.Errorf("%w: base %d: %d records run past the last offset", ErrCorrupt, base, count)
	}
	return Batch{
		Base:      base,
		Count:     count,
		Timestamp: int64(binary.BigEndian.Uint64(v[9:17])),
		Records:   v[envelopeHeaderLen:],
	}, nil
}

// The index entry of a batch is the batch's key with the prefix 'i' instead
// of 'r', and the value
//
//	version u8 | count u32 | timestamp i64 | records bytes u32
//
// all big-endian. Index values are small, so they stay in Badger's LSM tree
// (with any ValueThreshold above indexValueLen): retention and statistics
// walk the index without touching the value log or any record.
const (
	// indexVersion is the only index value layout written and accepted.
	indexVersion = 1
	// indexValueLen is the size of an index value.
	indexValueLen = 1 + 4 + 8 + 4
)

// encodeIndex returns, in a fresh buffer, the index value of b.
func encodeIndex(b BatchInfo) []byte {
	v := make([]byte, indexValueLen)
	v[0] = indexVersion
	binary.BigEndian.PutUint32(v[1:5], b.Count)
	binary.BigEndian.PutUint64(v[5:13], uint64(b.Timestamp))
	binary.BigEndian.PutUint32(v[13:17], uint32(b.Bytes))
	return v
}

// decodeIndex decodes the index value v of the batch whose first offset is
// base; it does not retain v. It returns an error wrapping ErrCorrupt when v
// has the wrong length, an unknown version or a zero count.
func decodeIndex(base uint64, v []byte) (BatchInfo, error) {
	if len(v) != indexValueLen {
		return BatchInfo{}, fmt.Errorf("%w: index of base %d: %d bytes, want %d", ErrCorrupt, base, len(v), indexValueLen)
	}
	if v[0] != indexVersion {
		return BatchInfo{}, fmt.Errorf("%w: index of base %d: unknown version %d", ErrCorrupt, base, v[0])
	}
	count := binary.BigEndian.Uint32(v[1:5])
	if count == 0 {
		return BatchInfo{}, fmt.Errorf("%w: index of base %d: zero record count", ErrCorrupt, base)
	}
	if base > math.MaxUint64-uint64(count) {
		return BatchInfo{}, fmt.Errorf("%w: index of base %d: %d records run past the last offset", ErrCorrupt, base, count)
	}
	return BatchInfo{
		Base:      base,
		Count:     count,
		Timestamp: int64(binary.BigEndian.Uint64(v[5:13])),
		Bytes:     int64(binary.BigEndian.Uint32(v[13:17])),
	}, nil
}

// Keys. A shard's batches live under 'r' | stream u64 | shard u32, followed by
// the batch's base offset u64, all big-endian so that byte order is numeric
// order; their index entries under the same key with 'i' first. A shard's
// floor (the offset below which DeleteBefore deleted everything, which is
// the shard's tail once no batch is left) is stored under
// 'f' | stream u64 | shard u32 as a u64. Metadata keys are the caller's key
// behind 'm', so the keyspaces never collide whatever the caller's keys look
// like. The single key "v" holds the layout version of the database.
const (
	// recordPrefix starts every batch key.
	recordPrefix = 'r'
	// indexPrefix starts every index key.
	indexPrefix = 'i'
	// floorPrefix starts every floor key.
	floorPrefix = 'f'
	// metaPrefix starts every metadata key.
	metaPrefix = 'm'
	// shardPrefixLen is the length of a shard's key prefix (and of a floor
	// key).
	shardPrefixLen = 1 + 8 + 4
	// batchKeyLen is the length of a batch key (and of an index key).
	batchKeyLen = shardPrefixLen + 8
	// floorValueLen is the length of a floor value.
	floorValueLen = 8
)

// keyPrefix returns, in a fresh buffer with room for an offset, kind |
// stream | shard.
func keyPrefix(kind byte, s ShardKey) []byte {
	k := make([]byte, 0, batchKeyLen)
	k = append(k, kind)
	k = binary.BigEndian.AppendUint64(k, s.Stream)
	return binary.BigEndian.AppendUint32(k, s.Shard)
}

// shardPrefix returns, in a fresh buffer, the prefix of every batch key of s.
func shardPrefix(s ShardKey) []byte { return keyPrefix(recordPrefix, s) }

// batchKey returns, in a fresh buffer, the key of s's batch starting at base.
func batchKey(s ShardKey, base uint64) []byte {
	return binary.BigEndian.AppendUint64(shardPrefix(s), base)
}

// indexShardPrefix returns, in a fresh buffer, the prefix of every index key
// of s.
func indexShardPrefix(s ShardKey) []byte { return keyPrefix(indexPrefix, s) }

// indexKey returns, in a fresh buffer, the index key of s's batch starting at
// base.
func indexKey(s ShardKey, base uint64) []byte {
	return binary.BigEndian.AppendUint64(indexShardPrefix(s), base)
}

// floorKey returns, in a fresh buffer, the key of s's floor.
func floorKey(s ShardKey) []byte { return keyPrefix(floorPrefix, s) }

// batchKeyBase returns the base offset encoded in a batch or index key, or an
// error wrapping ErrCorrupt if the key has the wrong length.
func batchKeyBase(key []byte) (uint64, error) {
	if len(key) != batchKeyLen {
		return 0, fmt.Errorf("%w: batch key %x has %d bytes, want %d", ErrCorrupt, key, len(key), batchKeyLen)
	}
	return binary.BigEndian.Uint64(key[shardPrefixLen:]), nil
}

// encodeFloor returns, in a fresh buffer, the stored value of floor.
func encodeFloor(floor uint64) []byte { return binary.BigEndian.AppendUint64(nil, floor) }

// decodeFloor decodes a floor value, or returns an error wrapping ErrCorrupt.
func decodeFloor(v []byte) (uint64, error) {
	if len(v) != floorValueLen {
		return 0, fmt.Errorf("%w: floor value of %d bytes, want %d", ErrCorrupt, len(v), floorValueLen)
	}
	return binary.BigEndian.Uint64(v), nil
}

// metaKey returns, in a fresh buffer, the stored key of metadata key k.
func metaKey(k []byte) []byte {
	mk := make([]byte, 0, 1+len(k))
	mk = append(mk, metaPrefix)
	return append(mk, k...)
}
