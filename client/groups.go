package client

import (
	"context"
	"math"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Consumer groups, pull side: GroupPoll claims records of one shard for a
// group, GroupAck and GroupNack settle them, and the dead-letter calls and
// DescribeGroup inspect and repair the group. Each is one request and one
// answer on the control stream. The push side is SubscribeGroup
// (group_subscription.go).

// AllShards, as the shard of GroupDeadLetters (DeadLetterShard),
// GroupRedrive and GroupDiscard, selects every shard of the stream.
const AllShards = wire.AnyShard

// GroupRecord is one record a consumer group delivered: a claim that the
// consumer settles with GroupAck or GroupNack (pull), or by acking its
// Delivery's cursor (push). An unsettled claim is delivered again once the
// group's visibility timeout passes; after the group's maximum of attempts
// the record becomes a dead letter.
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
	// Headers are the record's headers (nil when it has none); a name
	// repeated in the record keeps its last value.
	Headers map[string][]byte
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

// checkGroup checks that the node speaks consumer groups and that name and
// group are valid.
func (c *Client) checkGroup(name StreamName, group string) error {
	if c.s.welcome.Features&wire.FeatureGroups == 0 {
		return errGroupsUnsupported
	}
	if err := name.Validate(); err != nil {
		return err
	}
	return wire.ValidateGroupName("group", group)
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

// GroupPoll claims up to max records of shard for group and returns them
// (an empty slice when there were none). When the shard has nothing to
// deliver, the node waits up to wait (0: not at all; the node caps it) for
// records to arrive. Each claim holds for the group's visibility timeout:
// settle it before then with GroupAck or GroupNack, or it is delivered
// again.
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
func (c *Client) GroupPoll(ctx context.Context, name StreamName, shard uint32, group string, max int, wait time.Duration) ([]GroupRecord, error) {
	if err := c.checkGroup(name, group); err != nil {
		return nil, err
	}
	if max <= 0 || int64(max) > math.MaxUint32 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "poll max %d out of range (1-%d)", max, uint32(math.MaxUint32))
	}
	if wait < 0 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "poll wait %v is negative", wait)
	}
	req := wire.GroupPoll{Name: name, Group: group, Shard: shard, Max: uint32(max), WaitMillis: waitMillis(wait)}
	v, err := c.call(ctx, wire.TypeGroupRecords, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupPoll(dst, id, req)
	})
	if err != nil {
		return nil, err
	}
	g := v.(wire.GroupRecords)
	if len(g.Cursor) != 0 {
		return nil, protocolViolation("poll answered with a cursor")
	}
	if len(g.Records) > max {
		return nil, protocolViolation("poll of at most %d records answered with %d", max, len(g.Records))
	}
	for i := range g.Records {
		if g.Records[i].Shard != shard {
			return nil, protocolViolation("poll of shard %d answered with a record of shard %d", shard, g.Records[i].Shard)
		}
	}
	return groupRecordsOf(g.Records)
}

// GroupAck settles delivered records of shard for group: they are done and
// never delivered again. Acks are idempotent (an offset settled already is
// not an error); an offset the group has not delivered yet fails the whole
// call with ErrNotDelivered, changing nothing. At least one and at most
// 65536 offsets per call.
func (c *Client) GroupAck(ctx context.Context, name StreamName, shard uint32, group string, offsets ...uint64) error {
	return c.groupSettle(ctx, false, name, shard, group, offsets)
}

// GroupNack hands claimed records of shard back to group for immediate
// redelivery (counting an attempt: a record past the group's maximum of
// attempts becomes a dead letter instead). Errors as GroupAck.
func (c *Client) GroupNack(ctx context.Context, name StreamName, shard uint32, group string, offsets ...uint64) error {
	return c.groupSettle(ctx, true, name, shard, group, offsets)
}

// groupSettle sends a GroupAck (nack: GroupNack) and waits for the node's
// GroupDone.
func (c *Client) groupSettle(ctx context.Context, nack bool, name StreamName, shard uint32, group string, offsets []uint64) error {
	if err := c.checkGroup(name, group); err != nil {
		return err
	}
	if len(offsets) == 0 {
		return wire.Errorf(wire.CodeInvalidRequest, "no offsets to settle")
	}
	if err := checkOffsets(offsets); err != nil {
		return err
	}
	req := wire.GroupAck{Name: name, Group: group, Shard: shard, Offsets: offsets}
	_, err := c.call(ctx, wire.TypeGroupDone, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupAck(dst, id, nack, req)
	})
	return err
}

// DeadLetter is the address of a record its group gave up on. The record
// itself stays in the stream's log (until retention removes it): read it
// with Read, give it back to the group with GroupRedrive, or drop the dead
// letter with GroupDiscard.
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

// DeadLetterOption configures GroupDeadLetters.
type DeadLetterOption func(*deadLetterOptions)

// deadLetterOptions is what the DeadLetterOptions set.
type deadLetterOptions struct {
	shard uint32
	from  uint64
	limit uint32
}

// DeadLetterShard lists the dead letters of shard n only (default
// AllShards).
func DeadLetterShard(n uint32) DeadLetterOption { return func(o *deadLetterOptions) { o.shard = n } }

// DeadLetterFrom skips dead letters at offsets below offset (default 0).
// To page through one shard, list from the last offset returned plus one.
func DeadLetterFrom(offset uint64) DeadLetterOption {
	return func(o *deadLetterOptions) { o.from = offset }
}

// DeadLetterLimit returns at most n dead letters (n <= 0: the node's cap).
func DeadLetterLimit(n int) DeadLetterOption {
	return func(o *deadLetterOptions) { o.limit = clampUint32(n) }
}

// GroupDeadLetters lists group's dead letters on name, ordered by shard then
// offset: of every shard unless DeadLetterShard says one, from
// DeadLetterFrom, at most DeadLetterLimit (or the node's cap). more reports
// that the limit left some out. A group never used fails with
// ErrGroupNotFound.
func (c *Client) GroupDeadLetters(ctx context.Context, name StreamName, group string, opts ...DeadLetterOption) (letters []DeadLetter, more bool, err error) {
	if err := c.checkGroup(name, group); err != nil {
		return nil, false, err
	}
	o := deadLetterOptions{shard: AllShards}
	for _, opt := range opts {
		opt(&o)
	}
	req := wire.GroupDeadLetters{Name: name, Group: group, Shard: o.shard, From: o.from, Limit: o.limit}
	v, err := c.call(ctx, wire.TypeGroupDeadList, func(dst []byte, id uint64) []byte {
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

// GroupRedrive gives dead letters of group back to it, to be delivered
// again with fresh attempts: the listed offsets of shard, or with no
// offsets every dead letter of shard (shard AllShards: of every shard). It
// returns how many records were redriven. Offsets with AllShards fail with
// ErrInvalidRequest; at most 65536 offsets per call.
func (c *Client) GroupRedrive(ctx context.Context, name StreamName, group string, shard uint32, offsets ...uint64) (int, error) {
	return c.groupSelect(ctx, false, name, group, shard, offsets)
}

// GroupDiscard drops dead letters of group for good (the records stay in
// the stream's log): the listed offsets of shard, or with NO offsets EVERY
// dead letter of shard (shard AllShards: of every shard). It returns how
// many dead letters were dropped. Errors as GroupRedrive.
func (c *Client) GroupDiscard(ctx context.Context, name StreamName, group string, shard uint32, offsets ...uint64) (int, error) {
	return c.groupSelect(ctx, true, name, group, shard, offsets)
}

// groupSelect sends a GroupRedrive (discard: GroupDiscard).
func (c *Client) groupSelect(ctx context.Context, discard bool, name StreamName, group string, shard uint32, offsets []uint64) (int, error) {
	if err := c.checkGroup(name, group); err != nil {
		return 0, err
	}
	if shard == AllShards && len(offsets) > 0 {
		return 0, wire.Errorf(wire.CodeInvalidRequest, "offsets need a shard, not AllShards")
	}
	if err := checkOffsets(offsets); err != nil {
		return 0, err
	}
	req := wire.GroupSelect{Name: name, Group: group, Shard: shard, Offsets: offsets}
	v, err := c.call(ctx, wire.TypeGroupDone, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupSelect(dst, id, discard, req)
	})
	if err != nil {
		return 0, err
	}
	return int(min(v.(uint64), math.MaxInt)), nil
}

// GroupInfo is a consumer group's state on a stream (DescribeGroup).
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
	// Members are the push members (GroupSubscriptions) of the group.
	Members []GroupMemberInfo
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

// DescribeGroup returns group's state on name: its settings, each shard's
// cursors and counts, and its push members. A group never used fails with
// ErrGroupNotFound.
func (c *Client) DescribeGroup(ctx context.Context, name StreamName, group string) (GroupInfo, error) {
	if err := c.checkGroup(name, group); err != nil {
		return GroupInfo{}, err
	}
	req := wire.DescribeGroup{Name: name, Group: group}
	v, err := c.call(ctx, wire.TypeGroupInfo, func(dst []byte, id uint64) []byte {
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
