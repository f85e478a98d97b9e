package wire

import "encoding/binary"

// GroupAcks (FeatureGroupAcks) carries the acks of several callers in one
// request: each entry is what one GroupAck of the frame's stream and group
// would carry (one shard's offsets), and each is settled and answered on its
// own, in one GroupAcksDone, so that one entry's error (an offset never
// delivered, a shard the stream lacks) fails that entry alone. A client
// coalesces into it the acks its callers issue while earlier ones are on
// their way.
type GroupAcks struct {
	Name    StreamName
	Group   string
	Entries []GroupAckEntry
}

// GroupAckEntry is one entry of a GroupAcks: offsets of one shard.
type GroupAckEntry struct {
	Shard   uint32
	Offsets []uint64
}

// MaxGroupAcksEntries bounds the entries of one GroupAcks. The offsets of
// all its entries together are bounded by MaxGroupAckOffsets, as one
// GroupAck's are.
const MaxGroupAcksEntries = 4096

// AppendGroupAcks appends a GroupAcks frame.
func AppendGroupAcks(dst []byte, reqID uint64, a GroupAcks) []byte {
	dst, s := frameStart(dst, TypeGroupAcks, 0, reqID)
	dst = appendName(dst, a.Name)
	dst = appendStr16(dst, a.Group)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(a.Entries)))
	for _, e := range a.Entries {
		dst = binary.BigEndian.AppendUint32(dst, e.Shard)
		dst = appendOffsets(dst, e.Offsets)
	}
	return frameEnd(dst, s)
}

// groupAckEntryHead is an entry's size before its offsets.
const groupAckEntryHead = 4 + 4

// DecodeGroupAcks decodes a GroupAcks body. An entry count over
// MaxGroupAcksEntries, or offsets over MaxGroupAckOffsets in all, is
// malformed.
func DecodeGroupAcks(body []byte) (GroupAcks, error) {
	d := decoder{b: body}
	a := GroupAcks{Name: d.name(), Group: d.str16("group")}
	n := d.u32("entry count")
	if d.err == nil && (n > MaxGroupAcksEntries || uint64(n)*groupAckEntryHead > uint64(len(d.b)-d.off)) {
		d.fail("entry count %d exceeds the frame or the limit of %d", n, MaxGroupAcksEntries)
	}
	if d.err != nil {
		return a, d.err
	}
	if n > 0 {
		a.Entries = make([]GroupAckEntry, 0, n)
	}
	total := 0
	for i := uint32(0); i < n && d.err == nil; i++ {
		e := GroupAckEntry{Shard: d.u32("shard"), Offsets: d.offsets()}
		if total += len(e.Offsets); total > MaxGroupAckOffsets {
			d.fail("%d offsets in all exceed the limit of %d", total, MaxGroupAckOffsets)
		}
		a.Entries = append(a.Entries, e)
	}
	return a, d.end("group_acks")
}

// GroupAckOutcome is the outcome of one GroupAcks entry: Err nil and Count
// the records the entry settled (as GroupDone's count), or the entry's typed
// error (as an Error frame would carry it), having changed nothing.
type GroupAckOutcome struct {
	Count uint64
	Err   *Error
}

// groupAckOutcomeHead is an outcome's size before its message.
const groupAckOutcomeHead = 2 + 8 + 2

// AppendGroupAcksDone appends a GroupAcksDone frame: the outcome of each
// entry of the GroupAcks it answers, in the entries' order.
func AppendGroupAcksDone(dst []byte, reqID uint64, outs []GroupAckOutcome) []byte {
	dst, s := frameStart(dst, TypeGroupAcksDone, 0, reqID)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(outs)))
	for _, o := range outs {
		if o.Err == nil {
			dst = binary.BigEndian.AppendUint16(dst, 0)
			dst = binary.BigEndian.AppendUint64(dst, o.Count)
			dst = appendStr16(dst, "")
			continue
		}
		msg := o.Err.Message
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(o.Err.Code))
		dst = binary.BigEndian.AppendUint64(dst, o.Err.Detail)
		dst = appendStr16(dst, msg)
	}
	return frameEnd(dst, s)
}

// DecodeGroupAcksDone decodes a GroupAcksDone body. An outcome of code 0 (a
// settled entry) with a message is malformed.
func DecodeGroupAcksDone(body []byte) ([]GroupAckOutcome, error) {
	d := decoder{b: body}
	n := d.u32("outcome count")
	if d.err == nil && (n > MaxGroupAcksEntries || uint64(n)*groupAckOutcomeHead > uint64(len(d.b)-d.off)) {
		d.fail("outcome count %d exceeds the frame or the limit of %d", n, MaxGroupAcksEntries)
	}
	if d.err != nil {
		return nil, d.err
	}
	var outs []GroupAckOutcome
	if n > 0 {
		outs = make([]GroupAckOutcome, 0, n)
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		code, v, msg := Code(d.u16("code")), d.u64("count"), d.str16("message")
		switch {
		case d.err != nil:
		case code == 0 && msg != "":
			d.fail("a settled outcome with a message")
		case code == 0:
			outs = append(outs, GroupAckOutcome{Count: v})
		default:
			outs = append(outs, GroupAckOutcome{Err: &Error{Code: code, Detail: v, Message: msg}})
		}
	}
	return outs, d.end("group_acks_done")
}
