package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
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
	return Batch{
		Base:      base,
		Count:     count,
		Timestamp: int64(binary.BigEndian.Uint64(v[9:17])),
		Records:   v[envelopeHeaderLen:],
	}, nil
}

// Keys. A shard's batches live under 'r' | stream u64 | shard u32, followed by
// the batch's base offset u64, all big-endian so that byte order is numeric
// order. Metadata keys are the caller's key behind 'm', so the two keyspaces
// never collide whatever the caller's keys look like.
const (
	// recordPrefix starts every batch key.
	recordPrefix = 'r'
	// metaPrefix starts every metadata key.
	metaPrefix = 'm'
	// shardPrefixLen is the length of a shard's key prefix.
	shardPrefixLen = 1 + 8 + 4
	// batchKeyLen is the length of a batch key.
	batchKeyLen = shardPrefixLen + 8
)

// shardPrefix returns, in a fresh buffer, the prefix of every batch key of s.
func shardPrefix(s ShardKey) []byte {
	k := make([]byte, 0, batchKeyLen)
	k = append(k, recordPrefix)
	k = binary.BigEndian.AppendUint64(k, s.Stream)
	return binary.BigEndian.AppendUint32(k, s.Shard)
}

// batchKey returns, in a fresh buffer, the key of s's batch starting at base.
func batchKey(s ShardKey, base uint64) []byte {
	return binary.BigEndian.AppendUint64(shardPrefix(s), base)
}

// batchKeyBase returns the base offset encoded in a batch key, or an error
// wrapping ErrCorrupt if the key has the wrong length.
func batchKeyBase(key []byte) (uint64, error) {
	if len(key) != batchKeyLen {
		return 0, fmt.Errorf("%w: batch key %x has %d bytes, want %d", ErrCorrupt, key, len(key), batchKeyLen)
	}
	return binary.BigEndian.Uint64(key[shardPrefixLen:]), nil
}

// metaKey returns, in a fresh buffer, the stored key of metadata key k.
func metaKey(k []byte) []byte {
	mk := make([]byte, 0, 1+len(k))
	mk = append(mk, metaPrefix)
	return append(mk, k...)
}
