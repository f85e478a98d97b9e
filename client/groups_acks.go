package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/heraldmq/herald/net/wire"
)

// Coalesced pull acks. Every Group.Ack (and AckOffsets) of one group goes
// through its ackCoalescer: while maxAckRequests ack requests of the group
// are on their way, the acks issued meanwhile queue, and the next request
// carries every one of them (a GroupAcks frame, FeatureGroupAcks), so the
// node stages and commits them together. Nothing waits when the group is
// idle: an ack with a request slot free goes at once, alone (as a plain
// GroupAck, which every node speaks). Each caller gets its own entry's
// outcome: its count, or its own typed error (not_delivered, invalid_shard,
// ...), whatever the other entries of the request did; an error of the
// request as a whole (the connection lost with it unanswered: an error
// matching ErrOutcomeUnknown) is every entry's.

// maxAckRequests is how many ack requests of one group a client keeps on
// their way at once. Two keep the node busy (one is committed while the
// next gathers) without splitting a burst of acks into many small requests.
const maxAckRequests = 2

// maxAckRequestBytes bounds the offsets and entry heads of one coalesced
// request (an entry bigger than that goes alone).
const maxAckRequestBytes = 1 << 20

// pendingAck is one caller's ack waiting for its outcome.
type pendingAck struct {
	shard   uint32
	offsets []uint64
	// abandoned is set by the caller once it gave up (its context ended): an
	// ack not yet taken into a request is then not sent.
	abandoned atomic.Bool
	// reply, for a caller that waits (Ack), receives the outcome exactly
	// once; capacity 1, so the sender never blocks on a caller that has
	// gone. Nil for a part of an AckFuture, whose outcome is kept in
	// outcome instead (no channel per ack).
	reply chan ackOutcome
	// future, if set, is the AckFuture this ack is a part of: resolve
	// stores the outcome and counts the part answered.
	future *AckFuture
	// outcome is a future part's outcome; written once by resolve before
	// it counts the part answered, read by the future only after every
	// part is (the count's last decrement closes its done channel).
	outcome ackOutcome
}

// resolve delivers a's outcome; every path that settles an ack ends here,
// once.
func (a *pendingAck) resolve(o ackOutcome) {
	if a.future != nil {
		a.outcome = o
		a.future.partResolved()
		return
	}
	a.reply <- o
}

// ackOutcome is what one caller's Ack returns.
type ackOutcome struct {
	n   int
	err error
}

// size is what the ack adds to a GroupAcks frame.
func (a *pendingAck) size() int { return 8 + 8*len(a.offsets) }

// ackCoalescer is the acks of one group waiting to be sent and the count
// of its requests on their way, without the sending: a plain struct that
// does no I/O (its owner, groupAckers, holds the lock and sends what it
// hands out). Invariants, after every call:
//
//	out <= maxRequests
//	len(queue) > 0 implies out == maxRequests (nothing waits while a request could go)
//
// and every batch it hands out is one request: 1 to maxEntries acks in
// queue order, at most maxOffsets offsets and maxBytes in all unless it
// is one ack alone.
type ackCoalescer struct {
	maxRequests, maxEntries, maxOffsets, maxBytes int
	// out is the requests handed out and not yet answered.
	out int
	// queue are the acks waiting, oldest first.
	queue []*pendingAck
}

func newAckCoalescer() *ackCoalescer {
	return &ackCoalescer{maxRequests: maxAckRequests, maxEntries: wire.MaxGroupAcksEntries,
		maxOffsets: wire.MaxGroupAckOffsets, maxBytes: maxAckRequestBytes}
}

// add queues a and returns the batch to send now if a request may go (nil:
// a waits for an answer to free one).
func (c *ackCoalescer) add(a *pendingAck) []*pendingAck {
	c.queue = append(c.queue, a)
	if c.out >= c.maxRequests {
		return nil
	}
	return c.take()
}

// answered takes the answer to one request handed out: it returns the next
// batch to send in its place (nil: nothing waits).
func (c *ackCoalescer) answered() []*pendingAck {
	c.out--
	return c.take()
}

// idle reports that nothing waits and nothing is on its way.
func (c *ackCoalescer) idle() bool { return c.out == 0 && len(c.queue) == 0 }

// take hands out the next request: the acks at the head of the queue, those
// whose callers gave up dropped, within the bounds. It counts the request
// out; nil when nothing waits.
func (c *ackCoalescer) take() []*pendingAck {
	var batch []*pendingAck
	offsets, bytes, i := 0, 0, 0
	for ; i < len(c.queue) && len(batch) < c.maxEntries; i++ {
		a := c.queue[i]
		if a.abandoned.Load() {
			continue
		}
		if len(batch) > 0 && (offsets+len(a.offsets) > c.maxOffsets || bytes+a.size() > c.maxBytes) {
			break
		}
		batch = append(batch, a)
		offsets += len(a.offsets)
		bytes += a.size()
	}
	clear(c.queue[:i])
	c.queue = c.queue[i:]
	if len(c.queue) == 0 {
		c.queue = nil
	}
	if len(batch) == 0 {
		return nil
	}
	c.out++
	return batch
}

// ackKey names a group's coalescer.
type ackKey struct {
	stream StreamName
	group  string
}

// groupAckers holds a client's coalescers, one per group with acks waiting
// or on their way (an idle one is dropped). Its zero value is ready.
type groupAckers struct {
	mu struct {
		sync.Mutex
		// groups are the coalescers by group.
		groups map[ackKey]*ackCoalescer
	}
}

// ack settles offsets of shard for g through g's coalescer and waits for
// this ack's own outcome (ctx ending: ctx's error; if its request went out,
// the node may still apply it).
func (r *groupAckers) ack(ctx context.Context, g *Group, shard uint32, offsets []uint64) (int, error) {
	// The offsets are copied: an ack whose caller gave up may still be
	// encoded after Ack returned, when the caller may reuse its slice.
	a := &pendingAck{shard: shard, offsets: slices.Clone(offsets), reply: make(chan ackOutcome, 1)}
	r.enqueue(g, a)
	select {
	case o := <-a.reply:
		return o.n, o.err
	case <-ctx.Done():
		a.abandoned.Store(true)
		return 0, ctx.Err()
	}
}

// enqueue hands a (whose offsets it keeps) to g's coalescer, starting a
// request if a slot is free: a is resolved exactly once.
func (r *groupAckers) enqueue(g *Group, a *pendingAck) {
	k := ackKey{stream: g.stream, group: g.name}
	r.mu.Lock()
	if r.mu.groups == nil {
		r.mu.groups = map[ackKey]*ackCoalescer{}
	}
	co := r.mu.groups[k]
	if co == nil {
		co = newAckCoalescer()
		r.mu.groups[k] = co
	}
	batch := co.add(a)
	r.mu.Unlock()
	if batch != nil {
		r.start(g, k, batch)
	}
}

// start sends batch, and then each batch its answer frees, on a goroutine
// of the client's: the goroutine holds one of the group's request slots
// until nothing waits. The client's life bounds it (Close ends its call).
func (r *groupAckers) start(g *Group, k ackKey, batch []*pendingAck) {
	if g.c.s.goroutines.Go(func() { r.send(g, k, batch) }) {
		return
	}
	// The client is closing: fail this batch and whatever queues behind it.
	for batch != nil {
		for _, a := range batch {
			a.resolve(ackOutcome{err: ErrClosed})
		}
		batch = r.answered(k)
	}
}

// send sends batches until its slot has nothing more to carry.
func (r *groupAckers) send(g *Group, k ackKey, batch []*pendingAck) {
	for batch != nil {
		g.settleBatch(g.c.s.life, batch)
		batch = r.answered(k)
	}
}

// answered frees a request slot of k's coalescer and returns the batch to
// send in it, dropping the coalescer once idle.
func (r *groupAckers) answered(k ackKey) []*pendingAck {
	r.mu.Lock()
	defer r.mu.Unlock()
	co := r.mu.groups[k]
	next := co.answered()
	if co.idle() {
		delete(r.mu.groups, k)
	}
	return next
}

// ackAnswerEntryMax is the most one entry's outcome can take in the node's
// GroupAcksDone: code, count or detail, a message length and a message of
// at most 1024 bytes.
const ackAnswerEntryMax = 2 + 8 + 2 + 1024

// settleBatch sends batch's acks and replies to each: one ack alone as a
// GroupAck, several as GroupAcks requests (or, if the node no longer speaks
// it after a reconnect to another, as a GroupAck each, in turn). A batch
// whose request could exceed the node's frame, or whose answer could
// exceed the client's (every entry failing with a long message), goes as
// several requests, one after another, so that acks which fit alone never
// fail for having been merged. ctx is the client's life.
func (g *Group) settleBatch(ctx context.Context, batch []*pendingAck) {
	s := g.c.session()
	if len(batch) == 1 || s.welcome.Features&wire.FeatureGroupAcks == 0 {
		for _, a := range batch {
			g.settleOne(ctx, a)
		}
		return
	}
	perAnswer := max(1, (int(s.maxRecv)-64)/ackAnswerEntryMax)
	head := g.acksRequestBytes(nil)
	for len(batch) > 0 {
		n, bytes := 0, head
		for n < len(batch) && n < perAnswer && (n == 0 || bytes+batch[n].size() <= int(s.maxSend)) {
			bytes += batch[n].size()
			n++
		}
		if n == 1 {
			g.settleOne(ctx, batch[0])
		} else {
			g.settleRequest(ctx, batch[:n])
		}
		batch = batch[n:]
	}
}

// settleOne sends one ack as a plain GroupAck and replies to it.
func (g *Group) settleOne(ctx context.Context, a *pendingAck) {
	n, err := g.sendSettle(ctx, false, a.shard, a.offsets)
	a.resolve(ackOutcome{n: n, err: lifeErr(ctx, err)})
}

// acksRequest is the GroupAcks request of batch.
func (g *Group) acksRequest(batch []*pendingAck) wire.GroupAcks {
	req := wire.GroupAcks{Name: g.stream, Group: g.name, Entries: make([]wire.GroupAckEntry, len(batch))}
	for i, a := range batch {
		req.Entries[i] = wire.GroupAckEntry{Shard: a.shard, Offsets: a.offsets}
	}
	return req
}

// acksRequestBytes is the body size of batch's GroupAcks request; each
// entry adds its size().
func (g *Group) acksRequestBytes(batch []*pendingAck) int {
	return len(wire.AppendGroupAcks(nil, 0, g.acksRequest(batch))) - wire.HeaderSize
}

// settleRequest sends batch (two acks or more) as one GroupAcks and
// replies to each with its own entry's outcome.
func (g *Group) settleRequest(ctx context.Context, batch []*pendingAck) {
	req := g.acksRequest(batch)
	v, err := g.c.groupCall(ctx, wire.TypeGroupAcksDone, changes, func(dst []byte, id uint64) []byte {
		return wire.AppendGroupAcks(dst, id, req)
	})
	var outs []wire.GroupAckOutcome
	if err == nil {
		if outs = v.([]wire.GroupAckOutcome); len(outs) != len(batch) {
			err = protocolViolation("an ack of %d entries answered with %d outcomes", len(batch), len(outs))
		}
	}
	for i, a := range batch {
		switch {
		case err != nil:
			a.resolve(ackOutcome{err: lifeErr(ctx, err)})
		case outs[i].Err != nil:
			a.resolve(ackOutcome{err: outs[i].Err})
		default:
			a.resolve(ackOutcome{n: doneCount(outs[i].Count)})
		}
	}
}

// lifeErr is err, or ErrClosed when it is the end of the client's life ctx
// (Close ran while the ack was on its way).
func lifeErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
	}
	return err
}
