package client

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/heraldmq/herald/net/wire"
)

// AckMode says whether and how the node answers a publish.
type AckMode = wire.AckMode

// Ack modes.
const (
	// AckNone: the node does not answer; a publish returns once its frame
	// is handed to the QUIC stream. A failure is only logged (at debug).
	AckNone = wire.AckNone
	// AckPerMessage: every payload is sent as its own publish and acked;
	// the call returns when all are, with each record's offset in Offsets.
	AckPerMessage = wire.AckPerMessage
	// AckPerBatch: the payloads are one batch, acked once when it is
	// written (durably on a durable stream). The default.
	AckPerBatch = wire.AckPerBatch
)

// PublishAck says where a publish was written.
type PublishAck struct {
	// Shard is the shard the records went to.
	Shard uint32
	// Offset is the offset of the first record.
	Offset uint64
	// Count is the number of records written.
	Count int
	// Offsets holds each record's offset, in payload order, for AckPerMessage
	// (whose records need not be contiguous); nil otherwise.
	Offsets []uint64
}

// PublishOption configures a publish.
type PublishOption func(*publishOptions)

// publishOptions is what the PublishOptions set.
type publishOptions struct {
	ack     AckMode
	key     []byte
	headers []wire.RecordHeader
}

// WithAck sets the ack mode (default AckPerBatch).
func WithAck(m AckMode) PublishOption { return func(o *publishOptions) { o.ack = m } }

// WithKey routes the publish by key (records with one key go to one shard)
// and sets it as every record's key. Without a key the records go to shard 0.
func WithKey(key []byte) PublishOption { return func(o *publishOptions) { o.key = key } }

// WithHeaders adds the headers to every record, in key order.
func WithHeaders(h map[string]string) PublishOption {
	return func(o *publishOptions) {
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			o.headers = append(o.headers, wire.RecordHeader{Key: k, Value: []byte(h[k])})
		}
	}
}

// Publish publishes one payload to name and waits for its ack (see
// PublishBatch).
func (c *Client) Publish(ctx context.Context, name StreamName, payload []byte, opts ...PublishOption) (PublishAck, error) {
	return c.PublishBatch(ctx, name, [][]byte{payload}, opts...)
}

// PublishBatch publishes payloads to name as one batch (or, with
// AckPerMessage, as one publish each) and waits for the ack. If ctx ends
// before the publish was written, it is withdrawn; if it ends after, the
// call returns ctx's error and the outcome is unknown. With AckPerMessage the
// call fails with the first record's error, and records before or after it
// may have been written.
func (c *Client) PublishBatch(ctx context.Context, name StreamName, payloads [][]byte, opts ...PublishOption) (PublishAck, error) {
	f, err := c.PublishAsync(ctx, name, payloads, opts...)
	if err != nil {
		return PublishAck{}, err
	}
	ack, err := f.Wait(ctx)
	if err != nil && ctx.Err() != nil && err == ctx.Err() {
		f.withdraw(err)
	}
	return ack, err
}

// PublishAsync queues a publish of payloads to name and returns a future for
// its ack, so one goroutine can keep many publishes in flight. It blocks,
// honouring ctx, only while the client's in-flight byte budget has no room
// (WithPublishInflightBytes); ctx does not bound the publish after it
// returned. Publishes to one name are written in the order PublishAsync
// returned.
func (c *Client) PublishAsync(ctx context.Context, name StreamName, payloads [][]byte, opts ...PublishOption) (*PublishFuture, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := name.Validate(); err != nil {
		return nil, err
	}
	o := publishOptions{ack: AckPerBatch}
	for _, opt := range opts {
		opt(&o)
	}
	frames, err := c.encodePublish(name, payloads, &o)
	if err != nil {
		return nil, err
	}
	req := &publishRequest{name: name, mode: o.ack, frames: frames, reply: make(chan publishResult, 1)}
	if o.ack != AckNone {
		for _, f := range frames {
			req.held += int64(len(f))
		}
		if err := c.s.budget.acquire(ctx, c.done, req.held); err != nil {
			return nil, err
		}
	}
	c.send(c.conn, req)
	return &PublishFuture{c: c, req: req, done: make(chan struct{})}, nil
}

// encodePublish encodes the Publish frames of a publish, with request id 0.
func (c *Client) encodePublish(name StreamName, payloads [][]byte, o *publishOptions) ([][]byte, error) {
	if len(payloads) == 0 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "a publish needs at least one payload")
	}
	if len(payloads) > wire.MaxRecordsInBatch {
		return nil, wire.Errorf(wire.CodeBatchTooLarge, "%d records, at most %d allowed", len(payloads), wire.MaxRecordsInBatch)
	}
	if len(o.key) > wire.MaxKeyBytes {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "key of %d bytes, at most %d allowed", len(o.key), wire.MaxKeyBytes)
	}
	switch o.ack {
	case AckNone, AckPerBatch, AckPerMessage:
	default:
		return nil, wire.Errorf(wire.CodeInvalidRequest, "unknown ack mode %d", o.ack)
	}
	recs := make([]wire.Record, len(payloads))
	for i, p := range payloads {
		recs[i] = wire.Record{Key: o.key, Headers: o.headers, Payload: p}
	}
	var frames [][]byte
	if o.ack == AckPerMessage {
		frames = make([][]byte, len(recs))
		for i := range recs {
			frames[i] = appendPublishFrame(name, o, recs[i:i+1])
		}
	} else {
		frames = [][]byte{appendPublishFrame(name, o, recs)}
	}
	for _, f := range frames {
		if n := len(f) - wire.HeaderSize; n > int(c.s.maxSend) {
			return nil, &wire.Error{Code: wire.CodeFrameTooLarge, Detail: uint64(c.s.maxSend),
				Message: fmt.Sprintf("publish of %d bytes exceeds the node's maximum frame of %d", n, c.s.maxSend)}
		}
	}
	return frames, nil
}

// appendPublishFrame encodes one Publish frame of recs, with request id 0.
func appendPublishFrame(name StreamName, o *publishOptions, recs []wire.Record) []byte {
	block := wire.AppendRecords(make([]byte, 0, wire.RecordsSize(recs)), recs)
	size := wire.HeaderSize + 3 + len(name.Tenant) + len(name.Namespace) + len(name.Stream) + 1 + 2 + len(o.key) + 4 + len(block)
	return wire.AppendPublish(make([]byte, 0, size), 0, wire.Publish{
		Name: name, Ack: o.ack, Key: o.key, Count: uint32(len(recs)), Records: block,
	})
}

// PublishFuture is the pending result of PublishAsync.
type PublishFuture struct {
	c   *Client
	req *publishRequest
	// once stores the result the first time it is received.
	once sync.Once
	// done is closed once ack and err hold the result.
	done chan struct{}
	ack  PublishAck
	err  error
}

// Wait waits for the publish's ack, or for ctx to end (then it returns ctx's
// error and the publish goes on: Wait may be called again). It is safe to
// call from several goroutines.
func (f *PublishFuture) Wait(ctx context.Context) (PublishAck, error) {
	select {
	case <-f.done:
		return f.ack, f.err
	default:
	}
	select {
	case r := <-f.req.reply:
		f.resolve(r)
	case <-f.done:
	case <-ctx.Done():
		return PublishAck{}, ctx.Err()
	case <-f.c.connStopped:
		select {
		case r := <-f.req.reply:
			f.resolve(r)
		case <-f.done:
		default:
			f.resolve(publishResult{err: f.c.stoppedErr()})
		}
	}
	return f.ack, f.err
}

// resolve stores the first result and wakes every Wait.
func (f *PublishFuture) resolve(r publishResult) {
	f.once.Do(func() {
		f.ack, f.err = r.ack, r.err
		close(f.done)
	})
}

// withdraw asks the publish stream to drop the publish if it was not written
// yet.
func (f *PublishFuture) withdraw(err error) {
	select {
	case <-f.c.done:
		return
	default:
	}
	f.c.send(f.c.conn, &publishWithdrawn{req: f.req, err: err})
}
