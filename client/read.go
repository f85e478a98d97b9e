package client

import (
	"context"
	"math"

	"github.com/heraldmq/herald/net/wire"
)

// ReadToTail as Read's end reads up to the shard's committed tail.
const ReadToTail = wire.NoEnd

// ReadOption configures Read.
type ReadOption func(*readOptions)

// readOptions is what the ReadOptions set.
type readOptions struct {
	maxRecords uint32
	maxBytes   uint32
}

// WithMaxRecords caps the page at n records (n <= 0: the node's cap).
func WithMaxRecords(n int) ReadOption {
	return func(o *readOptions) { o.maxRecords = clampUint32(n) }
}

// WithMaxBytes caps the page at about n record bytes (n <= 0: the node's
// cap). The node returns whole batches, so a page may hold somewhat more.
func WithMaxBytes(n int) ReadOption {
	return func(o *readOptions) { o.maxBytes = clampUint32(n) }
}

func clampUint32(n int) uint32 {
	switch {
	case n <= 0:
		return 0
	case int64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

// ReadPage is one page of a shard's records.
type ReadPage struct {
	// Records are the page's records in offset order, all in [start, Next).
	Records []Event
	// Next is the offset to read the next page from. A page that reached
	// the end asked for, or the tail, has Next at that end; Next == start
	// with no records means there was nothing (yet) to read.
	Next uint64
	// First is the shard's first retained offset when the page was read.
	First uint64
	// Tail is the shard's committed tail when the page was read.
	Tail uint64
}

// Read reads one page of shard's committed records of name in [start, end)
// (end may be ReadToTail), capped by the node's limits or by WithMaxRecords
// and WithMaxBytes. It never waits for records to arrive and registers
// nothing with the shard: it is a request and an answer on the control
// stream. Read the next page from page.Next; stop when page.Next reaches end
// or page.Tail. A start below the shard's first retained offset, or beyond
// its tail, fails with ErrOffsetOutOfRange (whose Detail says where the
// shard is). On a replicated stream the replica WithReplica chose serves
// the page: a follower behind its leader fails it with ErrReplicaBehind,
// and one asked for the leader with ErrNotLeader naming it (their Detail:
// the leader's node id).
func (c *Client) Read(ctx context.Context, name StreamName, shard uint32, start, end uint64, opts ...ReadOption) (ReadPage, error) {
	if err := name.Validate(); err != nil {
		return ReadPage{}, err
	}
	if c.session().welcome.Features&wire.FeatureRead == 0 {
		return ReadPage{}, wire.Errorf(wire.CodeInvalidRequest, "the node does not support range reads")
	}
	if end < start {
		return ReadPage{}, wire.Errorf(wire.CodeInvalidRequest, "read end %d is before its start %d", end, start)
	}
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	replica, err := c.replica()
	if err != nil {
		return ReadPage{}, err
	}
	req := wire.Read{Name: name, Shard: shard, Start: start, End: end, MaxRecords: o.maxRecords, MaxBytes: o.maxBytes, Replica: replica}
	v, err := c.call(ctx, wire.TypeReadResult, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendRead(dst, id, req)
	})
	if err != nil {
		return ReadPage{}, err
	}
	return pageFromResult(v.(wire.ReadResult), shard, start)
}

// replica is the replica choice to send the node (WithReplica): nearest is
// what a node without follower_reads serves, and the leader needs it.
func (c *Client) replica() (Replica, error) {
	r := c.s.replica
	if r != ReplicaNearest && c.session().welcome.Features&wire.FeatureFollowerReads == 0 {
		return r, &UnsupportedError{Feature: "follower_reads", What: "choosing the replica that serves a read or subscription"}
	}
	return r, nil
}

// pageFromResult turns the node's answer into a page: the batches' records
// in [start, r.Next), in offset order. Batches may begin before start or end
// after Next; the records outside are dropped.
func pageFromResult(r wire.ReadResult, shard uint32, start uint64) (ReadPage, error) {
	page := ReadPage{Next: r.Next, First: r.First, Tail: r.Tail}
	next := start // the lowest offset still to take
	var rec wire.Record
	for i := range r.Batches {
		v := &r.Batches[i]
		if v.Shard != shard {
			return ReadPage{}, protocolViolation("read of shard %d answered with a batch of shard %d", shard, v.Shard)
		}
		if v.Base+uint64(v.Count) <= next || v.Base >= r.Next {
			continue
		}
		it := wire.NewRecordIter(v.Records)
		for off := v.Base; off < v.Base+uint64(v.Count) && off < r.Next; off++ {
			if !it.Next(&rec) {
				break
			}
			if off < next {
				continue
			}
			page.Records = append(page.Records, eventOf(v, off, &rec))
			next = off + 1
		}
	}
	return page, nil
}
