package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/net/stages"
	"github.com/heraldmq/herald/net/wire"
)

// AckMode says whether and how the node answers a publish.
type AckMode = wire.AckMode

// Ack modes.
const (
	// AckNone: the node does not answer; a publish returns once its frame
	// is handed to the QUIC stream (while the client reconnects, once it is
	// on the new connection's). A failure is only logged (at debug).
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
	// Duplicate is set when an idempotent producer's re-send was recognised:
	// nothing was written again, and Offset and Count are those of the
	// original write.
	Duplicate bool
}

// PublishOption configures a publish: Publish, PublishBatch, PublishAsync,
// PublishIf and a Producer's publishes all take the same options.
type PublishOption func(*publishOptions)

// publishOptions is what the PublishOptions set.
type publishOptions struct {
	ack     AckMode
	key     []byte
	headers []wire.RecordHeader
}

// WithAck sets the ack mode (default AckPerBatch). Conditional and
// idempotent publishes are always AckPerBatch; another mode fails them with
// ErrInvalidRequest.
func WithAck(m AckMode) PublishOption { return func(o *publishOptions) { o.ack = m } }

// WithKey routes the publish by key (records with one key go to one shard,
// picked by the stream's routing) and sets it as every record's key. Without
// a key the records go to shard 0.
func WithKey(key []byte) PublishOption { return func(o *publishOptions) { o.key = key } }

// WithHeaders adds h to every record's headers, in order, after those of
// earlier WithHeaders options. A header named TraceHeader is replaced by the
// publish span's trace context when the publish is traced.
func WithHeaders(h ...Header) PublishOption {
	return func(o *publishOptions) {
		for _, x := range h {
			o.headers = append(o.headers, wire.RecordHeader(x))
		}
	}
}

// publishOptionsOf applies opts over the defaults.
func publishOptionsOf(opts []PublishOption) publishOptions {
	o := publishOptions{ack: AckPerBatch}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// publishSpec is what a publish carries beyond its options: a conditional
// publish's expected offset, an idempotent one's producer and sequence.
type publishSpec struct {
	conditional bool
	expected    uint64
	idempotent  bool
	producer    uint64
	sequence    uint64
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
//
// The client picks the shard itself (see PublishAsync). If the node refuses
// an AckPerBatch publish with ErrInvalidShard or ErrStreamNotFound, nothing
// was written: the client describes the stream again and re-sends once.
func (c *Client) PublishBatch(ctx context.Context, name StreamName, payloads [][]byte, opts ...PublishOption) (PublishAck, error) {
	o := publishOptionsOf(opts)
	res := c.publishSync(ctx, name, payloads, &o, publishSpec{})
	return res.ack, res.err
}

// publishSync publishes and waits for the result, re-sending once, with a
// fresh description of the stream, a publish with an explicit shard that the
// node refused as stale (isRouteError).
func (c *Client) publishSync(ctx context.Context, name StreamName, payloads [][]byte, o *publishOptions, spec publishSpec) publishResult {
	for attempt := 0; ; attempt++ {
		f, t, err := c.publishAsync(ctx, name, payloads, o, spec)
		if err != nil {
			return publishResult{err: err}
		}
		res := f.wait(ctx)
		if res.err != nil && ctx.Err() != nil && res.err == ctx.Err() {
			f.withdraw(res.err)
		}
		// Only a single batch is re-sent: of several AckPerMessage
		// publishes, some may have been written.
		if attempt == 0 && !t.anyShard && o.ack == AckPerBatch && res.refused && isRouteError(res.err) {
			continue
		}
		return res
	}
}

// PublishAsync queues a publish of payloads to name and returns a future for
// its ack, so one goroutine can keep many publishes in flight. It blocks,
// honouring ctx, while the client's in-flight byte budget has no room
// (WithPublishInflightBytes) and, on the first publish to name, for one
// DescribeStream round trip; ctx does not bound the publish after it
// returned.
//
// The client learns each stream's shard count and routing (and caches them),
// picks the publish's shard from its key (wire.ShardFor; unkeyed publishes
// go to shard 0) and sends it on that shard's QUIC publish stream (see
// WithPublishStreams), so one client's publishes to one shard are written in
// the order PublishAsync returned. A publish to a stream the node does not
// know is sent for the node to route (wire.AnyShard): a node that
// auto-creates streams creates it, and the client describes it again once
// those publishes are answered.
//
// If the node refuses the publish with ErrInvalidShard or ErrStreamNotFound,
// the future fails with that error, and the client drops its cached
// description so that the next publish describes the stream again.
//
// Across a lost connection (see Client): a publish not yet written when the
// connection goes, or made while the client reconnects, is written on the
// new connection, in order, and holds its bytes in the budget meanwhile, so
// that a reconnect queues at most the budget and later publishes wait in
// PublishAsync. One written and unanswered fails with an error matching
// ErrOutcomeUnknown (read the shard, or publish through a Producer, whose
// batches are sent again). One the node refused with ErrShuttingDown (it is
// draining and applied nothing) is sent again on the next connection. If the
// client gives up reconnecting, every one fails with the *ReconnectError.
func (c *Client) PublishAsync(ctx context.Context, name StreamName, payloads [][]byte, opts ...PublishOption) (*PublishFuture, error) {
	if stages.Enabled && len(payloads) == 1 {
		stages.Mark(stages.Publish, payloads[0])
	}
	o := publishOptionsOf(opts)
	f, _, err := c.publishAsync(ctx, name, payloads, &o, publishSpec{})
	return f, err
}

// publishAsync picks the publish's shard and starts it.
func (c *Client) publishAsync(ctx context.Context, name StreamName, payloads [][]byte, o *publishOptions, spec publishSpec) (*PublishFuture, publishTarget, error) {
	if err := c.usable(); err != nil {
		return nil, publishTarget{}, err
	}
	if err := name.Validate(); err != nil {
		return nil, publishTarget{}, err
	}
	if err := checkPublish(payloads, o, spec); err != nil {
		return nil, publishTarget{}, err
	}
	t, err := c.target(ctx, name, o.key)
	if err != nil {
		return nil, publishTarget{}, err
	}
	span, traceparent := c.tracer.startPublish(ctx, name, len(payloads))
	f, err := c.startPublish(ctx, name, payloads, o, spec, t, span, traceparent)
	if err != nil {
		endPublish(span, err)
	}
	return f, t, err
}

// checkPublish validates a publish before anything is sent.
func checkPublish(payloads [][]byte, o *publishOptions, spec publishSpec) error {
	switch {
	case len(payloads) == 0:
		return wire.Errorf(wire.CodeInvalidRequest, "a publish needs at least one payload")
	case len(payloads) > wire.MaxRecordsInBatch:
		return wire.Errorf(wire.CodeBatchTooLarge, "%d records, at most %d allowed", len(payloads), wire.MaxRecordsInBatch)
	case len(o.key) > wire.MaxKeyBytes:
		return wire.Errorf(wire.CodeInvalidRequest, "key of %d bytes, at most %d allowed", len(o.key), wire.MaxKeyBytes)
	}
	switch o.ack {
	case AckNone, AckPerBatch, AckPerMessage:
	default:
		return wire.Errorf(wire.CodeInvalidRequest, "unknown ack mode %d", o.ack)
	}
	if (spec.conditional || spec.idempotent) && o.ack != AckPerBatch {
		return wire.Errorf(wire.CodeInvalidRequest, "conditional and idempotent publishes are one acked batch (AckPerBatch)")
	}
	return nil
}

// startPublish encodes the publish for t, takes its budget and hands it to
// the connection actor.
func (c *Client) startPublish(ctx context.Context, name StreamName, payloads [][]byte, o *publishOptions, spec publishSpec, t publishTarget,
	span trace.Span, traceparent string) (*PublishFuture, error) {
	req := &publishRequest{
		route:   publishRoute{name: name, shard: t.shard},
		mode:    o.ack,
		resend:  spec.idempotent,
		count:   uint32(len(payloads)),
		span:    span,
		target:  t,
		settled: make(chan struct{}),
	}
	req.fut = PublishFuture{c: c, req: req}
	frames, recBytes, err := c.encodePublish(name, payloads, o, spec, t, traceparent, &req.oneFrame)
	if err != nil {
		return nil, err
	}
	req.frames = frames
	// Every publish holds its bytes until it is answered (or, AckNone,
	// written), so publishes made while the client reconnects queue up to
	// the budget and no further.
	for _, f := range frames {
		req.held += int64(len(f))
	}
	if len(frames) == 1 && o.ack != AckPerMessage && !spec.conditional && !spec.idempotent {
		// A plain publish of one frame may share a frame with the
		// publishes queued beside it (publish_coalesce.go).
		req.recBytes = recBytes
	}
	if err := c.s.budget.acquire(ctx, c.done, req.held); err != nil {
		return nil, err
	}
	if t.anyShard {
		c.routes.anySent(t.route)
	}
	c.send(c.conn, req)
	return &req.fut, nil
}

// publishSettled is told of every publish publishAsync started, by the
// actor that settles it: it ends the publish's span and tells the routes
// what became of it. It must not block.
func (c *Client) publishSettled(r *publishRequest, res publishResult) {
	endPublish(r.span, res.err)
	switch {
	case r.target.anyShard:
		c.routes.anySettled(r.route.name, r.target.route)
	case res.refused && isRouteError(res.err):
		c.routes.invalidate(r.route.name, r.target.route)
	}
}

// encodePublish encodes the Publish frames of a publish, with request id 0,
// and returns the size of the records block that ends each of them (of the
// one frame; of the last frame for AckPerMessage).
func (c *Client) encodePublish(name StreamName, payloads [][]byte, o *publishOptions, spec publishSpec, t publishTarget, traceparent string, one *[1][]byte) ([][]byte, int, error) {
	headers := withTrace(o.headers, traceparent)
	p := wire.Publish{
		Name: name, Ack: o.ack, Shard: t.shard, Key: o.key,
		Conditional: spec.conditional, ExpectedOffset: spec.expected,
		Idempotent: spec.idempotent, ProducerID: spec.producer, Sequence: spec.sequence,
	}
	if t.anyShard {
		p.Shard = wire.AnyShard
	}
	var frames [][]byte
	recBytes := 0
	if o.ack == AckPerMessage {
		frames = make([][]byte, len(payloads))
		for i := range payloads {
			frames[i], recBytes = appendPublishFrame(p, o.key, headers, payloads[i:i+1])
		}
	} else {
		one[0], recBytes = appendPublishFrame(p, o.key, headers, payloads)
		frames = one[:]
	}
	maxSend := c.session().maxSend
	for _, f := range frames {
		if n := len(f) - wire.HeaderSize; n > int(maxSend) {
			return nil, 0, &wire.Error{Code: wire.CodeFrameTooLarge, Detail: uint64(maxSend),
				Message: fmt.Sprintf("publish of %d bytes exceeds the node's maximum frame of %d", n, maxSend)}
		}
	}
	return frames, recBytes, nil
}

// publishFrameOverhead bounds the bytes of a Publish frame besides its name,
// key and records block: header, name lengths, ack, flags, shard, key length,
// expected offset, producer id, sequence and count.
const publishFrameOverhead = wire.HeaderSize + 3 + 1 + 1 + 4 + 2 + 8 + 8 + 8 + 4

// appendPublishFrame encodes one Publish frame of p with a record per
// payload, each with key and headers, with request id 0, and returns it
// with the size of its records block (which ends the frame). The records
// are encoded in place, after the frame's head (the frame is
// wire.AppendPublish's, without a copy of the records block), from one
// wire.Record on the stack: a slice of them cost 72 bytes per record. The
// frame's buffer comes from frameBuffers; a publish acknowledged in full
// gives its frames back (publishRequest.frameSettled).
func appendPublishFrame(p wire.Publish, key []byte, headers []wire.RecordHeader, payloads [][]byte) ([]byte, int) {
	var rec [1]wire.Record
	rec[0] = wire.Record{Key: key, Headers: headers}
	n := 0
	for _, pl := range payloads {
		rec[0].Payload = pl
		n += wire.RecordsSize(rec[:])
	}
	p.Records = nil
	p.Count = uint32(len(payloads))
	size := publishFrameOverhead + len(p.Name.Tenant) + len(p.Name.Namespace) + len(p.Name.Stream) + len(p.Key) + n
	f := wire.AppendPublish(frameBuffers.get(size), 0, p)
	for _, pl := range payloads {
		rec[0].Payload = pl
		f = wire.AppendRecord(f, &rec[0])
	}
	binary.BigEndian.PutUint32(f[0:4], uint32(len(f)-wire.HeaderSize))
	return f, n
}

// ConditionalResult is the outcome of PublishIf.
type ConditionalResult struct {
	// Written reports whether the batch was written.
	Written bool
	// Shard is the shard the batch was for.
	Shard uint32
	// Offset is the offset of the batch's first record, when written.
	Offset uint64
	// Tail is the shard's tail when the publish was refused: the offset to
	// expect next time.
	Tail uint64
}

// PublishIf publishes payloads as one batch, written only if the tail of
// the shard it goes to (the offset the batch would start at) is
// expectedOffset. The node checks it where it assigns offsets, so of two
// writers expecting the same offset exactly one is written. WithKey routes
// the batch (as for PublishBatch; without a key it goes to shard 0) and
// WithHeaders adds headers; the ack mode is AckPerBatch (another WithAck is
// ErrInvalidRequest). A refusal is a result with Written false and Tail set,
// and a nil error; it consumes no offset. Other failures are errors;
// conditional publishes need a durable stream (ErrInvalidRequest otherwise).
//
// If the outcome is unknown (the connection failed, or ctx ended after the
// publish was sent), do not re-send blindly: a re-send would be refused by
// your own write. Read the shard at expectedOffset to see whether it landed.
func (c *Client) PublishIf(ctx context.Context, name StreamName, payloads [][]byte, expectedOffset uint64, opts ...PublishOption) (ConditionalResult, error) {
	if c.session().welcome.Features&wire.FeaturePublishConditional == 0 {
		return ConditionalResult{}, wire.Errorf(wire.CodeInvalidRequest, "the node does not support conditional publishes")
	}
	o := publishOptionsOf(opts)
	res := c.publishSync(ctx, name, payloads, &o, publishSpec{conditional: true, expected: expectedOffset})
	if res.err != nil {
		var we *wire.Error
		if res.refused && errors.As(res.err, &we) && we.Code == wire.CodeConditionFailed {
			return ConditionalResult{Shard: res.shard, Tail: we.Detail}, nil
		}
		return ConditionalResult{}, res.err
	}
	return ConditionalResult{Written: true, Shard: res.ack.Shard, Offset: res.ack.Offset}, nil
}

// PublishFuture is the pending result of PublishAsync.
type PublishFuture struct {
	c   *Client
	req *publishRequest
}

// Wait waits for the publish's ack, or for ctx to end (then it returns ctx's
// error and the publish goes on: Wait may be called again). It is safe to
// call from several goroutines.
func (f *PublishFuture) Wait(ctx context.Context) (PublishAck, error) {
	res := f.wait(ctx)
	return res.ack, res.err
}

// wait is Wait returning the whole result.
func (f *PublishFuture) wait(ctx context.Context) publishResult {
	select {
	case <-f.req.settled:
		return f.req.res
	default:
	}
	select {
	case <-f.req.settled:
		return f.req.res
	case <-ctx.Done():
		return publishResult{err: ctx.Err()}
	case <-f.c.connStopped:
		// The actors that settle publishes have stopped, having settled
		// what they held.
		select {
		case <-f.req.settled:
			return f.req.res
		default:
			return publishResult{err: f.c.stoppedErr()}
		}
	}
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
