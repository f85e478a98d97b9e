package peerwire

import (
	"encoding/binary"
)

// A Shard frame carries one message of a replicated shard's snapshot
// catch-up. A raft snapshot of a shard names the raft index it was taken
// at and the shard's tail then (and its idempotent producers); the replica
// installing it fetches the shard's log up to that tail from another
// replica, a page at a time, before raft goes on:
//
//	stream u64 | shard u32 | kind u8 | kind's body
//
//	kind 1, ShardFetch: token u64 | from u64 | to u64 | max bytes u32
//	kind 3, ShardQuiesce: term u64 | commit u64
//	kind 4, ShardWake: nothing more
//	kind 5, ShardRemoved: applied u64
//	kind 6, GroupStateFetch: token u64 | max bytes u32 | after length u16 | after
//	kind 7, GroupStatePage: token u64 | applied u64 | more u8 | count u32 |
//	                        count × (key length u16 | key | value length u32 | value)
//	kind 2, ShardPage:  token u64 | first u64 | tail u64 | count u32 |
//	                    count × (base u64 | records u32 | timestamp i64 |
//	                             length u32 | records)
//
// A page holds the serving replica's committed batches from the fetch's
// from (or, when retention deleted that far, from its first offset) and
// below to, at most max bytes of records and at least one batch when it
// has one; first and tail are where its log starts and ends.
//
// A ShardQuiesce goes from a group's leader to its followers when the
// group is idle and every replica holds every entry: the leader stops
// ticking and heartbeating, and a follower at that term and commit stops
// ticking too, until any message of the group (or the loss of its
// leader's node, see the link's beats) wakes it.
//
// A ShardRemoved answers a vote request from a replica that the sender's
// configuration, as of its applied index, no longer holds: a removed
// replica that never learned its removal committed (the leader stops
// writing to it once the removal applies) learns it this way and stops.

// ShardKind is the kind of a Shard frame's message.
type ShardKind uint8

// Shard message kinds.
const (
	KindShardFetch ShardKind = 1
	KindShardPage  ShardKind = 2
	KindQuiesce    ShardKind = 3
	KindWake       ShardKind = 4
	KindRemoved    ShardKind = 5
	// KindGroupStateFetch and KindGroupStatePage carry the consumer-group
	// state a cluster stream keeps in its shard 0's raft group, to a
	// replica of shard 0 installing a snapshot (the state is not in the
	// snapshot, as the records are not).
	KindGroupStateFetch ShardKind = 6
	KindGroupStatePage  ShardKind = 7
)

// GroupStateFetch asks a replica of a cluster stream's shard 0 for a page
// of the stream's consumer-group state: the keys after After (from the
// first, when empty), at most MaxBytes of keys and values.
type GroupStateFetch struct {
	Group    Group
	Token    uint64
	After    []byte
	MaxBytes uint32
}

// GroupStateEntry is one key of the group state and its value.
type GroupStateEntry struct {
	Key, Value []byte
}

// GroupStatePage answers a GroupStateFetch: Applied is the raft index the
// serving replica had stored when it read the page (every entry up to it
// is in the page's state), More that keys follow the last.
type GroupStatePage struct {
	Group   Group
	Token   uint64
	Applied uint64
	More    bool
	Entries []GroupStateEntry
}

// AppendGroupStateFetch appends a Shard frame carrying f:
//
//	token u64 | max bytes u32 | after length u16 | after
func AppendGroupStateFetch(dst []byte, f GroupStateFetch) []byte {
	dst = appendShardHead(dst, shardHead+8+4+2+len(f.After), f.Group, KindGroupStateFetch)
	dst = binary.BigEndian.AppendUint64(dst, f.Token)
	dst = binary.BigEndian.AppendUint32(dst, f.MaxBytes)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.After)))
	return append(dst, f.After...)
}

// AppendGroupStatePage appends a Shard frame carrying p:
//
//	token u64 | applied u64 | more u8 | count u32 |
//	count × (key length u16 | key | value length u32 | value)
func AppendGroupStatePage(dst []byte, p GroupStatePage) []byte {
	n := shardHead + 8 + 8 + 1 + 4
	for _, e := range p.Entries {
		n += 2 + len(e.Key) + 4 + len(e.Value)
	}
	dst = appendShardHead(dst, n, p.Group, KindGroupStatePage)
	dst = binary.BigEndian.AppendUint64(dst, p.Token)
	dst = binary.BigEndian.AppendUint64(dst, p.Applied)
	var more byte
	if p.More {
		more = 1
	}
	dst = append(dst, more)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Entries)))
	for _, e := range p.Entries {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(e.Key)))
		dst = append(dst, e.Key...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Value)))
		dst = append(dst, e.Value...)
	}
	return dst
}

func decodeGroupStateFetch(g Group, b []byte) (ShardMessage, error) {
	if len(b) < 8+4+2 {
		return ShardMessage{}, malformed("group state fetch of %d bytes", len(b))
	}
	f := &GroupStateFetch{Group: g, Token: binary.BigEndian.Uint64(b), MaxBytes: binary.BigEndian.Uint32(b[8:])}
	n := int(binary.BigEndian.Uint16(b[12:]))
	if len(b) != 14+n {
		return ShardMessage{}, malformed("group state fetch of %d bytes, after key of %d", len(b), n)
	}
	f.After = b[14 : 14+n : 14+n]
	return ShardMessage{GroupStateFetch: f}, nil
}

func decodeGroupStatePage(g Group, b []byte) (ShardMessage, error) {
	if len(b) < 8+8+1+4 {
		return ShardMessage{}, malformed("group state page of %d bytes", len(b))
	}
	p := &GroupStatePage{Group: g, Token: binary.BigEndian.Uint64(b), Applied: binary.BigEndian.Uint64(b[8:])}
	switch b[16] {
	case 0:
	case 1:
		p.More = true
	default:
		return ShardMessage{}, malformed("group state page more flag %d", b[16])
	}
	n := binary.BigEndian.Uint32(b[17:])
	b = b[21:]
	if uint64(n)*6 > uint64(len(b)) {
		return ShardMessage{}, malformed("group state page of %d entries in %d bytes", n, len(b))
	}
	p.Entries = make([]GroupStateEntry, 0, n)
	var last []byte
	for i := range n {
		if len(b) < 2 {
			return ShardMessage{}, malformed("group state entry %d cut short", i)
		}
		kl := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+kl+4 {
			return ShardMessage{}, malformed("group state entry %d cut short", i)
		}
		e := GroupStateEntry{Key: b[2 : 2+kl : 2+kl]}
		vl := binary.BigEndian.Uint32(b[2+kl:])
		b = b[2+kl+4:]
		if uint64(vl) > uint64(len(b)) {
			return ShardMessage{}, malformed("group state entry %d of a %d-byte value, %d left", i, vl, len(b))
		}
		e.Value, b = b[:vl:vl], b[vl:]
		if i > 0 && string(e.Key) <= string(last) {
			return ShardMessage{}, malformed("group state entry %d out of key order", i)
		}
		last = e.Key
		p.Entries = append(p.Entries, e)
	}
	if len(b) != 0 {
		return ShardMessage{}, malformed("%d bytes after the last group state entry", len(b))
	}
	return ShardMessage{GroupStatePage: p}, nil
}

// ShardRemoved tells a replica that the sender's configuration, as of the
// sender's applied index Applied, does not hold it.
type ShardRemoved struct {
	Group   Group
	Applied uint64
}

const removedSize = shardHead + 8

// AppendShardRemoved appends a Shard frame carrying r.
func AppendShardRemoved(dst []byte, r ShardRemoved) []byte {
	dst = appendShardHead(dst, removedSize, r.Group, KindRemoved)
	return binary.BigEndian.AppendUint64(dst, r.Applied)
}

// ShardWake tells a replica to start its clock again: the sender's replica
// of the group stopped (its storage failed, say) while its node runs on,
// so its beats no longer say the replica is alive.
type ShardWake struct {
	Group Group
}

// AppendShardWake appends a Shard frame carrying w.
func AppendShardWake(dst []byte, w ShardWake) []byte {
	return appendShardHead(dst, shardHead, w.Group, KindWake)
}

// ShardQuiesce tells a follower its leader quiesced the group at Term and
// Commit.
type ShardQuiesce struct {
	Group        Group
	Term, Commit uint64
}

const quiesceSize = shardHead + 8 + 8

// AppendShardQuiesce appends a Shard frame carrying q.
func AppendShardQuiesce(dst []byte, q ShardQuiesce) []byte {
	dst = appendShardHead(dst, quiesceSize, q.Group, KindQuiesce)
	dst = binary.BigEndian.AppendUint64(dst, q.Term)
	return binary.BigEndian.AppendUint64(dst, q.Commit)
}

// ShardFetch asks a replica for a page of a shard's log.
type ShardFetch struct {
	Group Group
	// Token names the fetch; the page echoes it.
	Token uint64
	// From and To bound the offsets wanted: [From, To).
	From, To uint64
	// MaxBytes bounds the page's records bytes.
	MaxBytes uint32
}

// PageBatch is one batch of a page, as the shard log stores it.
type PageBatch struct {
	Base      uint64
	Count     uint32
	Timestamp int64
	Records   []byte
}

// End is the offset after the batch.
func (b PageBatch) End() uint64 { return b.Base + uint64(b.Count) }

// ShardPage answers a ShardFetch.
type ShardPage struct {
	Group Group
	Token uint64
	// First and Tail are where the serving replica's log starts and ends.
	First, Tail uint64
	Batches     []PageBatch
}

const (
	shardHead     = 8 + 4 + 1
	fetchSize     = shardHead + 8 + 8 + 8 + 4
	pageHead      = shardHead + 8 + 8 + 8 + 4
	pageBatchHead = 8 + 4 + 8 + 4
)

func appendShardHead(dst []byte, body int, g Group, k ShardKind) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(body))
	dst = append(dst, byte(TypeShard), 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, g.Stream)
	dst = binary.BigEndian.AppendUint32(dst, g.Shard)
	return append(dst, byte(k))
}

// AppendShardFetch appends a Shard frame carrying f.
func AppendShardFetch(dst []byte, f ShardFetch) []byte {
	dst = appendShardHead(dst, fetchSize, f.Group, KindShardFetch)
	dst = binary.BigEndian.AppendUint64(dst, f.Token)
	dst = binary.BigEndian.AppendUint64(dst, f.From)
	dst = binary.BigEndian.AppendUint64(dst, f.To)
	return binary.BigEndian.AppendUint32(dst, f.MaxBytes)
}

// ShardPageSize is the body size of a Shard frame carrying p.
func ShardPageSize(p ShardPage) int {
	n := pageHead
	for _, b := range p.Batches {
		n += pageBatchHead + len(b.Records)
	}
	return n
}

// AppendShardPage appends a Shard frame carrying p.
func AppendShardPage(dst []byte, p ShardPage) []byte {
	dst = appendShardHead(dst, ShardPageSize(p), p.Group, KindShardPage)
	dst = binary.BigEndian.AppendUint64(dst, p.Token)
	dst = binary.BigEndian.AppendUint64(dst, p.First)
	dst = binary.BigEndian.AppendUint64(dst, p.Tail)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Batches)))
	for _, b := range p.Batches {
		dst = binary.BigEndian.AppendUint64(dst, b.Base)
		dst = binary.BigEndian.AppendUint32(dst, b.Count)
		dst = binary.BigEndian.AppendUint64(dst, uint64(b.Timestamp))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.Records)))
		dst = append(dst, b.Records...)
	}
	return dst
}

// ShardMessage is a decoded Shard frame: exactly one of Fetch, Page,
// Quiesce, Wake and Removed.
type ShardMessage struct {
	Fetch           *ShardFetch
	Page            *ShardPage
	Quiesce         *ShardQuiesce
	Wake            *ShardWake
	Removed         *ShardRemoved
	GroupStateFetch *GroupStateFetch
	GroupStatePage  *GroupStatePage
}

// Group is the shard the message is for.
func (m ShardMessage) Group() Group {
	switch {
	case m.Fetch != nil:
		return m.Fetch.Group
	case m.Quiesce != nil:
		return m.Quiesce.Group
	case m.Wake != nil:
		return m.Wake.Group
	case m.Removed != nil:
		return m.Removed.Group
	case m.GroupStateFetch != nil:
		return m.GroupStateFetch.Group
	case m.GroupStatePage != nil:
		return m.GroupStatePage.Group
	}
	return m.Page.Group
}

// DecodeShard decodes a Shard body; a page's records share b. Batches must
// be in offset order, each non-empty, and end no later than the next
// begins.
func DecodeShard(b []byte) (ShardMessage, error) {
	if len(b) < shardHead {
		return ShardMessage{}, malformed("shard frame of %d bytes", len(b))
	}
	g := Group{Stream: binary.BigEndian.Uint64(b), Shard: binary.BigEndian.Uint32(b[8:])}
	switch k := ShardKind(b[12]); k {
	case KindShardFetch:
		if len(b) != fetchSize {
			return ShardMessage{}, malformed("shard fetch of %d bytes, want %d", len(b), fetchSize)
		}
		f := &ShardFetch{Group: g, Token: binary.BigEndian.Uint64(b[13:]), From: binary.BigEndian.Uint64(b[21:]),
			To: binary.BigEndian.Uint64(b[29:]), MaxBytes: binary.BigEndian.Uint32(b[37:])}
		if f.To < f.From {
			return ShardMessage{}, malformed("shard fetch of offsets [%d, %d)", f.From, f.To)
		}
		return ShardMessage{Fetch: f}, nil
	case KindQuiesce:
		if len(b) != quiesceSize {
			return ShardMessage{}, malformed("shard quiesce of %d bytes, want %d", len(b), quiesceSize)
		}
		return ShardMessage{Quiesce: &ShardQuiesce{Group: g, Term: binary.BigEndian.Uint64(b[13:]), Commit: binary.BigEndian.Uint64(b[21:])}}, nil
	case KindWake:
		if len(b) != shardHead {
			return ShardMessage{}, malformed("shard wake of %d bytes, want %d", len(b), shardHead)
		}
		return ShardMessage{Wake: &ShardWake{Group: g}}, nil
	case KindRemoved:
		if len(b) != removedSize {
			return ShardMessage{}, malformed("shard removed of %d bytes, want %d", len(b), removedSize)
		}
		return ShardMessage{Removed: &ShardRemoved{Group: g, Applied: binary.BigEndian.Uint64(b[13:])}}, nil
	case KindGroupStateFetch:
		return decodeGroupStateFetch(g, b[shardHead:])
	case KindGroupStatePage:
		return decodeGroupStatePage(g, b[shardHead:])
	case KindShardPage:
		if len(b) < pageHead {
			return ShardMessage{}, malformed("shard page of %d bytes", len(b))
		}
		p := &ShardPage{Group: g, Token: binary.BigEndian.Uint64(b[13:]), First: binary.BigEndian.Uint64(b[21:]),
			Tail: binary.BigEndian.Uint64(b[29:])}
		n := binary.BigEndian.Uint32(b[37:])
		b = b[pageHead:]
		if uint64(n)*pageBatchHead > uint64(len(b)) {
			return ShardMessage{}, malformed("shard page of %d batches in %d bytes", n, len(b))
		}
		if p.First > p.Tail {
			return ShardMessage{}, malformed("shard page of a log from %d to %d", p.First, p.Tail)
		}
		p.Batches = make([]PageBatch, 0, n)
		end := uint64(0)
		for i := range n {
			if len(b) < pageBatchHead {
				return ShardMessage{}, malformed("page batch %d cut short", i)
			}
			pb := PageBatch{Base: binary.BigEndian.Uint64(b), Count: binary.BigEndian.Uint32(b[8:]),
				Timestamp: int64(binary.BigEndian.Uint64(b[12:]))}
			l := binary.BigEndian.Uint32(b[20:])
			b = b[pageBatchHead:]
			if uint64(l) > uint64(len(b)) {
				return ShardMessage{}, malformed("page batch %d of %d bytes, %d left", i, l, len(b))
			}
			if pb.Count == 0 || pb.Base < end || pb.End() < pb.Base || pb.End() > p.Tail {
				return ShardMessage{}, malformed("page batch %d: %d records at %d (after %d, tail %d)", i, pb.Count, pb.Base, end, p.Tail)
			}
			pb.Records, b = b[:l:l], b[l:]
			end = pb.End()
			p.Batches = append(p.Batches, pb)
		}
		if len(b) != 0 {
			return ShardMessage{}, malformed("%d bytes after the last page batch", len(b))
		}
		return ShardMessage{Page: p}, nil
	default:
		return ShardMessage{}, malformed("shard message of kind %d", k)
	}
}
