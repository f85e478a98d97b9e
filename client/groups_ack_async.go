package client

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/heraldmq/herald/net/wire"
)

// AckAsync settles delivered records as Ack does, without waiting: it hands
// the ack to the group's ack coalescer (which sends it at once, or in the
// next request with the acks queued beside it) and returns its future. A
// consumer acking each record as it finishes it (what a NATS consumer does
// with Msg.Ack) then needs no goroutine per ack, and still learns each
// ack's outcome, and when it is durable, from AckFuture.Wait.
//
// Errors Ack finds before sending (no records, too many offsets of one
// shard, a bad group name) and a client that cannot send (closed, or given
// up reconnecting) are returned at once, with nothing sent. Records of several shards go as one ack per shard; the
// future's Wait returns their summed count and the first error in the
// order their shards first appear in recs (every shard's ack is sent
// regardless). Against a node without coalesced acks each shard's ack is
// a request of its own, sent on a goroutine of the client's.
//
// Every future is resolved: by the node's answer, or with an error matching
// ErrOutcomeUnknown if the connection goes while its request is unanswered,
// or with ErrClosed when the client closes.
func (g *Group) AckAsync(recs ...GroupRecord) (*AckFuture, error) {
	if err := g.c.usable(); err != nil {
		return nil, err
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "no records to settle")
	}
	f := &AckFuture{}
	var byShard []shardOffsets
	if len(recs) == 1 {
		// The common case (an ack per record) allocates the future only:
		// its one part, offset and part list are the future's own.
		f.offset[0] = recs[0].Offset
		if err := checkOffsets(f.offset[:]); err != nil {
			return nil, err
		}
		byShard = []shardOffsets{{shard: recs[0].Shard, offsets: f.offset[:]}}
		f.parts = f.part[:]
		f.part[0] = &f.one
	} else {
		var err error
		if byShard, err = offsetsByShard(recs); err != nil {
			return nil, err
		}
		f.parts = make([]*pendingAck, len(byShard))
		for i := range f.parts {
			f.parts[i] = &pendingAck{}
		}
	}
	f.left.Store(int32(len(byShard)))
	coalesced := g.c.session().welcome.Features&wire.FeatureGroupAcks != 0
	for i, s := range byShard {
		// The offsets are the future's own (byShard's): no copy.
		a := f.parts[i]
		a.shard, a.offsets, a.future = s.shard, s.offsets, f
		if coalesced {
			g.c.groupAcks.enqueue(g, a)
			continue
		}
		if !g.c.s.goroutines.Go(func() {
			n, err := g.sendSettle(g.c.s.life, false, a.shard, a.offsets)
			a.resolve(ackOutcome{n: n, err: lifeErr(g.c.s.life, err)})
		}) {
			a.resolve(ackOutcome{err: ErrClosed})
		}
	}
	return f, nil
}

// AckFuture is the pending outcome of Group.AckAsync.
type AckFuture struct {
	// parts are the ack's per-shard acks, in the order of their shards'
	// first records; each is resolved exactly once, into its outcome.
	parts []*pendingAck
	// one, part and offset hold the single part of a one-record ack.
	one    pendingAck
	part   [1]*pendingAck
	offset [1]uint64
	// left counts the parts not yet answered.
	left atomic.Int32
	// mu guards done and answered. done is made only when Done, or a Wait
	// before the last answer, needs it (a future is mostly answered before
	// anyone waits: no channel per ack); the last answer sets answered and
	// closes done if it was made.
	mu       sync.Mutex
	done     chan struct{}
	answered bool
	// once collects the outcome into n and err, once every part is
	// answered.
	once sync.Once
	n    int
	err  error
}

// partResolved is called once per part, after its outcome is stored.
func (f *AckFuture) partResolved() {
	if f.left.Add(-1) == 0 {
		f.mu.Lock()
		f.answered = true
		if f.done != nil {
			close(f.done)
		}
		f.mu.Unlock()
	}
}

// Wait waits for the ack's outcome: how many of its records the node
// settled (a record settled already is not counted, as with Ack) and the
// first error in the order of its shards, once every part is answered. If
// ctx ends first it returns ctx's error and the ack goes on: Wait may be
// called again. It is safe to call from several goroutines, each with its
// own ctx.
func (f *AckFuture) Wait(ctx context.Context) (int, error) {
	// Every part answered (the load orders their outcomes before what
	// follows), or wait for the last.
	if f.left.Load() != 0 {
		select {
		case <-f.Done():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	f.once.Do(func() {
		for _, p := range f.parts {
			o := p.outcome // every part is answered
			f.n += o.n
			if o.err != nil && f.err == nil {
				f.err = o.err
			}
		}
	})
	return f.n, f.err
}

// Done is closed once every part of the ack is answered (Wait then returns
// at once).
func (f *AckFuture) Done() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
		if f.answered {
			close(f.done)
		}
	}
	return f.done
}
