package client

import (
	"context"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Consumer-group administration (the node's group_admin feature): list a
// stream's groups (Client.ListGroups), move a group's committed position
// (Group.Seek) and delete a group (Group.Delete). Each is a request and an
// answer on the control stream; docs/groups.md says what the node does.

// GroupSummary is one consumer group of a stream, as Client.ListGroups
// lists it.
type GroupSummary struct {
	// Group is the group's name.
	Group string
	// Members is how many push members (GroupMembers) the group has.
	Members uint32
	// Lag is the records between the group's committed position and the
	// shards' committed tails, summed over shards (GroupInfo.Lag; the
	// herald_group_lag figure).
	Lag uint64
}

// ListGroups returns the consumer groups of stream, in name order, each
// with its push members and lag as its coordinator last published them (a
// group whose state the node is still loading shows 0). A stream with no
// groups gives an empty slice. Needs the consume or manage permission.
// Errors: ErrInvalidStreamName, ErrStreamNotFound, ErrStreamNotDurable
// (groups need a durable stream), ErrPermissionDenied, and an
// *UnsupportedError from a node without the group_admin feature.
func (c *Client) ListGroups(ctx context.Context, stream StreamName) ([]GroupSummary, error) {
	if err := stream.Validate(); err != nil {
		return nil, err
	}
	if err := c.requireGroupAdmin(); err != nil {
		return nil, err
	}
	v, err := c.groupCall(ctx, wire.TypeGroupList, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendListGroups(dst, id, stream)
	})
	if err != nil {
		return nil, err
	}
	list := v.([]wire.GroupSummary)
	out := make([]GroupSummary, len(list))
	for i, g := range list {
		out[i] = GroupSummary(g)
	}
	return out, nil
}

// requireGroupAdmin fails with an *UnsupportedError unless the node
// announced consumer groups and their administration.
func (c *Client) requireGroupAdmin() error {
	if err := c.requireFeature(wire.FeatureGroups, "groups", "consumer groups"); err != nil {
		return err
	}
	return c.requireFeature(wire.FeatureGroupAdmin, "group_admin", "listing, seeking and deleting consumer groups")
}

// checkAdmin checks the group's stream and name and that the node
// administers groups.
func (g *Group) checkAdmin() error {
	if err := g.stream.Validate(); err != nil {
		return err
	}
	if err := wire.ValidateGroupName("group", g.name); err != nil {
		return err
	}
	return g.c.requireGroupAdmin()
}

// Delete deletes the group and all its state: cursors, settled markers,
// attempts, dead letters, generation. It returns once the deletion is
// durable. Polls waiting for the group's records are answered
// ErrGroupNotFound and claims held by pull consumers are dropped; the next
// Poll or Subscribe of the name starts a new group at the stream's first
// retained record. Needs the manage permission.
//
// Errors: ErrGroupInUse while the group has push members (Close them
// first), ErrGroupNotFound for a group never used (or deleted already),
// ErrStreamNotFound, ErrStreamNotDurable, ErrPermissionDenied,
// ErrInvalidStreamName or ErrInvalidRequest (a bad group name), and an
// *UnsupportedError from a node without the group_admin feature. If the
// connection is lost before the node answers, the error matches
// ErrOutcomeUnknown: Describe the group to see whether it is gone (a
// Delete sent again then answers ErrGroupNotFound if the first landed).
func (g *Group) Delete(ctx context.Context) error {
	if err := g.checkAdmin(); err != nil {
		return err
	}
	req := wire.DeleteGroup{Name: g.stream, Group: g.name}
	_, err := g.c.groupCall(ctx, wire.TypeOK, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendDeleteGroup(dst, id, req)
	})
	return err
}

// SeekTarget is where Group.Seek moves a group: made by SeekToOffset,
// SeekToTime, SeekToEarliest or SeekToLatest. The zero SeekTarget is
// SeekToEarliest().
type SeekTarget struct {
	// kind is the wire's seek kind; offset is the position with
	// wire.SeekToOffset, at the time with wire.SeekToTime.
	kind   wire.SeekKind
	offset uint64
	at     time.Time
}

// SeekToOffset moves each shard sought to offset, clamped to what the
// shard retains: an offset below its first retained record is that record,
// one past its tail is its tail.
func SeekToOffset(offset uint64) SeekTarget {
	return SeekTarget{kind: wire.SeekToOffset, offset: offset}
}

// SeekToTime moves each shard sought to its first offset committed at or
// after t, where OffsetsForTime says: its first retained offset for a t
// before everything it retains, its tail for a t after its last record.
func SeekToTime(t time.Time) SeekTarget { return SeekTarget{kind: wire.SeekToTime, at: t} }

// SeekToEarliest moves each shard sought to its first retained record:
// the group consumes the whole retained log again.
func SeekToEarliest() SeekTarget { return SeekToOffset(0) }

// SeekToLatest moves each shard sought to its tail: the group skips its
// backlog and consumes only records published from then on.
func SeekToLatest() SeekTarget { return SeekToOffset(wire.NoEnd) }

// Seek sets the group's committed position on shard (AllShards: on every
// shard) to the target and returns each sought shard's new position, once
// it is durable. At position P everything below P counts as settled and
// everything from P on as never delivered: it is delivered again, attempts
// counted from 1. Owed records are forgotten; dead letters below P stay,
// those at or after P are dropped (their records come again). A group
// never used is created at the position, so a group can be placed before
// its first consumer starts. Needs the consume permission.
//
// Errors: ErrGroupInUse while the group has push members, or while a
// shard it moves has records claimed, being polled or being acked (let the
// claims settle, or move only the other shards); ErrInvalidShard,
// ErrStreamNotFound, ErrStreamNotDurable, ErrQuotaExceeded (a new group
// past the stream's maximum), ErrPermissionDenied, ErrInvalidStreamName or
// ErrInvalidRequest (a bad group name), and an *UnsupportedError from a
// node without the group_admin feature. If the connection is lost before
// the node answers, the error matches ErrOutcomeUnknown; seeking again to
// the same offset or time moves the group to the same place, provided
// nothing consumed it since (SeekToLatest moves it to the tail as it is
// then).
func (g *Group) Seek(ctx context.Context, shard uint32, to SeekTarget) (map[uint32]uint64, error) {
	if err := g.checkAdmin(); err != nil {
		return nil, err
	}
	req := wire.GroupSeek{Name: g.stream, Group: g.name, Shard: shard, To: to.kind, Offset: to.offset}
	if to.kind == wire.SeekToTime {
		req.UnixNano = unixNanoOf(to.at)
	}
	v, err := g.c.groupCall(ctx, wire.TypeShardOffsets, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupSeek(dst, id, req)
	})
	if err != nil {
		return nil, err
	}
	return shardOffsetsOf(v.([]wire.ShardOffset), shard, "group seek")
}
