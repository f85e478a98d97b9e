package client

import (
	"context"
	"errors"
	"sync"

	"github.com/heraldmq/herald/net/wire"
)

// Producer is an idempotent producer: its publishes to one stream carry its
// id and, per shard, a sequence number (1, 2, 3, ...), so the node
// recognises a re-send of a batch it already wrote and does not write it
// twice, also across node restarts. Its methods are safe for concurrent use;
// a Producer's publishes to one shard are numbered and sent in the order its
// methods were called.
//
// Use one Producer per (stream, id), and one id per application instance:
// two producers with one id would number the same sequences for different
// batches. Sequences live in the Producer: after an application restart,
// restore them with SetSequence (from where the application keeps them) or
// re-send the last batch of each shard with PublishSequence.
//
// A lost connection needs nothing of the caller: the client reconnects and
// sends the Producer's unanswered batches again, with their sequences, on
// the new connection, and the node answers a batch it had written with its
// original offsets (Duplicate set), so each is written exactly once and
// Publish returns its ack as if nothing had happened.
//
// On an error whose outcome is unknown (a *ProducerError whose Err is a
// context error, a connection failure the client did not recover from, or
// a code whose Retry is wire.RetryOutcomeUnknown), re-send the same payloads
// with the same sequence, ProducerError.Sequence, with PublishSequence: if
// the first attempt was written, the answer is a PublishAck with Duplicate
// set and the original offsets, and nothing is written twice.
type Producer struct {
	c *Client
	// name is the stream the producer publishes to.
	name StreamName
	// id is the producer id.
	id uint64
	mu struct {
		sync.Mutex
		// last is the last sequence used per shard (0: none yet).
		last map[uint32]uint64
	}
}

// NewProducer returns an idempotent producer of name with producer id id.
// It sends nothing until its first publish.
func (c *Client) NewProducer(name StreamName, id uint64) *Producer {
	p := &Producer{c: c, name: name, id: id}
	p.mu.last = make(map[uint32]uint64)
	return p
}

// ID returns the producer id.
func (p *Producer) ID() uint64 { return p.id }

// Stream returns the stream the producer publishes to.
func (p *Producer) Stream() StreamName { return p.name }

// Sequence returns the last sequence used on shard (0 when none).
func (p *Producer) Sequence(shard uint32) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.last[shard]
}

// SetSequence sets the last sequence used on shard, so that the next
// Publish to it uses last+1: to resume after an application restart.
func (p *Producer) SetSequence(shard uint32, last uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.last[shard] = last
}

// Publish publishes payloads as one batch numbered with the next sequence
// of its shard, and waits for the ack. An ack with Duplicate set means the
// node had written the batch already. opts are a publish's: WithKey routes
// the batch and keys its records, WithHeaders adds headers; the ack mode is
// always AckPerBatch (another one is ErrInvalidRequest).
//
// An error that is not a *ProducerError means nothing was sent and no
// sequence was used. A *ProducerError carries the batch's shard and
// sequence (see Producer for re-sending). A publish that the node refused
// without writing it (for example ErrStreamNotFound) gives its sequence back
// when no later one was used on the shard; ErrSequenceGap means the node
// expects an earlier sequence (the error's Detail) than the one sent, and
// the producer then numbers the next publish from there when it can do so
// safely. If the node refuses the publish with ErrInvalidShard or
// ErrStreamNotFound, the client describes the stream again and re-sends once.
//
// A keyed publish needs the stream to exist: the producer must know the
// key's shard to number it. An unkeyed one goes to shard 0, and may
// auto-create the stream on a node that does that.
func (p *Producer) Publish(ctx context.Context, payloads [][]byte, opts ...PublishOption) (PublishAck, error) {
	return p.publish(ctx, 0, payloads, opts)
}

// PublishSequence publishes payloads like Publish, but numbered seq (at
// least 1): to re-send a batch whose outcome is unknown, after a lost ack or
// an application restart, with the same options (the same WithKey, so that
// it goes to the same shard). If seq is above the shard's Sequence it
// becomes the last sequence used. It does not re-send on a stale shard
// description.
func (p *Producer) PublishSequence(ctx context.Context, seq uint64, payloads [][]byte, opts ...PublishOption) (PublishAck, error) {
	if seq == 0 {
		return PublishAck{}, wire.Errorf(wire.CodeInvalidRequest, "sequences start at 1")
	}
	return p.publish(ctx, seq, payloads, opts)
}

// publish numbers (with seq, or the next sequence when seq is 0), sends
// and waits for one idempotent publish.
func (p *Producer) publish(ctx context.Context, seq uint64, payloads [][]byte, opts []PublishOption) (PublishAck, error) {
	c := p.c
	if err := c.usable(); err != nil {
		return PublishAck{}, err
	}
	if c.session().welcome.Features&wire.FeatureIdempotentProducer == 0 {
		return PublishAck{}, wire.Errorf(wire.CodeInvalidRequest, "the node does not support idempotent producers")
	}
	if err := p.name.Validate(); err != nil {
		return PublishAck{}, err
	}
	o := publishOptionsOf(opts)
	key := o.key
	if err := checkPublish(payloads, &o, publishSpec{idempotent: true}); err != nil {
		return PublishAck{}, err
	}
	for attempt := 0; ; attempt++ {
		t, err := c.target(ctx, p.name, key)
		if err != nil {
			return PublishAck{}, err
		}
		if t.anyShard && len(key) > 0 {
			return PublishAck{}, wire.Errorf(wire.CodeStreamNotFound,
				"%s: an idempotent producer's keyed publish needs the stream to exist", p.name)
		}
		p.mu.Lock()
		prev := p.mu.last[t.shard]
		s := seq
		if s == 0 {
			s = prev + 1
		}
		span, traceparent := c.tracer.startPublish(ctx, p.name, len(payloads))
		f, err := c.startPublish(ctx, p.name, payloads, &o, publishSpec{idempotent: true, producer: p.id, sequence: s}, t, span, traceparent)
		if err != nil {
			p.mu.Unlock()
			endPublish(span, err)
			return PublishAck{}, err
		}
		if s > prev {
			p.mu.last[t.shard] = s
		}
		p.mu.Unlock()

		// Not withdrawn when ctx ends: a later sequence may be queued behind
		// it, and withdrawing this one would make that one a gap.
		res := f.wait(ctx)
		if res.err == nil {
			return res.ack, nil
		}
		gaveBack := res.refused && p.giveBack(t.shard, s, prev, res.err)
		if attempt == 0 && seq == 0 && !t.anyShard && gaveBack && isRouteError(res.err) {
			continue
		}
		return PublishAck{}, &ProducerError{Shard: t.shard, Sequence: s, Err: res.err}
	}
}

// giveBack handles the node's refusal err of sequence s on shard, which was
// prev before s was used: when nothing was written and no later sequence was
// used, the next publish is numbered from prev+1 (or, after a sequence gap,
// from the sequence the node expects). It reports whether it did so.
func (p *Producer) giveBack(shard uint32, s, prev uint64, err error) bool {
	var we *wire.Error
	if !errors.As(err, &we) || we.Code.Retry() == wire.RetryOutcomeUnknown || we.Code == wire.CodeDuplicateSequence {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.last[shard] != s {
		return false
	}
	switch {
	case we.Code == wire.CodeSequenceGap && we.Detail >= 1 && we.Detail <= s:
		// The node processes a shard's publishes from this client in
		// order, so it has seen every sequence below s: [Detail, s] are
		// unwritten.
		p.mu.last[shard] = we.Detail - 1
	case s > prev:
		p.mu.last[shard] = prev
	default:
		return false
	}
	return true
}
