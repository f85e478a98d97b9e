package wire

import (
	"encoding/binary"
	"slices"
)

// Consumer-group frames (FeatureGroups). A group is named per stream; group
// names and member ids follow the stream-name rules: 1-64 bytes of
// [A-Za-z0-9._-]. docs/protocol.md gives each body's layout.

// MaxGroupName is the longest group name or member id.
const MaxGroupName = 64

// ValidateGroupName returns a CodeInvalidRequest error unless s is 1-64
// bytes of [A-Za-z0-9._-]; what names the field in the message.
func ValidateGroupName(what, s string) error {
	if s == "" || len(s) > MaxGroupName {
		return Errorf(CodeInvalidRequest, "%s must be 1-%d bytes, got %d", what, MaxGroupName, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return Errorf(CodeInvalidRequest, "%s %q has a character outside [A-Za-z0-9._-]", what, s)
		}
	}
	return nil
}

// MaxCursorBytes bounds a group cursor token.
const MaxCursorBytes = 1<<16 - 1

// GroupPoll claims up to Max records of one shard for Group, waiting up to
// WaitMillis for work when there is none. Answered with GroupRecords (no
// cursor) or Error.
type GroupPoll struct {
	Name       StreamName
	Group      string
	Shard      uint32
	Max        uint32
	WaitMillis uint32
}

// AppendGroupPoll appends a GroupPoll frame.
func AppendGroupPoll(dst []byte, reqID uint64, p GroupPoll) []byte {
	dst, s := frameStart(dst, TypeGroupPoll, 0, reqID)
	dst = appendName(dst, p.Name)
	dst = appendStr16(dst, p.Group)
	dst = binary.BigEndian.AppendUint32(dst, p.Shard)
	dst = binary.BigEndian.AppendUint32(dst, p.Max)
	dst = binary.BigEndian.AppendUint32(dst, p.WaitMillis)
	return frameEnd(dst, s)
}

// DecodeGroupPoll decodes a GroupPoll body.
func DecodeGroupPoll(body []byte) (GroupPoll, error) {
	d := decoder{b: body}
	p := GroupPoll{Name: d.name(), Group: d.str16("group"), Shard: d.u32("shard"), Max: d.u32("max"), WaitMillis: d.u32("wait")}
	return p, d.end("group_poll")
}

// GroupRecord is one claimed record: where it is, how many times it has
// been delivered (this delivery included), and the record itself in the
// records-block encoding (exactly one record).
type GroupRecord struct {
	Shard     uint32
	Offset    uint64
	Attempts  uint32
	Timestamp int64
	Record    []byte
}

// groupRecordHead is a GroupRecord's size before its record bytes.
const groupRecordHead = 4 + 8 + 4 + 8 + 4

// GroupRecordSize is the encoded size of r in a GroupRecords body.
func GroupRecordSize(r *GroupRecord) int { return groupRecordHead + len(r.Record) }

// GroupRecords carries claimed records: the answer to a poll (Cursor empty)
// or one push on a group stream (Cursor is the token that acks exactly these
// records).
type GroupRecords struct {
	Cursor  []byte
	Records []GroupRecord
}

// GroupRecordsHeadSize is a GroupRecords body's size before its records,
// for a cursor of cursorLen bytes.
func GroupRecordsHeadSize(cursorLen int) int { return 2 + cursorLen + 4 }

// AppendGroupRecords appends a GroupRecords frame.
func AppendGroupRecords(dst []byte, reqID uint64, g GroupRecords) []byte {
	// Sized once: a poll's answer of hundreds of records grown by append
	// allocated and copied about twice its size.
	size := HeaderSize + GroupRecordsHeadSize(len(g.Cursor))
	for i := range g.Records {
		size += groupRecordHead + len(g.Records[i].Record)
	}
	if dst == nil {
		dst = make([]byte, 0, size) // one allocation, with the race detector too (slices.Grow makes two there)
	} else {
		dst = slices.Grow(dst, size)
	}
	dst, s := frameStart(dst, TypeGroupRecords, 0, reqID)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(g.Cursor)))
	dst = append(dst, g.Cursor...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(g.Records)))
	for i := range g.Records {
		r := &g.Records[i]
		dst = binary.BigEndian.AppendUint32(dst, r.Shard)
		dst = binary.BigEndian.AppendUint64(dst, r.Offset)
		dst = binary.BigEndian.AppendUint32(dst, r.Attempts)
		dst = binary.BigEndian.AppendUint64(dst, uint64(r.Timestamp))
		dst = appendBytes32(dst, r.Record)
	}
	return frameEnd(dst, s)
}

// DecodeGroupRecords decodes a GroupRecords body. Records share the body.
// Each record's bytes are checked to hold exactly one valid record.
func DecodeGroupRecords(body []byte) (GroupRecords, error) {
	d := decoder{b: body}
	n := d.u16("cursor length")
	g := GroupRecords{Cursor: d.take(int(n), "cursor")}
	count := d.u32("record count")
	if d.err == nil && uint64(count)*groupRecordHead > uint64(len(d.b)-d.off) {
		d.fail("record count %d exceeds the frame", count)
	}
	if d.err != nil {
		return g, d.err
	}
	g.Records = make([]GroupRecord, 0, count)
	for i := uint32(0); i < count && d.err == nil; i++ {
		r := GroupRecord{Shard: d.u32("shard"), Offset: d.u64("offset"), Attempts: d.u32("attempts"),
			Timestamp: int64(d.u64("timestamp")), Record: d.bytes32("record")}
		if d.err == nil {
			if _, err := ValidateRecords(r.Record, 1); err != nil {
				return g, err
			}
		}
		g.Records = append(g.Records, r)
	}
	return g, d.end("group_records")
}

// GroupAck finishes (TypeGroupAck) or hands back for immediate redelivery
// (TypeGroupNack) claimed records of one shard. Answered with GroupDone (how
// many records changed state) or Error.
type GroupAck struct {
	Name    StreamName
	Group   string
	Shard   uint32
	Offsets []uint64
}

// MaxGroupAckOffsets bounds the offsets of one GroupAck.
const MaxGroupAckOffsets = 65536

// AppendGroupAck appends a GroupAck frame (nack: a GroupNack frame).
func AppendGroupAck(dst []byte, reqID uint64, nack bool, a GroupAck) []byte {
	t := TypeGroupAck
	if nack {
		t = TypeGroupNack
	}
	dst, s := frameStart(dst, t, 0, reqID)
	dst = appendName(dst, a.Name)
	dst = appendStr16(dst, a.Group)
	dst = binary.BigEndian.AppendUint32(dst, a.Shard)
	dst = appendOffsets(dst, a.Offsets)
	return frameEnd(dst, s)
}

// DecodeGroupAck decodes a GroupAck or GroupNack body.
func DecodeGroupAck(body []byte) (GroupAck, error) {
	d := decoder{b: body}
	a := GroupAck{Name: d.name(), Group: d.str16("group"), Shard: d.u32("shard")}
	a.Offsets = d.offsets()
	return a, d.end("group_ack")
}

func appendOffsets(dst []byte, offs []uint64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(offs)))
	for _, o := range offs {
		dst = binary.BigEndian.AppendUint64(dst, o)
	}
	return dst
}

func (d *decoder) offsets() []uint64 {
	n := d.u32("offset count")
	if d.err == nil && (n > MaxGroupAckOffsets || uint64(n)*8 > uint64(len(d.b)-d.off)) {
		d.fail("offset count %d exceeds the frame or the limit of %d", n, MaxGroupAckOffsets)
	}
	if d.err != nil || n == 0 {
		return nil
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = d.u64("offset")
	}
	return out
}

// GroupDeadLetters lists a group's dead letters of Shard (AnyShard: every
// shard), ordered by shard then offset, skipping offsets below From, at most
// Limit entries (0: the node's cap). Answered with GroupDeadList.
type GroupDeadLetters struct {
	Name  StreamName
	Group string
	Shard uint32
	From  uint64
	Limit uint32
}

// AppendGroupDeadLetters appends a GroupDeadLetters frame.
func AppendGroupDeadLetters(dst []byte, reqID uint64, g GroupDeadLetters) []byte {
	dst, s := frameStart(dst, TypeGroupDeadLetters, 0, reqID)
	dst = appendName(dst, g.Name)
	dst = appendStr16(dst, g.Group)
	dst = binary.BigEndian.AppendUint32(dst, g.Shard)
	dst = binary.BigEndian.AppendUint64(dst, g.From)
	dst = binary.BigEndian.AppendUint32(dst, g.Limit)
	return frameEnd(dst, s)
}

// DecodeGroupDeadLetters decodes a GroupDeadLetters body.
func DecodeGroupDeadLetters(body []byte) (GroupDeadLetters, error) {
	d := decoder{b: body}
	g := GroupDeadLetters{Name: d.name(), Group: d.str16("group"), Shard: d.u32("shard"), From: d.u64("from"), Limit: d.u32("limit")}
	return g, d.end("group_dead_letters")
}

// DeadLetter points at a record the group gave up on: the record stays in
// the stream's log (until retention removes it); this is its address.
type DeadLetter struct {
	Shard        uint32
	Offset       uint64
	Attempts     uint32
	DeadUnixNano int64
	Reason       string
}

// GroupDeadList answers GroupDeadLetters; More says entries were left out
// by the limit.
type GroupDeadList struct {
	Letters []DeadLetter
	More    bool
}

// AppendGroupDeadList appends a GroupDeadList frame.
func AppendGroupDeadList(dst []byte, reqID uint64, l GroupDeadList) []byte {
	dst, s := frameStart(dst, TypeGroupDeadList, 0, reqID)
	more := byte(0)
	if l.More {
		more = 1
	}
	dst = append(dst, more)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(l.Letters)))
	for _, dl := range l.Letters {
		dst = binary.BigEndian.AppendUint32(dst, dl.Shard)
		dst = binary.BigEndian.AppendUint64(dst, dl.Offset)
		dst = binary.BigEndian.AppendUint32(dst, dl.Attempts)
		dst = binary.BigEndian.AppendUint64(dst, uint64(dl.DeadUnixNano))
		dst = appendStr16(dst, dl.Reason)
	}
	return frameEnd(dst, s)
}

// DecodeGroupDeadList decodes a GroupDeadList body.
func DecodeGroupDeadList(body []byte) (GroupDeadList, error) {
	d := decoder{b: body}
	var l GroupDeadList
	switch d.u8("more") {
	case 0:
	case 1:
		l.More = true
	default:
		d.fail("more flag must be 0 or 1")
	}
	n := d.u32("dead letter count")
	const minEntry = 4 + 8 + 4 + 8 + 2
	if d.err == nil && uint64(n)*minEntry > uint64(len(d.b)-d.off) {
		d.fail("dead letter count %d exceeds the frame", n)
	}
	if d.err != nil {
		return l, d.err
	}
	l.Letters = make([]DeadLetter, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		l.Letters = append(l.Letters, DeadLetter{Shard: d.u32("shard"), Offset: d.u64("offset"), Attempts: d.u32("attempts"),
			DeadUnixNano: int64(d.u64("dead at")), Reason: d.str16("reason")})
	}
	return l, d.end("group_dead_list")
}

// GroupSelect picks dead letters for GroupRedrive and GroupDiscard: the
// listed Offsets of Shard, or with no offsets every dead letter of Shard
// (AnyShard: of every shard). Answered with GroupDone.
type GroupSelect struct {
	Name    StreamName
	Group   string
	Shard   uint32
	Offsets []uint64
}

// AppendGroupSelect appends a GroupRedrive (discard false) or GroupDiscard
// frame.
func AppendGroupSelect(dst []byte, reqID uint64, discard bool, g GroupSelect) []byte {
	t := TypeGroupRedrive
	if discard {
		t = TypeGroupDiscard
	}
	dst, s := frameStart(dst, t, 0, reqID)
	dst = appendName(dst, g.Name)
	dst = appendStr16(dst, g.Group)
	dst = binary.BigEndian.AppendUint32(dst, g.Shard)
	dst = appendOffsets(dst, g.Offsets)
	return frameEnd(dst, s)
}

// DecodeGroupSelect decodes a GroupRedrive or GroupDiscard body. A body
// that does not frame is CodeMalformedFrame; a well-framed one naming
// offsets with Shard AnyShard is CodeInvalidRequest.
func DecodeGroupSelect(body []byte) (GroupSelect, error) {
	d := decoder{b: body}
	g := GroupSelect{Name: d.name(), Group: d.str16("group"), Shard: d.u32("shard")}
	g.Offsets = d.offsets()
	if err := d.end("group_select"); err != nil {
		return g, err
	}
	if g.Shard == AnyShard && len(g.Offsets) > 0 {
		return g, Errorf(CodeInvalidRequest, "offsets need a shard")
	}
	return g, nil
}

// AppendGroupDone appends a GroupDone frame: count records changed state.
func AppendGroupDone(dst []byte, reqID uint64, count uint64) []byte {
	dst, s := frameStart(dst, TypeGroupDone, 0, reqID)
	dst = binary.BigEndian.AppendUint64(dst, count)
	return frameEnd(dst, s)
}

// DecodeGroupDone decodes a GroupDone body.
func DecodeGroupDone(body []byte) (uint64, error) {
	d := decoder{b: body}
	n := d.u64("count")
	return n, d.end("group_done")
}

// DescribeGroup asks for a group's state. Answered with GroupInfo, or
// CodeGroupNotFound.
type DescribeGroup struct {
	Name  StreamName
	Group string
}

// AppendDescribeGroup appends a DescribeGroup frame.
func AppendDescribeGroup(dst []byte, reqID uint64, g DescribeGroup) []byte {
	dst, s := frameStart(dst, TypeDescribeGroup, 0, reqID)
	dst = appendName(dst, g.Name)
	dst = appendStr16(dst, g.Group)
	return frameEnd(dst, s)
}

// DecodeDescribeGroup decodes a DescribeGroup body.
func DecodeDescribeGroup(body []byte) (DescribeGroup, error) {
	d := decoder{b: body}
	g := DescribeGroup{Name: d.name(), Group: d.str16("group")}
	return g, d.end("describe_group")
}

// GroupShardInfo is one shard's state in a group: every offset below
// Committed is settled (acked, dead-lettered or discarded); Delivered is
// the first offset never delivered; Tail is the shard's committed tail.
type GroupShardInfo struct {
	Shard       uint32
	Committed   uint64
	Delivered   uint64
	Tail        uint64
	Claims      uint32
	Owed        uint32
	DeadLetters uint32
}

// GroupMemberInfo is one push member: its assigned shards, its window and
// what it has in flight, and how long since it was last heard.
type GroupMemberInfo struct {
	ID         string
	Shards     []uint32
	Window     uint32
	InFlight   uint32
	IdleMillis uint32
}

// GroupInfo answers DescribeGroup.
type GroupInfo struct {
	Group            string
	Generation       uint64
	VisibilityMillis uint32
	SessionMillis    uint32
	MaxAttempts      uint32
	Shards           []GroupShardInfo
	Members          []GroupMemberInfo
}

// AppendGroupInfo appends a GroupInfo frame.
func AppendGroupInfo(dst []byte, reqID uint64, g GroupInfo) []byte {
	dst, s := frameStart(dst, TypeGroupInfo, 0, reqID)
	dst = appendStr16(dst, g.Group)
	dst = binary.BigEndian.AppendUint64(dst, g.Generation)
	dst = binary.BigEndian.AppendUint32(dst, g.VisibilityMillis)
	dst = binary.BigEndian.AppendUint32(dst, g.SessionMillis)
	dst = binary.BigEndian.AppendUint32(dst, g.MaxAttempts)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(g.Shards)))
	for _, sh := range g.Shards {
		dst = binary.BigEndian.AppendUint32(dst, sh.Shard)
		dst = binary.BigEndian.AppendUint64(dst, sh.Committed)
		dst = binary.BigEndian.AppendUint64(dst, sh.Delivered)
		dst = binary.BigEndian.AppendUint64(dst, sh.Tail)
		dst = binary.BigEndian.AppendUint32(dst, sh.Claims)
		dst = binary.BigEndian.AppendUint32(dst, sh.Owed)
		dst = binary.BigEndian.AppendUint32(dst, sh.DeadLetters)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(g.Members)))
	for _, m := range g.Members {
		dst = appendStr16(dst, m.ID)
		dst = appendShards(dst, m.Shards)
		dst = binary.BigEndian.AppendUint32(dst, m.Window)
		dst = binary.BigEndian.AppendUint32(dst, m.InFlight)
		dst = binary.BigEndian.AppendUint32(dst, m.IdleMillis)
	}
	return frameEnd(dst, s)
}

// DecodeGroupInfo decodes a GroupInfo body.
func DecodeGroupInfo(body []byte) (GroupInfo, error) {
	d := decoder{b: body}
	g := GroupInfo{Group: d.str16("group"), Generation: d.u64("generation"), VisibilityMillis: d.u32("visibility"),
		SessionMillis: d.u32("session"), MaxAttempts: d.u32("max attempts")}
	n := d.u32("shard count")
	const shardEntry = 4 + 8 + 8 + 8 + 4 + 4 + 4
	if d.err == nil && uint64(n)*shardEntry > uint64(len(d.b)-d.off) {
		d.fail("shard count %d exceeds the frame", n)
	}
	if d.err != nil {
		return g, d.err
	}
	g.Shards = make([]GroupShardInfo, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		g.Shards = append(g.Shards, GroupShardInfo{Shard: d.u32("shard"), Committed: d.u64("committed"), Delivered: d.u64("delivered"),
			Tail: d.u64("tail"), Claims: d.u32("claims"), Owed: d.u32("owed"), DeadLetters: d.u32("dead letters")})
	}
	m := d.u32("member count")
	const memberEntry = 2 + 4 + 4 + 4 + 4
	if d.err == nil && uint64(m)*memberEntry > uint64(len(d.b)-d.off) {
		d.fail("member count %d exceeds the frame", m)
	}
	if d.err != nil {
		return g, d.err
	}
	g.Members = make([]GroupMemberInfo, 0, m)
	for i := uint32(0); i < m && d.err == nil; i++ {
		g.Members = append(g.Members, GroupMemberInfo{ID: d.str16("member"), Shards: d.shards(), Window: d.u32("window"),
			InFlight: d.u32("in flight"), IdleMillis: d.u32("idle")})
	}
	return g, d.end("group_info")
}

func appendShards(dst []byte, shards []uint32) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(shards)))
	for _, s := range shards {
		dst = binary.BigEndian.AppendUint32(dst, s)
	}
	return dst
}

func (d *decoder) shards() []uint32 {
	n := d.u32("shard count")
	if d.err == nil && uint64(n)*4 > uint64(len(d.b)-d.off) {
		d.fail("shard count %d exceeds the frame", n)
	}
	if d.err != nil {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = d.u32("shard")
	}
	return out
}

// GroupSubscribe is the first frame of a group push stream: join Group as
// Member (empty: the node names a member for this stream) with a credit
// window of Window records in flight and at most MaxPerPush records per
// push. Answered with GroupAssignment, then GroupRecords pushes.
type GroupSubscribe struct {
	Name       StreamName
	Group      string
	Member     string
	Window     uint32
	MaxPerPush uint32
}

// AppendGroupSubscribe appends a GroupSubscribe frame.
func AppendGroupSubscribe(dst []byte, reqID uint64, g GroupSubscribe) []byte {
	dst, s := frameStart(dst, TypeGroupSubscribe, 0, reqID)
	dst = appendName(dst, g.Name)
	dst = appendStr16(dst, g.Group)
	dst = appendStr16(dst, g.Member)
	dst = binary.BigEndian.AppendUint32(dst, g.Window)
	dst = binary.BigEndian.AppendUint32(dst, g.MaxPerPush)
	return frameEnd(dst, s)
}

// DecodeGroupSubscribe decodes a GroupSubscribe body.
func DecodeGroupSubscribe(body []byte) (GroupSubscribe, error) {
	d := decoder{b: body}
	g := GroupSubscribe{Name: d.name(), Group: d.str16("group"), Member: d.str16("member"),
		Window: d.u32("window"), MaxPerPush: d.u32("max per push")}
	return g, d.end("group_subscribe")
}

// GroupAssignment tells a member what it has: its id, the group's
// membership generation, its shards (empty: it waits idle), its window and
// push cap as granted, the session timeout it must ack or heartbeat within,
// and its records in flight after the ack it answers.
type GroupAssignment struct {
	Member        string
	Generation    uint64
	Shards        []uint32
	Window        uint32
	MaxPerPush    uint32
	SessionMillis uint32
	InFlight      uint32
}

// AppendGroupAssignment appends a GroupAssignment frame.
func AppendGroupAssignment(dst []byte, reqID uint64, g GroupAssignment) []byte {
	dst, s := frameStart(dst, TypeGroupAssignment, 0, reqID)
	dst = appendStr16(dst, g.Member)
	dst = binary.BigEndian.AppendUint64(dst, g.Generation)
	dst = appendShards(dst, g.Shards)
	dst = binary.BigEndian.AppendUint32(dst, g.Window)
	dst = binary.BigEndian.AppendUint32(dst, g.MaxPerPush)
	dst = binary.BigEndian.AppendUint32(dst, g.SessionMillis)
	dst = binary.BigEndian.AppendUint32(dst, g.InFlight)
	return frameEnd(dst, s)
}

// DecodeGroupAssignment decodes a GroupAssignment body.
func DecodeGroupAssignment(body []byte) (GroupAssignment, error) {
	d := decoder{b: body}
	g := GroupAssignment{Member: d.str16("member"), Generation: d.u64("generation"), Shards: d.shards(),
		Window: d.u32("window"), MaxPerPush: d.u32("max per push"), SessionMillis: d.u32("session"), InFlight: d.u32("in flight")}
	return g, d.end("group_assignment")
}

// GroupStreamAck, on a group push stream, returns Count records of credit
// and commits every record of Cursor, in one request; an empty cursor with
// Count 0 is a heartbeat. Answered with GroupAssignment (the member's
// current shards) or Error.
type GroupStreamAck struct {
	Cursor []byte
	Count  uint32
}

// AppendGroupStreamAck appends a GroupStreamAck frame.
func AppendGroupStreamAck(dst []byte, reqID uint64, a GroupStreamAck) []byte {
	dst, s := frameStart(dst, TypeGroupStreamAck, 0, reqID)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(a.Cursor)))
	dst = append(dst, a.Cursor...)
	dst = binary.BigEndian.AppendUint32(dst, a.Count)
	return frameEnd(dst, s)
}

// DecodeGroupStreamAck decodes a GroupStreamAck body.
func DecodeGroupStreamAck(body []byte) (GroupStreamAck, error) {
	d := decoder{b: body}
	n := d.u16("cursor length")
	a := GroupStreamAck{Cursor: d.take(int(n), "cursor"), Count: d.u32("count")}
	return a, d.end("group_stream_ack")
}
