package wire_test

import (
	"math"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// Tests of GroupAcks and GroupAcksDone (FeatureGroupAcks): round trips,
// the byte layout docs/protocol.md shows, and the limits.

// acksBody is a GroupAcks body written by hand (nameABC, group "g"):
// entries is the entry count it claims, entry optionally one entry's shard,
// offset count (which may lie) and offsets.
func acksBody(entries uint32, entry ...uint64) []byte {
	b := bcat(nameBytes(), str16("g"), be32(entries))
	if len(entry) >= 2 {
		b = bcat(b, be32(uint32(entry[0])), be32(uint32(entry[1])))
		for _, o := range entry[2:] {
			b = bcat(b, be64(o))
		}
	}
	return b
}

func TestGroupAcksRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		a    wire.GroupAcks
	}{
		{"zero", wire.GroupAcks{}},
		{"one entry", wire.GroupAcks{Name: nameABC, Group: "billing", Entries: []wire.GroupAckEntry{{Shard: 1, Offsets: []uint64{42}}}}},
		{"several", wire.GroupAcks{Name: nameABC, Group: "billing", Entries: []wire.GroupAckEntry{
			{Shard: 3, Offsets: []uint64{7, 3, 9, 9}}, {Shard: 0, Offsets: []uint64{1}}, {Shard: 3}}}},
		{"extremes", wire.GroupAcks{Name: nameLong, Group: repeatString('g', 64), Entries: []wire.GroupAckEntry{
			{Shard: math.MaxUint32, Offsets: []uint64{0, math.MaxUint64}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupAcks(nil, 22, tc.a), wire.TypeGroupAcks, 22, wire.DecodeGroupAcks, tc.a, -1, true)
		})
	}
	// The most a GroupAcks carries: MaxGroupAcksEntries entries, and
	// MaxGroupAckOffsets offsets in all.
	most := wire.GroupAcks{Name: nameABC, Group: "g", Entries: make([]wire.GroupAckEntry, wire.MaxGroupAcksEntries)}
	most.Entries[0].Offsets = make([]uint64, wire.MaxGroupAckOffsets-wire.MaxGroupAcksEntries+1)
	for i := 1; i < len(most.Entries); i++ {
		most.Entries[i].Offsets = []uint64{uint64(i)}
	}
	roundTrip(t, wire.AppendGroupAcks(nil, 1, most), wire.TypeGroupAcks, 1, wire.DecodeGroupAcks, most, 0, true)
	over := most
	over.Entries = append([]wire.GroupAckEntry{{Offsets: []uint64{1}}}, most.Entries[1:]...)
	over.Entries[0].Offsets = append(over.Entries[0].Offsets, most.Entries[0].Offsets...)
	overOffsets := wire.AppendGroupAcks(nil, 1, over)[wire.HeaderSize:]
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupAcks(b); return err }, []badGroupBody{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"entry count lies", acksBody(2, 1, 1, 7), wire.CodeMalformedFrame},
		{"entry count huge", acksBody(math.MaxUint32, 1, 1, 7), wire.CodeMalformedFrame},
		{"entries over the limit", bcat(acksBody(wire.MaxGroupAcksEntries+1), make([]byte, 8*(wire.MaxGroupAcksEntries+1))), wire.CodeMalformedFrame},
		{"offset count lies", acksBody(1, 1, 2, 7), wire.CodeMalformedFrame},
		{"offsets over the limit in all", overOffsets, wire.CodeMalformedFrame},
	})
}

func TestGroupAcksLayout(t *testing.T) {
	a := wire.GroupAcks{Name: nameABC, Group: "g", Entries: []wire.GroupAckEntry{{Shard: 2, Offsets: []uint64{5, 6}}, {Shard: 0}}}
	want := bcat(nameBytes(), str16("g"), be32(2), be32(2), be32(2), be64(5), be64(6), be32(0), be32(0))
	if got := wire.AppendGroupAcks(nil, 1, a)[wire.HeaderSize:]; string(got) != string(want) {
		t.Fatalf("body %x, want %x", got, want)
	}
	outs := []wire.GroupAckOutcome{{Count: 2}, {Err: &wire.Error{Code: wire.CodeNotDelivered, Detail: 9, Message: "m"}}}
	want = bcat(be32(2), be16(0), be64(2), str16(""), be16(uint16(wire.CodeNotDelivered)), be64(9), str16("m"))
	if got := wire.AppendGroupAcksDone(nil, 1, outs)[wire.HeaderSize:]; string(got) != string(want) {
		t.Fatalf("body %x, want %x", got, want)
	}
}

func TestGroupAcksDoneRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		outs []wire.GroupAckOutcome
	}{
		{"none", nil},
		{"settled", []wire.GroupAckOutcome{{Count: 1}, {Count: 0}, {Count: math.MaxUint64}}},
		{"mixed", []wire.GroupAckOutcome{{Count: 1},
			{Err: &wire.Error{Code: wire.CodeNotDelivered, Detail: 12, Message: "shard 0 offset 40 has not been delivered"}},
			{Err: &wire.Error{Code: wire.CodeInvalidShard, Message: "stream has 1 shard"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, wire.AppendGroupAcksDone(nil, 22, tc.outs), wire.TypeGroupAcksDone, 22, wire.DecodeGroupAcksDone, tc.outs, -1, true)
		})
	}
	// A message is cut to 1 KiB, as in an Error frame.
	long := []wire.GroupAckOutcome{{Err: &wire.Error{Code: wire.CodeInternal, Message: repeatString('m', 2000)}}}
	got, err := wire.DecodeGroupAcksDone(wire.AppendGroupAcksDone(nil, 1, long)[wire.HeaderSize:])
	if err != nil || len(got) != 1 || len(got[0].Err.Message) != 1024 {
		t.Fatalf("decoded %+v, %v; want one error with a 1024-byte message", got, err)
	}
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupAcksDone(b); return err }, []badGroupBody{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"count lies", bcat(be32(2), be16(0), be64(3), str16("")), wire.CodeMalformedFrame},
		{"count huge", bcat(be32(math.MaxUint32), be16(0), be64(3), str16("")), wire.CodeMalformedFrame},
		{"settled with a message", bcat(be32(1), be16(0), be64(3), str16("x")), wire.CodeMalformedFrame},
	})
}
