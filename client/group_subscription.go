package client

import (
	"context"
	"go.opentelemetry.io/otel/trace"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// DefaultGroupWindow is a group member's credit window, in records, unless
// WithWindow says otherwise.
const DefaultGroupWindow = 100

// GroupSubscribeOption configures Group.Subscribe.
type GroupSubscribeOption func(*groupSubscribeOptions)

// groupSubscribeOptions is what the GroupSubscribeOptions set.
type groupSubscribeOptions struct {
	member     string
	window     int
	maxPerPush int
	heartbeat  time.Duration
	// clock times heartbeats (tests inject a fake one).
	clock clock
}

// WithMember joins the group as member id (1-64 bytes of [A-Za-z0-9._-]).
// Without it the node names the member; Assignment().Member says the name.
// Either way the member keeps its id for its life: after a lost connection
// it rejoins as the same member (with the name the node gave it, if it
// gave one), so the node hands it back its shards and drops the old
// membership at once, instead of waiting out the old one's session.
func WithMember(id string) GroupSubscribeOption {
	return func(o *groupSubscribeOptions) { o.member = id }
}

// WithWindow asks for a credit window of n records: the node pushes at most
// n records the member has not acked (default DefaultGroupWindow; n must be
// positive; the node caps it). Assignment().Window is the grant.
func WithWindow(n int) GroupSubscribeOption {
	return func(o *groupSubscribeOptions) { o.window = n }
}

// WithMaxPerPush asks for at most n records per Delivery (default 0: as
// many as the window allows; the node caps it at the window).
func WithMaxPerPush(n int) GroupSubscribeOption {
	return func(o *groupSubscribeOptions) { o.maxPerPush = n }
}

// WithHeartbeat sets how long the member may send nothing before the
// GroupMember sends a heartbeat by itself, so the node does not expire the
// member while the application works on its records. Acks count as
// heartbeats. The default (d == 0) is a third of the session timeout the
// node grants (Assignment().Session); d < 0 turns automatic heartbeats off,
// and the member must then Ack or Heartbeat within the session timeout.
func WithHeartbeat(d time.Duration) GroupSubscribeOption {
	return func(o *groupSubscribeOptions) { o.heartbeat = d }
}

// Cursor is the opaque token of one Delivery, which GroupMember.Ack sends
// to commit exactly that delivery's records. It is valid only on the group
// stream it came from, for the membership it was pushed in.
type Cursor []byte

// Delivery is one push of records to a group member.
type Delivery struct {
	// Records are the pushed records, claimed for this member.
	Records []GroupRecord
	// Cursor names them to the node when the Delivery is acked
	// (GroupMember.Ack).
	Cursor Cursor
	// Trace is the delivery's consumer span (the child of its record's
	// publish span, or with a link to each record's): a parent for its
	// processing. Invalid when no record carries trace context.
	Trace trace.SpanContext
	// join is the membership the delivery was pushed in (the member's
	// count of joins; 0 for a Delivery not from Next): an Ack of it after
	// the member rejoined fails with ErrStaleCursor without asking the
	// node.
	join uint64
}

// GroupAssignment is what a group member has, as the node last said (in
// answer to the join, an Ack or a heartbeat).
type GroupAssignment struct {
	// Member is the member's id.
	Member string
	// Generation is the group's membership generation.
	Generation uint64
	// Shards are the shards assigned to the member (empty: it waits idle,
	// for example while the group has more members than the stream has
	// shards).
	Shards []uint32
	// Window and MaxPerPush are the granted credit window and push cap.
	Window     uint32
	MaxPerPush uint32
	// Session is how long the member may send nothing (no ack, no
	// heartbeat) before the node removes it.
	Session time.Duration
	// InFlight is how many pushed records the member had not acked when the
	// node answered.
	InFlight uint32
}

// GroupMember is a push member of a consumer group (Group.Subscribe), on
// its own QUIC stream: the node assigns it shards of the stream, pushes
// their records within its credit window, and expects each Delivery to be
// acked. It survives the client's reconnects, rejoining as the same member
// (see Next). Records pushed to it and not acked are delivered again (to it or
// another member) after the group's visibility timeout, or at once when the
// member leaves; a Delivery not acked keeps its place in the window until it
// is, and a member that holds its whole window unacked past the visibility
// timeout is removed (Next returns ErrSessionExpired; subscribe again). Its
// methods are safe for concurrent use; Close it when done.
type GroupMember struct {
	subscriptionHandle
	// stream names the stream in spans; traces remembers each recent
	// delivery's consumer span, for its Ack's span.
	stream string
	traces deliveryTraces
	// assignment holds the latest assignment (the actor stores).
	assignment *atomic.Pointer[GroupAssignment]
}

// Subscribe joins the group as a push member and returns once the node
// accepted (Assignment says what it was given) or refused it
// (ErrStreamNotFound, ErrStreamNotDurable, ErrInvalidRequest, ...). ctx
// bounds only that wait. A bad stream, group or member name, a WithWindow
// below 1, a negative WithMaxPerPush, or a node without consumer groups fail with
// ErrInvalidStreamName or ErrInvalidRequest before anything is sent.
func (g *Group) Subscribe(ctx context.Context, opts ...GroupSubscribeOption) (*GroupMember, error) {
	c, name, group := g.c, g.stream, g.name
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	o := groupSubscribeOptions{window: DefaultGroupWindow, clock: realClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.member != "" {
		if err := wire.ValidateGroupName("member", o.member); err != nil {
			return nil, err
		}
	}
	if o.window <= 0 || int64(o.window) > math.MaxUint32 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "window %d out of range", o.window)
	}
	if o.maxPerPush < 0 || int64(o.maxPerPush) > math.MaxUint32 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "max per push %d out of range", o.maxPerPush)
	}

	stopped := make(chan struct{})
	assignment, waiting := new(atomic.Pointer[GroupAssignment]), new(atomic.Int32)
	spawn := &groupSubscriptionSpawnRequest{
		init: &groupSubscriptionInit{
			join: wire.GroupSubscribe{Name: name, Group: group, Member: o.member,
				Window: uint32(o.window), MaxPerPush: uint32(o.maxPerPush)},
			heartbeat: o.heartbeat, clock: o.clock, assignment: assignment, waitingStream: waiting, stopped: stopped,
		},
		reply: make(chan subscriptionSpawned, 1),
	}
	c.send(c.conn, spawn)
	var spawned subscriptionSpawned
	select {
	case spawned = <-spawn.reply:
	case <-ctx.Done():
		spawned.err = ctx.Err()
	case <-c.connStopped:
		spawned.err = c.stoppedErr()
	}
	if spawned.err != nil && spawned.pid == nil {
		spawn.mu.Lock()
		spawn.abandoned = true
		spawn.mu.Unlock()
		select {
		case r := <-spawn.reply:
			if r.pid != nil {
				// Spawned after all: leave the group.
				m := &GroupMember{subscriptionHandle: newSubscriptionHandle(c, r.pid, stopped)}
				_ = m.Close()
			}
		default:
		}
		return nil, spawned.err
	}

	m := &GroupMember{subscriptionHandle: newSubscriptionHandle(c, spawned.pid, stopped), assignment: assignment, stream: name.String()}
	await := &groupJoinAwait{reply: make(chan error, 1)}
	c.send(m.pid, await)
	var err error
	select {
	case err = <-await.reply:
	case <-ctx.Done():
		err = streamWait(waiting, ctx.Err())
	case <-stopped:
		select {
		case err = <-await.reply:
		default:
			err = c.stoppedErr()
		}
	}
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

// Assignment returns the member's assignment as the node last said: in
// answer to the join, then to each Ack and heartbeat. A rebalance shows here
// once the member's next Ack or heartbeat is answered.
func (m *GroupMember) Assignment() GroupAssignment {
	p := m.assignment.Load()
	if p == nil {
		return GroupAssignment{}
	}
	a := *p
	a.Shards = slices.Clone(a.Shards)
	return a
}

// Next returns the next Delivery, waiting for one until ctx ends. Process
// its records and Ack it; until then they count against the member's
// window.
//
// When the node ends the member (its *Error with ErrSessionExpired,
// ErrStreamNotFound, ...), or the group stream fails, Next returns that
// error on every call; deliveries not yet taken are dropped (the group
// delivers their records again).
//
// A lost connection, or a node that drains (ErrShuttingDown), does not end
// the member: while the client reconnects Next waits, and the member
// rejoins on the new connection as the same member (WithMember), its
// deliveries not yet taken dropped; the group delivers their records again
// as its rules say (when the old membership's claims are let go, or lapse
// after the group's visibility timeout). Only if the client gives
// up reconnecting (or WithoutReconnect) does Next return the connection's
// error. After Close it returns ErrSubscriptionClosed, after the client's
// Close ErrClosed.
func (m *GroupMember) Next(ctx context.Context) (Delivery, error) {
	select {
	case <-m.closed:
		return Delivery{}, ErrSubscriptionClosed
	default:
	}
	req := &groupNextRequest{reply: make(chan groupNextResult, 1)}
	m.c.send(m.pid, req)
	select {
	case r := <-req.reply:
		if r.err == nil {
			r.d.Trace = m.c.tracer.receiveBatch(m.stream, r.d.Records)
			m.traces.put(r.d.Cursor, r.d.Trace)
		}
		return r.d, r.err
	case <-m.stopped:
		select {
		case r := <-req.reply:
			return r.d, r.err
		default:
			return Delivery{}, m.stoppedErr()
		}
	case <-ctx.Done():
	}
	// Withdraw the request; a delivery the actor sent meanwhile is returned
	// rather than lost.
	cancel := &groupNextCancelled{req: req, ack: make(chan struct{}, 1)}
	m.c.send(m.pid, cancel)
	select {
	case <-cancel.ack:
	case <-m.stopped:
	}
	select {
	case r := <-req.reply:
		if r.err == nil {
			return r.d, nil
		}
	default:
	}
	return Delivery{}, ctx.Err()
}

// Ack commits every record of d, a Delivery that Next returned, in one
// request named by d.Cursor; once the commit is durable the node returns
// exactly their credit (len(d.Records)) to the member's window. It blocks
// until the node answers; the answer
// also refreshes Assignment. Acks may be issued concurrently: each waits for
// its own answer. Acks count as heartbeats.
//
// A Delivery without a cursor, or with a cursor over 65535 bytes, fails with
// ErrInvalidRequest before anything is sent. The node's refusal leaves the
// group stream going: ErrStaleCursor (the cursor's membership ended; its
// records are delivered again) or ErrInvalidCursor. If the member ended, Ack
// returns what ended it; after Close, ErrSubscriptionClosed. An Ack whose
// ctx ends before the answer returns ctx's error; the node may still apply
// it.
//
// Across a lost connection: an Ack sent and unanswered when the connection
// went fails with an error matching ErrOutcomeUnknown (the commit may have
// happened; if not, the records are delivered again), and an Ack of a
// Delivery taken before the member rejoined fails at once with
// ErrStaleCursor, without asking the node (its membership ended with the
// connection; its records are delivered again). A Heartbeat made while the
// member rejoins waits for the rejoin.
func (m *GroupMember) Ack(ctx context.Context, d Delivery) error {
	switch {
	case len(d.Cursor) == 0:
		return wire.Errorf(wire.CodeInvalidRequest, "ack of a delivery without a cursor: ack a Delivery that Next returned")
	case len(d.Cursor) > wire.MaxCursorBytes:
		return wire.Errorf(wire.CodeInvalidRequest, "cursor of %d bytes exceeds %d", len(d.Cursor), wire.MaxCursorBytes)
	case int64(len(d.Records)) > math.MaxUint32:
		return wire.Errorf(wire.CodeInvalidRequest, "ack of %d records", len(d.Records))
	}
	return m.ack(ctx, d.Cursor, len(d.Records), d.join)
}

// Heartbeat tells the node the member is alive without acking anything (an
// empty ack), and refreshes Assignment from the answer: a rebalance shows
// there once a heartbeat or an Ack is answered. The member heartbeats by
// itself (WithHeartbeat); call Heartbeat to learn of a rebalance sooner. It
// blocks until the node answers; errors as Ack.
func (m *GroupMember) Heartbeat(ctx context.Context) error {
	return m.ack(ctx, nil, 0, 0)
}

// ack sends a GroupStreamAck of count records named by cursor (none: a
// heartbeat) and waits for the node's answer.
func (m *GroupMember) ack(ctx context.Context, cursor Cursor, count int, join uint64) error {
	select {
	case <-m.closed:
		return ErrSubscriptionClosed
	default:
	}
	req := &groupAckRequest{cursor: cursor, count: uint32(count), join: join, reply: make(chan error, 1)}
	m.c.send(m.pid, req)
	select {
	case err := <-req.reply:
		if len(cursor) > 0 {
			m.c.tracer.settle(m.stream, m.traces.take(cursor), count, err)
		}
		return err
	case <-m.stopped:
		select {
		case err := <-req.reply:
			return err
		default:
			return m.stoppedErr()
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close leaves the group: it closes the group stream both ways (the node
// then removes the member at once and delivers its unacked records again),
// and stops the subscription's actor and goroutines, waiting for them.
// Pending and later Next and Ack calls return ErrSubscriptionClosed. It is
// idempotent and returns nil.
func (m *GroupMember) Close() error {
	m.close(&groupUnsubscribeRequest{})
	return nil
}
