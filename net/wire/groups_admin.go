package wire

import "encoding/binary"

// Consumer-group administration (FeatureGroupAdmin): list a stream's
// groups, delete one, move one's committed position. docs/protocol.md gives
// each body's layout.

// AppendListGroups appends a ListGroups frame: list the consumer groups of
// the stream name. Answered with GroupList or Error.
func AppendListGroups(dst []byte, reqID uint64, name StreamName) []byte {
	dst, s := frameStart(dst, TypeListGroups, 0, reqID)
	dst = appendName(dst, name)
	return frameEnd(dst, s)
}

// DecodeListGroups decodes a ListGroups body.
func DecodeListGroups(body []byte) (StreamName, error) {
	d := decoder{b: body}
	n := d.name()
	return n, d.end("list_groups")
}

// GroupSummary is one group of a GroupList: its name, its push members and
// its lag (records between its committed cursors and the shards' committed
// tails, summed over shards), as its coordinator last published them.
type GroupSummary struct {
	Group   string
	Members uint32
	Lag     uint64
}

// groupSummaryMin is the smallest encoded GroupSummary (an empty name).
const groupSummaryMin = 2 + 4 + 8

// AppendGroupList appends a GroupList frame: the answer to ListGroups, the
// stream's groups in name order.
func AppendGroupList(dst []byte, reqID uint64, groups []GroupSummary) []byte {
	dst, s := frameStart(dst, TypeGroupList, 0, reqID)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(groups)))
	for _, g := range groups {
		dst = appendStr16(dst, g.Group)
		dst = binary.BigEndian.AppendUint32(dst, g.Members)
		dst = binary.BigEndian.AppendUint64(dst, g.Lag)
	}
	return frameEnd(dst, s)
}

// GroupSummarySize is the encoded size of g in a GroupList body.
func GroupSummarySize(g *GroupSummary) int { return groupSummaryMin + len(g.Group) }

// GroupListHeadSize is a GroupList body's size before its entries.
const GroupListHeadSize = 4

// DecodeGroupList decodes a GroupList body.
func DecodeGroupList(body []byte) ([]GroupSummary, error) {
	d := decoder{b: body}
	n := d.u32("group count")
	if d.err == nil && uint64(n)*groupSummaryMin > uint64(len(d.b)-d.off) {
		d.fail("group count %d exceeds the frame", n)
	}
	if d.err != nil {
		return nil, d.err
	}
	out := make([]GroupSummary, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		out = append(out, GroupSummary{Group: d.str16("group"), Members: d.u32("members"), Lag: d.u64("lag")})
	}
	return out, d.end("group_list")
}

// DeleteGroup deletes a consumer group and all its state. Answered with OK
// once the deletion is durable, or Error (group_not_found; group_in_use
// while the group has push members).
type DeleteGroup struct {
	Name  StreamName
	Group string
}

// AppendDeleteGroup appends a DeleteGroup frame.
func AppendDeleteGroup(dst []byte, reqID uint64, g DeleteGroup) []byte {
	dst, s := frameStart(dst, TypeDeleteGroup, 0, reqID)
	dst = appendName(dst, g.Name)
	dst = appendStr16(dst, g.Group)
	return frameEnd(dst, s)
}

// DecodeDeleteGroup decodes a DeleteGroup body.
func DecodeDeleteGroup(body []byte) (DeleteGroup, error) {
	d := decoder{b: body}
	g := DeleteGroup{Name: d.name(), Group: d.str16("group")}
	return g, d.end("delete_group")
}

// SeekKind says where a GroupSeek moves a group.
type SeekKind uint8

// Seek kinds.
const (
	// SeekToOffset: to GroupSeek.Offset on every shard sought (clamped to
	// each shard's retained range: 0 is the first retained record,
	// NoEnd the tail).
	SeekToOffset SeekKind = 0
	// SeekToTime: to each shard's first offset committed at or after
	// GroupSeek.UnixNano, as OffsetsForTime finds it.
	SeekToTime SeekKind = 1
)

// GroupSeek sets a group's committed position on Shard (AnyShard: every
// shard). Answered with ShardOffsets (each shard's new position) once it is
// durable, or Error (group_in_use while the group has push members or
// claims in flight on a shard sought).
type GroupSeek struct {
	Name  StreamName
	Group string
	Shard uint32
	To    SeekKind
	// Offset is the position, with SeekToOffset.
	Offset uint64
	// UnixNano is the time, with SeekToTime.
	UnixNano int64
}

// AppendGroupSeek appends a GroupSeek frame. The position field carries
// Offset with SeekToOffset and UnixNano with SeekToTime.
func AppendGroupSeek(dst []byte, reqID uint64, g GroupSeek) []byte {
	dst, s := frameStart(dst, TypeGroupSeek, 0, reqID)
	dst = appendName(dst, g.Name)
	dst = appendStr16(dst, g.Group)
	dst = binary.BigEndian.AppendUint32(dst, g.Shard)
	dst = append(dst, byte(g.To))
	v := g.Offset
	if g.To == SeekToTime {
		v = uint64(g.UnixNano)
	}
	dst = binary.BigEndian.AppendUint64(dst, v)
	return frameEnd(dst, s)
}

// DecodeGroupSeek decodes a GroupSeek body. A body that does not frame is
// CodeMalformedFrame; a well-framed one with an unknown seek kind is
// CodeInvalidRequest.
func DecodeGroupSeek(body []byte) (GroupSeek, error) {
	d := decoder{b: body}
	g := GroupSeek{Name: d.name(), Group: d.str16("group"), Shard: d.u32("shard"), To: SeekKind(d.u8("seek kind"))}
	v := d.u64("position")
	if err := d.end("group_seek"); err != nil {
		return g, err
	}
	switch g.To {
	case SeekToOffset:
		g.Offset = v
	case SeekToTime:
		g.UnixNano = int64(v)
	default:
		return g, Errorf(CodeInvalidRequest, "unknown seek kind %d", g.To)
	}
	return g, nil
}
