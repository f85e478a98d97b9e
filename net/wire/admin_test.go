package wire_test

import (
	"encoding/hex"
	"math"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// Tests of the frames for offsets at a time (FeatureOffsetsForTime, types
// 0x18-0x19) and group administration (FeatureGroupAdmin, types
// 0x4E-0x51): round trips, byte layouts (docs/protocol.md shows the same
// tables), malformed bodies and counts that lie.

func TestOffsetsForTimeRoundTrip(t *testing.T) {
	for _, o := range []wire.OffsetsForTime{
		{},
		{Name: nameABC, Shard: wire.AnyShard, UnixNano: 1_700_000_000_000_000_000},
		{Name: nameLong, Shard: 3, UnixNano: math.MinInt64},
		{Name: nameABC, UnixNano: -1},
	} {
		roundTrip(t, wire.AppendOffsetsForTime(nil, 30, o), wire.TypeOffsetsForTime, 30, wire.DecodeOffsetsForTime, o, -1, true)
	}
}

func TestShardOffsetsRoundTrip(t *testing.T) {
	many := make([]wire.ShardOffset, 1024)
	for i := range many {
		many[i] = wire.ShardOffset{Shard: uint32(i), Offset: uint64(i) << 40}
	}
	for _, offs := range [][]wire.ShardOffset{{}, {{Shard: 0, Offset: 7}}, {{Shard: 1, Offset: 0}, {Shard: 2, Offset: math.MaxUint64}}, many} {
		roundTrip(t, wire.AppendShardOffsets(nil, 31, offs), wire.TypeShardOffsets, 31, wire.DecodeShardOffsets, offs, -1, true)
	}
}

func TestShardOffsetsRefused(t *testing.T) {
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeShardOffsets(b); return err }, []badGroupBody{
		{"empty", nil, wire.CodeMalformedFrame},
		{"count lies", bcat(be32(2), be32(0), be64(1)), wire.CodeMalformedFrame},
		{"count over the shard limit", bcat(be32(1<<16+1), make([]byte, 12*(1<<16+1))), wire.CodeMalformedFrame},
		{"cut entry", bcat(be32(1), be32(0), be32(1)), wire.CodeMalformedFrame},
		{"trailing byte", bcat(be32(1), be32(0), be64(1), []byte{0}), wire.CodeMalformedFrame},
	})
	// The most shards a stream has on the wire is accepted.
	max := make([]wire.ShardOffset, 1<<16)
	if got, err := wire.DecodeShardOffsets(splitFrame(t, wire.AppendShardOffsets(nil, 1, max)).Body); err != nil || len(got) != len(max) {
		t.Fatalf("65,536 offsets: %d, %v", len(got), err)
	}
}

func TestListGroupsRoundTrip(t *testing.T) {
	for _, n := range []wire.StreamName{{}, nameABC, nameLong} {
		roundTrip(t, wire.AppendListGroups(nil, 32, n), wire.TypeListGroups, 32, wire.DecodeListGroups, n, -1, true)
	}
}

func TestGroupListRoundTrip(t *testing.T) {
	for _, l := range [][]wire.GroupSummary{
		{},
		{{Group: "billing", Members: 2, Lag: 40}, {Group: "fulfilment"}},
		{{Group: repeatString('g', 65535), Members: math.MaxUint32, Lag: math.MaxUint64}},
	} {
		roundTrip(t, wire.AppendGroupList(nil, 33, l), wire.TypeGroupList, 33, wire.DecodeGroupList, l, -1, true)
	}
	g := wire.GroupSummary{Group: "billing"}
	if got := len(wire.AppendGroupList(nil, 1, []wire.GroupSummary{g})); got != wire.HeaderSize+wire.GroupListHeadSize+wire.GroupSummarySize(&g) {
		t.Fatalf("a one-group list is %d bytes, the sizes say %d", got, wire.HeaderSize+wire.GroupListHeadSize+wire.GroupSummarySize(&g))
	}
}

func TestGroupListRefused(t *testing.T) {
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupList(b); return err }, []badGroupBody{
		{"empty", nil, wire.CodeMalformedFrame},
		{"count lies", bcat(be32(math.MaxUint32), str16("g"), be32(1), be64(2)), wire.CodeMalformedFrame},
		{"name length lies", bcat(be32(1), be16(9), []byte("g"), be32(1), be64(2)), wire.CodeMalformedFrame},
		{"trailing byte", bcat(be32(1), str16("g"), be32(1), be64(2), []byte{0}), wire.CodeMalformedFrame},
	})
}

func TestDeleteGroupRoundTrip(t *testing.T) {
	for _, g := range []wire.DeleteGroup{{}, {Name: nameABC, Group: "billing"}, {Name: nameLong, Group: repeatString('g', 65535)}} {
		roundTrip(t, wire.AppendDeleteGroup(nil, 34, g), wire.TypeDeleteGroup, 34, wire.DecodeDeleteGroup, g, -1, true)
	}
}

func TestGroupSeekRoundTrip(t *testing.T) {
	for _, g := range []wire.GroupSeek{
		{},
		{Name: nameABC, Group: "billing", Shard: wire.AnyShard, To: wire.SeekToOffset, Offset: wire.NoEnd},
		{Name: nameABC, Group: "billing", Shard: 2, To: wire.SeekToOffset, Offset: 41},
		{Name: nameABC, Group: "billing", Shard: wire.AnyShard, To: wire.SeekToTime, UnixNano: 1_700_000_000_000_000_000},
		{Name: nameLong, Group: repeatString('g', 64), Shard: 0, To: wire.SeekToTime, UnixNano: math.MinInt64},
	} {
		roundTrip(t, wire.AppendGroupSeek(nil, 35, g), wire.TypeGroupSeek, 35, wire.DecodeGroupSeek, g, -1, true)
	}
}

func TestGroupSeekRefused(t *testing.T) {
	head := bcat(nameBytes(), str16("g"), be32(0))
	refuseAll(t, func(b []byte) error { _, err := wire.DecodeGroupSeek(b); return err }, []badGroupBody{
		{"unknown seek kind", bcat(head, []byte{2}, be64(1)), wire.CodeInvalidRequest},
		{"unknown seek kind 0xff", bcat(head, []byte{0xff}, be64(1)), wire.CodeInvalidRequest},
		// Framing is checked first: a cut body is malformed whatever its kind.
		{"unknown kind, cut", bcat(head, []byte{2}, be32(1)), wire.CodeMalformedFrame},
		{"unknown kind, trailing byte", bcat(head, []byte{2}, be64(1), []byte{0}), wire.CodeMalformedFrame},
	})
}

func TestAdminLayouts(t *testing.T) {
	name := hex.EncodeToString(nameBytes())
	tests := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"offsets_for_time", wire.AppendOffsetsForTime(nil, 1, wire.OffsetsForTime{Name: nameABC, Shard: 0x01020304, UnixNano: -2}),
			name + "01020304" + "fffffffffffffffe"},
		{"shard_offsets", wire.AppendShardOffsets(nil, 1, []wire.ShardOffset{{Shard: 0x01020304, Offset: 0x1112131415161718}, {Shard: 5, Offset: 6}}),
			"00000002" + "01020304" + "1112131415161718" + "00000005" + "0000000000000006"},
		{"list_groups", wire.AppendListGroups(nil, 1, nameABC), name},
		{"group_list", wire.AppendGroupList(nil, 1, []wire.GroupSummary{{Group: "g1", Members: 0x01020304, Lag: 0x1112131415161718}}),
			"00000001" + "0002" + "6731" + "01020304" + "1112131415161718"},
		{"delete_group", wire.AppendDeleteGroup(nil, 1, wire.DeleteGroup{Name: nameABC, Group: "g1"}), name + "0002" + "6731"},
		{"group_seek", wire.AppendGroupSeek(nil, 1, wire.GroupSeek{Name: nameABC, Group: "g1", Shard: wire.AnyShard, To: wire.SeekToOffset, Offset: 0x1112131415161718}),
			name + "0002" + "6731" + "ffffffff" + "00" + "1112131415161718"},
		{"group_seek", wire.AppendGroupSeek(nil, 1, wire.GroupSeek{Name: nameABC, Group: "g1", Shard: 1, To: wire.SeekToTime, UnixNano: -2}),
			name + "0002" + "6731" + "00000001" + "01" + "fffffffffffffffe"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := splitFrame(t, tc.frame)
			if f.Header.Type.String() != tc.name {
				t.Fatalf("frame type %v, want %s", f.Header.Type, tc.name)
			}
			if got := hex.EncodeToString(f.Body); got != tc.want {
				t.Fatalf("body %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestAdminCountsLieWithoutAllocating checks that a count the body cannot
// hold is refused before anything is allocated for it.
func TestAdminCountsLieWithoutAllocating(t *testing.T) {
	tests := []struct {
		name   string
		decode func([]byte) error
		body   []byte
	}{
		{"shard_offsets count", func(b []byte) error { _, err := wire.DecodeShardOffsets(b); return err }, bcat(be32(1<<16), be32(0), be64(1))},
		{"group_list count", func(b []byte) error { _, err := wire.DecodeGroupList(b); return err }, bcat(be32(1<<20), str16("g"), be32(1), be64(2))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const runs = 10
			n := allocatedBytes(func() {
				for i := 0; i < runs; i++ {
					wantCode(t, tc.decode(tc.body), wire.CodeMalformedFrame)
				}
			})
			if n > runs*16<<10 {
				t.Fatalf("%d refusals of a %d-byte body allocated %d bytes", runs, len(tc.body), n)
			}
		})
	}
}
