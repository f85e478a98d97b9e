package actors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/heraldmq/herald/net/wire"
)

// A group cursor is the token a push member gets with each delivery and
// hands back to ack it. It names the delivery's records, the stream, the
// group and the member's epoch (the membership generation it joined at), and
// carries an HMAC under the node's secret, so the node can tell a forged or
// damaged token (invalid_cursor) from a real one of an ended membership
// (stale_cursor).
//
// Layout, version 1:
//
//	u8  version (1)
//	u64 stream id
//	u64 FNV-1a-64 of the group name
//	u64 member epoch
//	u16 range count
//	per range: u32 shard, u64 first offset, u32 count
//	16 bytes: HMAC-SHA256 over everything before it, truncated
const (
	cursorVersion = 1
	cursorMACSize = 16
	cursorHead    = 1 + 8 + 8 + 8 + 2
	cursorRange   = 4 + 8 + 4
)

// cursorRangeOf is a run of consecutive offsets of one shard in a cursor.
type cursorRangeOf struct {
	shard uint32
	first uint64
	count uint32
}

// cursorToken is a decoded cursor.
type cursorToken struct {
	stream uint64
	group  uint64
	epoch  uint64
	ranges []cursorRangeOf
}

func groupHash(group string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(group))
	return h.Sum64()
}

// cursorGroup is the group field of the cursors a group mints: the hash of
// its name, mixed with its incarnation (groupCore.incarnation), so a cursor
// of a deleted group is not taken for one of the group created under its
// name afterwards. Incarnation 0 (a group older than group deletion) leaves
// the hash as it was.
func cursorGroup(group string, incarnation uint64) uint64 { return groupHash(group) ^ incarnation }

// cursorRanges turns records, in delivery order, into ranges of consecutive
// offsets.
func cursorRanges(recs []wire.GroupRecord) []cursorRangeOf {
	var out []cursorRangeOf
	for _, r := range recs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.shard == r.Shard && last.first+uint64(last.count) == r.Offset && last.count < ^uint32(0) {
				last.count++
				continue
			}
		}
		out = append(out, cursorRangeOf{shard: r.Shard, first: r.Offset, count: 1})
	}
	return out
}

// mintCursor encodes and signs a cursor; it panics past maxCursorRanges
// (the coordinator never claims more runs than a cursor can name).
func mintCursor(secret []byte, t cursorToken) []byte {
	if len(t.ranges) > maxCursorRanges {
		panic(fmt.Sprintf("group cursor of %d ranges, at most %d", len(t.ranges), maxCursorRanges))
	}
	b := make([]byte, 0, cursorHead+len(t.ranges)*cursorRange+cursorMACSize)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint64(b, t.stream)
	b = binary.BigEndian.AppendUint64(b, t.group)
	b = binary.BigEndian.AppendUint64(b, t.epoch)
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.ranges)))
	for _, r := range t.ranges {
		b = binary.BigEndian.AppendUint32(b, r.shard)
		b = binary.BigEndian.AppendUint64(b, r.first)
		b = binary.BigEndian.AppendUint32(b, r.count)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(b)
	return m.Sum(b)[:len(b)+cursorMACSize]
}

// maxCursorRanges keeps a cursor within wire.MaxCursorBytes.
const maxCursorRanges = (wire.MaxCursorBytes - cursorHead - cursorMACSize) / cursorRange

// parseCursor checks a cursor's version, length and signature and decodes
// it. Any failure is invalid_cursor: the node did not mint these bytes.
func parseCursor(secret, b []byte) (cursorToken, *wire.Error) {
	var t cursorToken
	if len(b) < cursorHead+cursorMACSize || b[0] != cursorVersion {
		return t, wire.Errorf(wire.CodeInvalidCursor, "cursor is not a version %d group cursor", cursorVersion)
	}
	body, mac := b[:len(b)-cursorMACSize], b[len(b)-cursorMACSize:]
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	if !hmac.Equal(m.Sum(nil)[:cursorMACSize], mac) {
		return t, wire.Errorf(wire.CodeInvalidCursor, "cursor signature does not match: it was not issued by this node")
	}
	t.stream = binary.BigEndian.Uint64(body[1:])
	t.group = binary.BigEndian.Uint64(body[9:])
	t.epoch = binary.BigEndian.Uint64(body[17:])
	n := int(binary.BigEndian.Uint16(body[25:]))
	if len(body) != cursorHead+n*cursorRange {
		return t, wire.Errorf(wire.CodeInvalidCursor, "cursor length does not match its %d ranges", n)
	}
	t.ranges = make([]cursorRangeOf, n)
	for i := range t.ranges {
		o := cursorHead + i*cursorRange
		t.ranges[i] = cursorRangeOf{shard: binary.BigEndian.Uint32(body[o:]), first: binary.BigEndian.Uint64(body[o+4:]),
			count: binary.BigEndian.Uint32(body[o+12:])}
	}
	return t, nil
}
