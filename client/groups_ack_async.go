package client

import (
	"context"
	"sync"

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
	byShard, err := offsetsByShard(recs)
	if err != nil {
		return nil, err
	}
	f := &AckFuture{done: make(chan struct{}), parts: make([]*pendingAck, len(byShard))}
	coalesced := g.c.session().welcome.Features&wire.FeatureGroupAcks != 0
	for i, s := range byShard {
		if coalesced {
			// The offsets are the future's own (byShard's): no copy.
			f.parts[i] = g.c.groupAcks.enqueue(g, s.shard, s.offsets)
			continue
		}
		a := &pendingAck{shard: s.shard, offsets: s.offsets, reply: make(chan ackOutcome, 1)}
		f.parts[i] = a
		if !g.c.s.goroutines.Go(func() {
			n, err := g.sendSettle(g.c.s.life, false, a.shard, a.offsets)
			a.reply <- ackOutcome{n: n, err: lifeErr(g.c.s.life, err)}
		}) {
			a.reply <- ackOutcome{err: ErrClosed}
		}
	}
	return f, nil
}

// AckFuture is the pending outcome of Group.AckAsync.
type AckFuture struct {
	// parts are the ack's per-shard acks, in the order of their shards'
	// first records; each gets exactly one outcome on its reply.
	parts []*pendingAck
	// mu serialises the collection of outcomes among Waits; done is closed
	// once n and err hold the whole outcome.
	mu   sync.Mutex
	got  []ackOutcome
	done chan struct{}
	n    int
	err  error
}

// Wait waits for the ack's outcome: how many of its records the node
// settled (a record settled already is not counted, as with Ack) and the
// first error, once every part is answered. If ctx ends first it returns
// ctx's error and the ack goes on: Wait may be called again. It is safe to
// call from several goroutines.
func (f *AckFuture) Wait(ctx context.Context) (int, error) {
	select {
	case <-f.done:
		return f.n, f.err
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.got) < len(f.parts) {
		select {
		case o := <-f.parts[len(f.got)].reply:
			f.got = append(f.got, o)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	select {
	case <-f.done: // an earlier Wait collected it
	default:
		for _, o := range f.got {
			f.n += o.n
			if o.err != nil && f.err == nil {
				f.err = o.err
			}
		}
		close(f.done)
	}
	return f.n, f.err
}

// Done is closed once a Wait has collected the whole outcome.
func (f *AckFuture) Done() <-chan struct{} { return f.done }
