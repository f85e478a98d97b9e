package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		b    Batch
	}{
		{"one record", Batch{Base: 0, Count: 1, Timestamp: 1, Records: []byte{0x01}}},
		{"many records", Batch{Base: 1 << 40, Count: 64, Timestamp: 1_700_000_000_000_000_000, Records: bytes.Repeat([]byte("rec"), 1000)}},
		{"negative timestamp", Batch{Base: 7, Count: 3, Timestamp: -5, Records: []byte("abc")}},
		{"extremes", Batch{Base: math.MaxUint64 - math.MaxUint32, Count: math.MaxUint32, Timestamp: math.MinInt64, Records: []byte{0}}},
		{"no records bytes", Batch{Base: 3, Count: 2, Timestamp: 9, Records: []byte{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := encodeEnvelope(tt.b)
			if got, want := len(v), envelopeHeaderLen+len(tt.b.Records); got != want {
				t.Fatalf("len = %d, want %d", got, want)
			}
			got, err := decodeEnvelope(tt.b.Base, v)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.Base != tt.b.Base || got.Count != tt.b.Count || got.Timestamp != tt.b.Timestamp ||
				!bytes.Equal(got.Records, tt.b.Records) {
				t.Fatalf("decode = %+v, want %+v", got, tt.b)
			}
		})
	}
}

func TestEnvelopeLayout(t *testing.T) {
	v := encodeEnvelope(Batch{Base: 99, Count: 2, Timestamp: 0x0102030405060708, Records: []byte("xy")})
	want := []byte{0, 0, 0, 0, 1, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 'x', 'y'}
	if !bytes.Equal(v[4:], want[4:]) {
		t.Fatalf("envelope after checksum = %x, want %x", v[4:], want[4:])
	}
	if binary.BigEndian.Uint32(v) == 0 {
		t.Fatal("checksum not set")
	}
}

// reseal recomputes the checksum of an envelope modified in place, so that
// tests reach the checks made after the checksum.
func reseal(v []byte) []byte {
	binary.BigEndian.PutUint32(v, crc32.Checksum(v[4:], castagnoli))
	return v
}

func TestDecodeEnvelopeCorrupt(t *testing.T) {
	good := encodeEnvelope(Batch{Base: 5, Count: 3, Timestamp: 42, Records: []byte("hello, records")})
	mutate := func(f func(v []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		v    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"header only minus one", good[:envelopeHeaderLen-1]},
		{"truncated records", good[:len(good)-1]},
		{"truncated to checksum", good[:4]},
		{"flipped checksum", mutate(func(v []byte) []byte { v[0] ^= 0x80; return v })},
		{"flipped version", mutate(func(v []byte) []byte { v[4] ^= 0x01; return v })},
		{"flipped count", mutate(func(v []byte) []byte { v[8] ^= 0x01; return v })},
		{"flipped timestamp", mutate(func(v []byte) []byte { v[16] ^= 0x10; return v })},
		{"flipped record byte", mutate(func(v []byte) []byte { v[len(v)-3] ^= 0xff; return v })},
		{"extra byte", append(bytes.Clone(good), 0)},
		{"bad version resealed", mutate(func(v []byte) []byte { v[4] = 2; return reseal(v) })},
		{"zero count resealed", mutate(func(v []byte) []byte { binary.BigEndian.PutUint32(v[5:], 0); return reseal(v) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := decodeEnvelope(5, tt.v)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode = %+v, %v; want ErrCorrupt", b, err)
			}
		})
	}
}

func TestBatchKeys(t *testing.T) {
	s := ShardKey{Stream: 0x0102030405060708, Shard: 0x0a0b0c0d}
	k := batchKey(s, 0x1112131415161718)
	want := []byte{'r', 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}
	if !bytes.Equal(k, want) {
		t.Fatalf("batchKey = %x, want %x", k, want)
	}
	if !bytes.HasPrefix(k, shardPrefix(s)) {
		t.Fatal("batch key does not start with the shard prefix")
	}
	if base, err := batchKeyBase(k); err != nil || base != 0x1112131415161718 {
		t.Fatalf("batchKeyBase = %x, %v", base, err)
	}
	if _, err := batchKeyBase(k[:20]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("batchKeyBase(short) err = %v, want ErrCorrupt", err)
	}
	// Numeric order is byte order.
	if bytes.Compare(batchKey(s, 255), batchKey(s, 256)) >= 0 {
		t.Fatal("key order differs from offset order")
	}
	if got := metaKey([]byte("r-config")); !bytes.Equal(got, []byte("mr-config")) {
		t.Fatalf("metaKey = %q", got)
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	good := encodeEnvelope(Batch{Base: 1, Count: 3, Timestamp: 77, Records: []byte("abcdefgh")})
	f.Add(uint64(1), good)
	f.Add(uint64(0), encodeEnvelope(Batch{Count: 1, Records: []byte{0}}))
	f.Add(uint64(9), good[:envelopeHeaderLen])
	f.Add(uint64(9), []byte{})
	f.Add(uint64(math.MaxUint64), bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, base uint64, v []byte) {
		check := func(v []byte) {
			b, err := decodeEnvelope(base, v)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				return
			}
			if b.Base != base || b.Count == 0 {
				t.Fatalf("decoded %+v from base %d", b, base)
			}
			if re := encodeEnvelope(b); !bytes.Equal(re, v) {
				t.Fatalf("re-encoded %x, want %x", re, v)
			}
		}
		check(v)
		// Random input rarely has a valid checksum: also try v with its
		// checksum fixed, to reach the checks behind it.
		if len(v) >= 4 {
			check(reseal(bytes.Clone(v)))
		}
	})
}

func TestIndexValue(t *testing.T) {
	b := BatchInfo{Base: 9, Count: 0x01020304, Timestamp: -2, Bytes: 0xa0b0c0d0}
	v := encodeIndex(b)
	want := []byte{1, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xa0, 0xb0, 0xc0, 0xd0}
	if !bytes.Equal(v, want) {
		t.Fatalf("encodeIndex = %x, want %x", v, want)
	}
	if got, err := decodeIndex(9, v); err != nil || got != b {
		t.Fatalf("decodeIndex = %+v, %v; want %+v", got, err, b)
	}
	for name, bad := range map[string][]byte{
		"nil":           nil,
		"short":         v[:indexValueLen-1],
		"long":          append(bytes.Clone(v), 0),
		"wrong version": append([]byte{2}, v[1:]...),
		"zero count":    append([]byte{1, 0, 0, 0, 0}, v[5:]...),
	} {
		if got, err := decodeIndex(9, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decodeIndex = %+v, %v; want ErrCorrupt", name, got, err)
		}
	}
}

func TestIndexAndFloorKeys(t *testing.T) {
	s := ShardKey{Stream: 0x0102030405060708, Shard: 0x0a0b0c0d}
	k := indexKey(s, 0x1112131415161718)
	if !bytes.Equal(k[1:], batchKey(s, 0x1112131415161718)[1:]) || k[0] != 'i' {
		t.Fatalf("indexKey = %x", k)
	}
	if base, err := batchKeyBase(k); err != nil || base != 0x1112131415161718 {
		t.Fatalf("batchKeyBase(index key) = %x, %v", base, err)
	}
	if f := floorKey(s); !bytes.Equal(f, append([]byte{'f'}, batchKey(s, 0)[1:shardPrefixLen]...)) {
		t.Fatalf("floorKey = %x", f)
	}
	if v, err := decodeFloor(encodeFloor(1 << 50)); err != nil || v != 1<<50 {
		t.Fatalf("floor round trip = %d, %v", v, err)
	}
	if _, err := decodeFloor([]byte{1}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decodeFloor(short) err = %v", err)
	}
	// The keyspaces are distinct from each other and from metadata.
	prefixes := map[byte]bool{recordPrefix: true, indexPrefix: true, floorPrefix: true, metaPrefix: true, formatKey[0]: true}
	if len(prefixes) != 5 || len(formatKey) != 1 {
		t.Fatalf("key prefixes collide: %v", prefixes)
	}
}

// A batch whose records would run past the last offset is corrupt: its end
// would wrap around and read as a small tail.
func TestEnvelopeRefusesWrappingEnd(t *testing.T) {
	b := Batch{Base: math.MaxUint64 - 2, Count: 3, Timestamp: 1, Records: []byte{0, 0, 0}}
	if _, err := decodeEnvelope(b.Base, encodeEnvelope(b)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("envelope ending past the last offset: %v, want ErrCorrupt", err)
	}
	info := BatchInfo{Base: math.MaxUint64 - 2, Count: 3, Timestamp: 1, Bytes: 3}
	if _, err := decodeIndex(info.Base, encodeIndex(info)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("index ending past the last offset: %v, want ErrCorrupt", err)
	}
	b.Base--
	if _, err := decodeEnvelope(b.Base, encodeEnvelope(b)); err != nil {
		t.Fatalf("envelope ending at the last offset: %v", err)
	}
}
