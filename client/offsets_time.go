package client

import (
	"context"
	"maps"
	"math"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Offsets for a time (the node's offsets_for_time feature): where each
// shard's records from a moment on begin (Client.OffsetsForTime), and a
// subscription that starts there (WithStartTime).
//
// Every record of a batch carries the batch's timestamp: when the shard
// accepted it, by the node's clock. The node answers from its batch index,
// reading no record: the first batch in offset order stamped at or after
// the time (a batch stamped earlier than one before it, after the clock
// stepped back, does not move the answer back). A time before everything
// retained answers the shard's first retained offset; a time after its last
// committed batch (in the future, say) answers its committed tail, so a
// subscription there gets only what is published from then on, as Kafka's
// ListOffsets answers the log end for a time past the last record.

// startAtTime is the start kind WithStartTime sets: not a kind on the wire,
// Subscribe resolves it to an offset per shard before subscribing.
const startAtTime wire.StartKind = 0xff

// Bounds of the times an int64 of Unix nanoseconds holds (the years 1677
// to 2262); times outside are clamped to them (unixNanoOf).
var (
	minUnixNanoTime = time.Unix(0, math.MinInt64)
	maxUnixNanoTime = time.Unix(0, math.MaxInt64)
)

// unixNanoOf returns t in Unix nanoseconds, clamped to what an int64
// holds: a time before 1678 (the zero time.Time, for one) is before every
// record, a time after 2262 after every record.
func unixNanoOf(t time.Time) int64 {
	switch {
	case t.Before(minUnixNanoTime):
		return math.MinInt64
	case t.After(maxUnixNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// requireFeature returns an *UnsupportedError unless the node announced
// feature bit (named feature in the protocol; what says what it provides).
func (c *Client) requireFeature(bit uint64, feature, what string) error {
	if c.session().welcome.Features&bit == 0 {
		return &UnsupportedError{Feature: feature, What: what}
	}
	return nil
}

// OffsetsForTime returns, for every shard of name, the first offset whose
// record the node committed at or after t: where a subscription that is to
// see the records from t on starts. Pass the map to WithStartOffsets, or
// subscribe with WithStartTime, which asks for it itself.
//
// A shard with nothing committed at or after t (t is in the future, or
// after the shard's last record) answers its committed tail, the offset its
// next record will get; a t before everything the shard retains answers its
// first retained offset. So every answer is an offset a subscription may
// start at. Any t is accepted: the zero time.Time is before every record.
// The answer says where the records were when the node answered: retention
// may delete the first of them before a subscription gets there (Subscribe
// then fails with an *OffsetOutOfRangeError).
//
// It works on durable and ephemeral streams, needs the subscribe or consume
// permission, and is a request and an answer on the control stream. Errors:
// ErrInvalidStreamName, ErrStreamNotFound, ErrPermissionDenied, and an
// *UnsupportedError from a node without the offsets_for_time feature.
func (c *Client) OffsetsForTime(ctx context.Context, name StreamName, t time.Time) (map[uint32]uint64, error) {
	return c.offsetsForTime(ctx, name, AllShards, t)
}

// offsetsForTime asks the node for the offsets at t of shard (AllShards:
// of every shard) and checks the answer names what was asked.
func (c *Client) offsetsForTime(ctx context.Context, name StreamName, shard uint32, t time.Time) (map[uint32]uint64, error) {
	if err := name.Validate(); err != nil {
		return nil, err
	}
	if err := c.requireFeature(wire.FeatureOffsetsForTime, "offsets_for_time", "offsets for a time"); err != nil {
		return nil, err
	}
	req := wire.OffsetsForTime{Name: name, Shard: shard, UnixNano: unixNanoOf(t)}
	v, err := c.call(ctx, wire.TypeShardOffsets, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendOffsetsForTime(dst, id, req)
	})
	if err != nil {
		return nil, err
	}
	return shardOffsetsOf(v.([]wire.ShardOffset), shard, "offsets for a time")
}

// shardOffsetsOf turns a ShardOffsets answer to a request about shard
// (AllShards: every shard) into a map, refusing one that names another
// shard or a shard twice (what names the request, for the error).
func shardOffsetsOf(offs []wire.ShardOffset, shard uint32, what string) (map[uint32]uint64, error) {
	if shard != AllShards && (len(offs) != 1 || offs[0].Shard != shard) {
		return nil, protocolViolation("%s of shard %d answered with %d shards", what, shard, len(offs))
	}
	out := make(map[uint32]uint64, len(offs))
	for _, o := range offs {
		if _, dup := out[o.Shard]; dup {
			return nil, protocolViolation("%s answered shard %d twice", what, o.Shard)
		}
		out[o.Shard] = o.Offset
	}
	return out, nil
}

// WithStartTime starts every subscribed shard at its first record
// committed at or after t: Subscribe asks the node where that is
// (OffsetsForTime) and subscribes each shard from there, as
// WithStartOffsets would. A shard with nothing committed at or after t (t
// in the future, say) starts at its tail: only records published from then
// on. Any t is accepted; the zero time.Time is before every record.
//
// Shards in a WithStartOffsets map start at their offsets instead, so
// WithStartTime(t) with WithStartOffsets(m) resumes the shards the
// application knows and starts any other at t. Of WithStartEarliest,
// WithStartLatest, WithStartOffset and WithStartTime, the last one given
// wins.
//
// The time is resolved once, by Subscribe. After a lost connection the
// subscription resumes each shard one past the last record it received,
// as every subscription does, not at t again.
//
// Subscribe then also fails as OffsetsForTime does: a stream that does not
// exist is ErrStreamNotFound (it is not created, even by a node that
// auto-creates streams), and a node without the offsets_for_time feature
// gives an *UnsupportedError.
func WithStartTime(t time.Time) SubscribeOption {
	return func(o *subscribeOptions) { o.start, o.offset, o.startTime = startAtTime, 0, t }
}

// resolveStartTime turns WithStartTime into a start offset for each of
// shards: those of o.offsets keep theirs, the others get the node's answer
// for o.startTime. A shard the answer leaves out (the stream changed
// meanwhile) starts at its tail, as a shard with nothing that recent does.
func (c *Client) resolveStartTime(ctx context.Context, name StreamName, o *subscribeOptions, shards []uint32) error {
	offsets := maps.Clone(o.offsets) // the option's map is not ours
	if offsets == nil {
		offsets = make(map[uint32]uint64, len(shards))
	}
	o.start, o.offset, o.offsets = wire.StartLatest, 0, offsets
	var missing bool
	for _, n := range shards {
		if _, ok := offsets[n]; !ok {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	ask := AllShards
	if o.oneShard {
		ask = o.shard
	}
	at, err := c.offsetsForTime(ctx, name, ask, o.startTime)
	if err != nil {
		return err
	}
	for _, n := range shards {
		if _, ok := offsets[n]; ok {
			continue
		}
		if off, ok := at[n]; ok {
			offsets[n] = off
		}
	}
	return nil
}
