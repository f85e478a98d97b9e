package client

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Consumer groups. Every group call goes through a *Group, the handle of
// one group on one stream (Client.Group): Poll claims records of one shard,
// Ack and Nack settle them, DeadLetters, Redrive and Discard inspect and
// repair the dead letters, Describe shows the group, and Subscribe joins it
// as a push member (group_subscription.go). A call that concerns one shard
// takes it first, after ctx. Each pull-side call is one request and one
// answer on the control stream (Ack and Nack: one per shard), but that Acks
// of one group issued while earlier ones are on their way go together in one
// request, each answered on its own (groups_acks.go).

// AllShards, as the shard of Group.DeadLetters, Group.Redrive and
// Group.Discard, selects every shard of the stream.
const AllShards = wire.AnyShard

// Group is the handle of one consumer group on one stream, made by
// Client.Group. It holds no state of its own and sends nothing until a
// method is called; its methods are safe for concurrent use, and any number
// of handles of one group may be used at once.
type Group struct {
	c *Client
	// stream is the group's stream, name its name; each call checks them.
	stream StreamName
	name   string
}

// Group returns the handle of consumer group group on stream. It is cheap
// and checks nothing: each of its calls fails with ErrInvalidStreamName or
// ErrInvalidRequest (a bad group name, or a node without consumer groups)
// before anything is sent.
func (c *Client) Group(stream StreamName, group string) *Group {
	return &Group{c: c, stream: stream, name: group}
}

// Stream returns the group's stream.
func (g *Group) Stream() StreamName { return g.stream }

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// GroupRecord is one record a consumer group delivered: a claim that the
// consumer settles with Group.Ack or Group.Nack (pull), or by acking its
// Delivery (push, GroupMember.Ack). An unsettled claim is delivered again
// once the group's visibility timeout passes; after the group's maximum of
// attempts the record becomes a dead letter.
type GroupRecord struct {
	// Shard is the record's shard.
	Shard uint32
	// Offset is the record's offset in its shard.
	Offset uint64
	// Attempts is how many times the group has delivered the record, this
	// delivery included (1 on the first delivery).
	Attempts uint32
	// Timestamp is when the node committed the record's batch.
	Timestamp time.Time
	// Key is the record's key (nil when it has none).
	Key []byte
	// Headers are the record's headers, in the order they were published
	// (nil when it has none).
	Headers Headers
	// Payload is the record's payload.
	Payload []byte
}

// groupRecordOf decodes the one record of r.
func groupRecordOf(r *wire.GroupRecord) (GroupRecord, error) {
	var rec wire.Record
	it := wire.NewRecordIter(r.Record)
	if !it.Next(&rec) {
		if err := it.Err(); err != nil {
			return GroupRecord{}, err
		}
		return GroupRecord{}, wire.Errorf(wire.CodeMalformedFrame, "group record %d/%d holds no record", r.Shard, r.Offset)
	}
	ev := eventOf(&wire.BatchView{Shard: r.Shard, Timestamp: r.Timestamp}, r.Offset, &rec)
	return GroupRecord{Shard: ev.Shard, Offset: ev.Offset, Attempts: r.Attempts, Timestamp: ev.Timestamp,
		Key: ev.Key, Headers: ev.Headers, Payload: ev.Payload}, nil
}

// groupRecordsOf decodes every record of rs.
func groupRecordsOf(rs []wire.GroupRecord) ([]GroupRecord, error) {
	out := make([]GroupRecord, len(rs))
	for i := range rs {
		r, err := groupRecordOf(&rs[i])
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// errGroupsUnsupported is returned by the group calls when the node's
// Welcome lacks FeatureGroups.
var errGroupsUnsupported = wire.Errorf(wire.CodeInvalidRequest, "the node does not support consumer groups (no FeatureGroups in its welcome)")

// check checks that the node speaks consumer groups and that the group's
// stream and name are valid.
func (g *Group) check() error {
	if g.c.session().welcome.Features&wire.FeatureGroups == 0 {
		return errGroupsUnsupported
	}
	if err := g.stream.Validate(); err != nil {
		return err
	}
	return wire.ValidateGroupName("group", g.name)
}

// checkOffsets checks the offsets of one ack, nack, redrive or discard.
func checkOffsets(offsets []uint64) error {
	if len(offsets) > wire.MaxGroupAckOffsets {
		return wire.Errorf(wire.CodeInvalidRequest, "%d offsets, at most %d per request", len(offsets), wire.MaxGroupAckOffsets)
	}
	return nil
}

// waitMillis converts a poll's wait to whole milliseconds, rounding a
// positive wait up so that it never becomes 0 (no wait), and clamping.
func waitMillis(d time.Duration) uint32 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(ms)
}

// Poll claims up to max records of shard for the group and returns them
// (an empty slice when there were none). When the shard has nothing to
// deliver, the node waits up to wait (0: not at all; the node caps it) for
// records to arrive. Each claim holds for the group's visibility timeout:
// settle it before then with Ack or Nack, or it is delivered again.
//
// Give ctx more time than wait: a poll whose ctx ends before the node
// answers returns ctx's error, and whatever the node claimed for it is
// delivered again only after the visibility timeout. A poll that waits does
// not hold up this client's other calls.
//
// Errors: ErrStreamNotFound, ErrInvalidShard, ErrStreamNotDurable (groups
// need a durable stream), ErrTooManyClaims (retry after some claims are
// settled), ErrInvalidRequest for max <= 0, a negative wait, a bad group
// name or a node without consumer groups.
func (g *Group) Poll(ctx context.Context, shard uint32, max int, wait time.Duration) ([]GroupRecord, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	if max <= 0 || int64(max) > math.MaxUint32 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "poll max %d out of range (1-%d)", max, uint32(math.MaxUint32))
	}
	if wait < 0 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "poll wait %v is negative", wait)
	}
	req := wire.GroupPoll{Name: g.stream, Group: g.name, Shard: shard, Max: uint32(max), WaitMillis: waitMillis(wait)}
	v, err := g.c.groupCall(ctx, wire.TypeGroupRecords, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupPoll(dst, id, req)
	})
	if err != nil {
		return nil, err
	}
	recs := v.(wire.GroupRecords)
	if len(recs.Cursor) != 0 {
		return nil, protocolViolation("poll answered with a cursor")
	}
	if len(recs.Records) > max {
		return nil, protocolViolation("poll of at most %d records answered with %d", max, len(recs.Records))
	}
	for i := range recs.Records {
		if recs.Records[i].Shard != shard {
			return nil, protocolViolation("poll of shard %d answered with a record of shard %d", shard, recs.Records[i].Shard)
		}
	}
	return groupRecordsOf(recs.Records)
}

// Ack settles delivered records: they are done and never delivered again.
// It returns how many of them the node settled; a record settled already
// (acked by another consumer, dead-lettered or discarded) is not counted and
// is not an error, since acks are idempotent. An offset the group has not
// delivered yet fails its shard's request with ErrNotDelivered, changing
// nothing on that shard.
//
// Records of several shards are settled with one request per shard, in the
// order their shards first appear in recs; a failure stops there and Ack
// returns the count the shards answered before it, with the error. At least
// one record, and at most 65536 of one shard, per call (ErrInvalidRequest
// before anything is sent).
func (g *Group) Ack(ctx context.Context, recs ...GroupRecord) (int, error) {
	return g.settleRecords(ctx, false, recs)
}

// Nack hands claimed records back to the group for immediate redelivery,
// counting an attempt (a record past the group's maximum of attempts
// becomes a dead letter instead). It returns how many of them the node
// handed back: a record not claimed at the time (settled already, or
// waiting to be delivered again) is not counted. Requests and errors as
// Ack.
func (g *Group) Nack(ctx context.Context, recs ...GroupRecord) (int, error) {
	return g.settleRecords(ctx, true, recs)
}

// AckOffsets is Ack of the records at offsets of shard, one request: for a
// consumer that kept the offsets rather than the records. It returns how
// many the node settled. Errors as Ack; at least one and at most 65536
// offsets.
func (g *Group) AckOffsets(ctx context.Context, shard uint32, offsets ...uint64) (int, error) {
	return g.settleOffsets(ctx, false, shard, offsets)
}

// NackOffsets is Nack of the records at offsets of shard, one request. It
// returns how many the node handed back. Errors as AckOffsets.
func (g *Group) NackOffsets(ctx context.Context, shard uint32, offsets ...uint64) (int, error) {
	return g.settleOffsets(ctx, true, shard, offsets)
}

// shardOffsets are the offsets of one shard that one settle request names.
type shardOffsets struct {
	shard   uint32
	offsets []uint64
}

// settleRecords settles recs with one request per shard, in the order their
// shards first appear, and sums the node's counts.
func (g *Group) settleRecords(ctx context.Context, nack bool, recs []GroupRecord) (int, error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, wire.Errorf(wire.CodeInvalidRequest, "no records to settle")
	}
	byShard, err := offsetsByShard(recs)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, s := range byShard {
		n, err := g.settle(ctx, nack, s.shard, s.offsets)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// offsetsByShard groups the offsets of recs by shard, in the order their
// shards first appear, and checks each group's size.
func offsetsByShard(recs []GroupRecord) ([]shardOffsets, error) {
	var byShard []shardOffsets
	for _, r := range recs {
		i := len(byShard) - 1
		if i < 0 || byShard[i].shard != r.Shard {
			i = slices.IndexFunc(byShard, func(s shardOffsets) bool { return s.shard == r.Shard })
		}
		if i < 0 {
			i = len(byShard)
			byShard = append(byShard, shardOffsets{shard: r.Shard})
		}
		byShard[i].offsets = append(byShard[i].offsets, r.Offset)
	}
	for _, s := range byShard {
		if err := checkOffsets(s.offsets); err != nil {
			return nil, err
		}
	}
	return byShard, nil
}

// settleOffsets checks and sends one settle request.
func (g *Group) settleOffsets(ctx context.Context, nack bool, shard uint32, offsets []uint64) (int, error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	if len(offsets) == 0 {
		return 0, wire.Errorf(wire.CodeInvalidRequest, "no offsets to settle")
	}
	if err := checkOffsets(offsets); err != nil {
		return 0, err
	}
	return g.settle(ctx, nack, shard, offsets)
}

// settle settles checked offsets and returns how many the node settled:
// an ack through the group's ack coalescer (groups_acks.go), which sends it
// at once or with the acks that queue beside it; a nack, or an ack to a
// node without FeatureGroupAcks, on its own.
func (g *Group) settle(ctx context.Context, nack bool, shard uint32, offsets []uint64) (int, error) {
	if nack || g.c.session().welcome.Features&wire.FeatureGroupAcks == 0 {
		return g.sendSettle(ctx, nack, shard, offsets)
	}
	return g.c.groupAcks.ack(ctx, g, shard, offsets)
}

// sendSettle sends a GroupAck (nack: GroupNack) of checked offsets and
// returns the count of the node's GroupDone.
func (g *Group) sendSettle(ctx context.Context, nack bool, shard uint32, offsets []uint64) (int, error) {
	req := wire.GroupAck{Name: g.stream, Group: g.name, Shard: shard, Offsets: offsets}
	v, err := g.c.groupCall(ctx, wire.TypeGroupDone, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupAck(dst, id, nack, req)
	})
	if err != nil {
		return 0, err
	}
	return doneCount(v), nil
}

// doneCount returns the count of a GroupDone answer (or of a GroupAcksDone
// outcome) as an int.
func doneCount(v any) int { return int(min(v.(uint64), math.MaxInt)) }

// DeadLetter is the address of a record its group gave up on. The record
// itself stays in the stream's log (until retention removes it): read it
// with Client.Read, give it back to the group with Group.Redrive, or drop
// the dead letter with Group.Discard.
type DeadLetter struct {
	// Shard and Offset locate the record.
	Shard  uint32
	Offset uint64
	// Attempts is how many times the group delivered it.
	Attempts uint32
	// DeadAt is when the group gave up on it.
	DeadAt time.Time
	// Reason says why (for example the attempts ran out).
	Reason string
}

// DeadLetters lists one page of the group's dead letters of shard (AllShards:
// of every shard), ordered by shard then offset, skipping those at offsets
// below from (on every shard listed), at most limit of them (limit <= 0: the
// node's cap). more reports that the page left some out: to go on, list the
// last one's shard from its offset plus one. A group never used fails with
// ErrGroupNotFound.
func (g *Group) DeadLetters(ctx context.Context, shard uint32, from uint64, limit int) (letters []DeadLetter, more bool, err error) {
	if err := g.check(); err != nil {
		return nil, false, err
	}
	req := wire.GroupDeadLetters{Name: g.stream, Group: g.name, Shard: shard, From: from, Limit: clampUint32(limit)}
	v, err := g.c.groupCall(ctx, wire.TypeGroupDeadList, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupDeadLetters(dst, id, req)
	})
	if err != nil {
		return nil, false, err
	}
	l := v.(wire.GroupDeadList)
	letters = make([]DeadLetter, len(l.Letters))
	for i, d := range l.Letters {
		letters[i] = DeadLetter{Shard: d.Shard, Offset: d.Offset, Attempts: d.Attempts, DeadAt: time.Unix(0, d.DeadUnixNano), Reason: d.Reason}
	}
	return letters, l.More, nil
}

// Redrive gives dead letters back to the group, to be delivered again with
// fresh attempts: the listed offsets of shard, or with no offsets every dead
// letter of shard (shard AllShards: of every shard). It returns how many
// records the node redrove; an offset that is no dead letter is not counted.
// Offsets with AllShards fail with ErrInvalidRequest; at most 65536 offsets
// per call.
func (g *Group) Redrive(ctx context.Context, shard uint32, offsets ...uint64) (int, error) {
	return g.selectDead(ctx, false, shard, offsets)
}

// Discard drops dead letters of the group for good (the records stay in
// the stream's log): the listed offsets of shard, or with NO offsets EVERY
// dead letter of shard (shard AllShards: of every shard). It returns how
// many dead letters the node dropped. Errors as Redrive.
func (g *Group) Discard(ctx context.Context, shard uint32, offsets ...uint64) (int, error) {
	return g.selectDead(ctx, true, shard, offsets)
}

// selectDead sends a GroupRedrive (discard: GroupDiscard).
func (g *Group) selectDead(ctx context.Context, discard bool, shard uint32, offsets []uint64) (int, error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	if shard == AllShards && len(offsets) > 0 {
		return 0, wire.Errorf(wire.CodeInvalidRequest, "offsets need a shard, not AllShards")
	}
	if err := checkOffsets(offsets); err != nil {
		return 0, err
	}
	req := wire.GroupSelect{Name: g.stream, Group: g.name, Shard: shard, Offsets: offsets}
	v, err := g.c.groupCall(ctx, wire.TypeGroupDone, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupSelect(dst, id, discard, req)
	})
	if err != nil {
		return 0, err
	}
	return doneCount(v), nil
}

// GroupInfo is a consumer group's state on a stream (Group.Describe).
type GroupInfo struct {
	// Group is the group's name.
	Group string
	// Generation counts the group's membership changes.
	Generation uint64
	// Visibility is how long a claim holds before its record is delivered
	// again.
	Visibility time.Duration
	// Session is how long a push member may stay silent (no ack, no
	// heartbeat) before the node removes it.
	Session time.Duration
	// MaxAttempts is how many deliveries a record gets before it becomes a
	// dead letter.
	MaxAttempts uint32
	// Shards holds each shard's cursors and counts.
	Shards []GroupShardInfo
	// Members are the push members (GroupMembers) of the group.
	Members []GroupMemberInfo
}

// Lag is the group's lag summed over the stream's shards.
func (g GroupInfo) Lag() uint64 {
	var n uint64
	for _, s := range g.Shards {
		n += s.Lag()
	}
	return n
}

// GroupShardInfo is one shard's state in a group.
type GroupShardInfo struct {
	// Shard is the shard.
	Shard uint32
	// Committed: every offset below it is settled (acked, dead-lettered or
	// discarded).
	Committed uint64
	// Delivered is the first offset the group never delivered.
	Delivered uint64
	// Tail is the shard's committed tail: Tail - Committed is the group's
	// backlog on the shard, at most.
	Tail uint64
	// Claims is how many of the shard's records consumers hold now.
	Claims uint32
	// Owed is how many unsettled records wait to be delivered again
	// (nacked, or their claim expired).
	Owed uint32
	// DeadLetters is how many of the shard's records are dead letters.
	DeadLetters uint32
}

// Lag is Tail - Committed: the records of the shard the group has not
// settled past (as herald_group_lag counts them). It follows the tail
// whether or not anyone consumes.
func (s GroupShardInfo) Lag() uint64 {
	if s.Tail > s.Committed {
		return s.Tail - s.Committed
	}
	return 0
}

// GroupMemberInfo is one push member of a group.
type GroupMemberInfo struct {
	// ID is the member's id.
	ID string
	// Shards are the shards assigned to it.
	Shards []uint32
	// Window is its credit window, in records.
	Window uint32
	// InFlight is how many delivered records it has not acked.
	InFlight uint32
	// Idle is how long since the node last heard from it.
	Idle time.Duration
}

// Describe returns the group's state: its settings, each shard's cursors
// and counts, and its push members. A group never used fails with
// ErrGroupNotFound.
func (g *Group) Describe(ctx context.Context) (GroupInfo, error) {
	if err := g.check(); err != nil {
		return GroupInfo{}, err
	}
	req := wire.DescribeGroup{Name: g.stream, Group: g.name}
	v, err := g.c.groupCall(ctx, wire.TypeGroupInfo, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendDescribeGroup(dst, id, req)
	})
	if err != nil {
		return GroupInfo{}, err
	}
	return groupInfoFromWire(v.(wire.GroupInfo)), nil
}

func groupInfoFromWire(g wire.GroupInfo) GroupInfo {
	info := GroupInfo{
		Group:       g.Group,
		Generation:  g.Generation,
		Visibility:  millis(g.VisibilityMillis),
		Session:     millis(g.SessionMillis),
		MaxAttempts: g.MaxAttempts,
		Shards:      make([]GroupShardInfo, len(g.Shards)),
		Members:     make([]GroupMemberInfo, len(g.Members)),
	}
	for i, s := range g.Shards {
		info.Shards[i] = GroupShardInfo(s)
	}
	for i, m := range g.Members {
		info.Members[i] = GroupMemberInfo{ID: m.ID, Shards: m.Shards, Window: m.Window, InFlight: m.InFlight, Idle: millis(m.IdleMillis)}
	}
	return info
}

// millis converts a wire duration in milliseconds.
func millis(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }
