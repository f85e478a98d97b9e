// Package client is Herald's Go client: Dial a node, manage streams,
// publish records (keyed, conditional, idempotent), subscribe to them, read
// ranges of them and consume them in consumer groups, over one QUIC
// connection.
//
// # Shape
//
// A *Client is one QUIC connection to one node. Its methods take a
// context.Context, block until the node answers (or the context ends) and are
// safe for concurrent use:
//
//	c, err := client.Dial(ctx, "127.0.0.1:7400", client.WithCAFile("data/tls/ca.pem"))
//	if err != nil { ... }
//	defer c.Close()
//	orders := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
//	_, err = c.CreateStream(ctx, orders, client.StreamConfig{Shards: 4, Durable: true})
//	ack, err := c.Publish(ctx, orders, []byte("hello"), client.WithKey([]byte("customer-7")))
//	sub, err := c.Subscribe(ctx, orders, client.WithStartEarliest()) // every shard, merged
//	ev, err := sub.Next(ctx)
//	page, err := c.Read(ctx, orders, ack.Shard, ack.Offset, client.ReadToTail)
//
// # Publishing
//
// The client picks each publish's shard itself: it learns a stream's shard
// count and routing with one DescribeStream on the first publish to it
// (cached; refreshed when the node answers ErrInvalidShard or
// ErrStreamNotFound), maps the key to a shard with wire.ShardFor (unkeyed
// publishes go to shard 0) and sends the publish to that shard explicitly.
// Each (stream, shard) it publishes to gets a QUIC publish stream of its own,
// up to WithPublishStreams (publish_shard_streams, 4 by default; later ones
// share them round-robin), so a stalled shard holds up only the publishes
// that share its stream. All publishes of one client to one shard travel on
// one QUIC stream, in the order they were issued.
//
// Acked publishes are pipelined: many may be in flight on one QUIC stream,
// and each caller's result resolves when its ack arrives. PublishAsync
// returns as soon as the publish is queued, so one goroutine can keep many
// in flight and Wait for them in order. Two bounds hold a publisher back: the
// client's in-flight byte budget (WithPublishInflightBytes, 4 MiB by default;
// a publish holds its bytes until its ack arrives) and the node's publish
// window (Welcome.PublishWindow acked publishes unanswered per QUIC stream).
//
// A publish whose context ends after it was written may still be applied by
// the node: the caller gets the context's error and the outcome is unknown
// (wire.RetryOutcomeUnknown).
//
// PublishIf is a conditional publish: written only if the shard's tail is
// the offset the writer expects. A Producer is an idempotent producer: its
// re-sends of a batch already written are recognised and not written twice.
//
// # Reading
//
// Subscribe pushes records as they are written: a Subscription of one shard
// (WithShard) or of every shard of a stream, merged, each shard in offset
// order, each offset at most once. It keeps a bounded number of received
// frames per shard; past that it stops reading the shard's QUIC stream and
// flow control pushes back to the node. A subscription that falls behind
// its queue on a durable stream is ended by the node with a *LaggedError;
// with WithAutoResume it resubscribes there by itself.
//
// Read reads one page of a shard's committed records from an offset,
// without subscribing.
//
// # Consumer groups
//
// A consumer group shares a durable stream's records among consumers, each
// record settled once. Every group call goes through the group's handle,
// c.Group(stream, name). Pull consumers claim records of one shard with
// Poll and settle them with Ack or Nack (each returns how many records the
// node settled); push members join with Subscribe, are assigned shards by
// the node, receive Deliveries within their credit window (WithWindow) and
// Ack each Delivery, which commits its records and, once that is durable,
// returns their credit. A claim not settled within the group's visibility
// timeout is delivered again; after the group's maximum of attempts the
// record becomes a dead letter (DeadLetters, Redrive, Discard). A push
// member that sends nothing for the session timeout is removed; the
// GroupMember heartbeats by itself (WithHeartbeat). Describe shows a
// group's cursors, claims and members:
//
//	g := c.Group(orders, "fulfilment")
//	recs, err := g.Poll(ctx, 0, 32, 5*time.Second)
//	n, err := g.Ack(ctx, recs...)
//	m, err := g.Subscribe(ctx)
//	d, err := m.Next(ctx)
//	err = m.Ack(ctx, d)
//
// # Options and headers
//
// Every optional setting is a functional option named WithX, typed for the
// call it configures: Option for Dial (WithCAFile, WithToken, ...),
// PublishOption for every publishing call (WithAck, WithKey, WithHeaders),
// SubscribeOption (WithShard, WithStartOffset, ...), ReadOption
// (WithMaxRecords, WithMaxBytes) and GroupSubscribeOption (WithWindow,
// WithMember, ...). A record's headers are Headers, an ordered list of
// Header, both on the way in (WithHeaders) and on the way out
// (Event.Headers, GroupRecord.Headers).
//
// # Errors
//
// Errors the node sends are *Error values (an alias of wire.Error) with a
// stable Code; compare them with errors.Is against the Err* sentinels, which
// match by code. Where callers need more, typed errors wrap them and say so:
// *LaggedError, *OffsetOutOfRangeError and *ShardError from subscriptions,
// *ProducerError from a Producer. ErrClosed is returned after Close. A connection failure fails
// every pending call with an error wrapping its cause; a malformed frame from
// the node closes the connection and fails calls with a *Error of
// CodeMalformedFrame (or the decoder's code).
//
// # Inside
//
// The client is actor-backed (protoactor-go), one actor system per Client:
//
//	connection actor        owns the control stream, pending control calls by
//	│                       request id, and the routing of (stream, shard)
//	│                       pairs to publish streams
//	├── publish stream (≤ WithPublishStreams)
//	│                       owns one QUIC publish stream's send side and its
//	│                       unacknowledged publishes; a reader goroutine feeds
//	│                       it acks
//	├── subscription (one per Subscribe)
//	│                       owns the subscription's QUIC streams (one per
//	│                       shard) and their received frames; per shard a
//	│                       reader goroutine opens the stream, subscribes and
//	│                       feeds it EventBatch frames, and Next asks it for
//	│                       the next event
//	└── group subscription (one per Group.Subscribe)
//	                        owns one group stream: writes the join, acks and
//	                        heartbeats, matches the node's answers by request
//	                        id and holds pushed deliveries; a reader goroutine
//	                        feeds it the node's frames, a heartbeat goroutine
//	                        wakes it when a heartbeat may be due
//
// The shard descriptions publishes are routed with are a small cache shared
// by the callers (routeTable), not an actor: a caller that misses it
// describes the stream itself.
//
// The exported methods are the Go-shaped doors into these actors: they send a
// message carrying a reply channel and wait on it, their context, and the
// client's shutdown. Every goroutine the client starts (one reader per QUIC
// stream, one heartbeat goroutine per group subscription) is owned by the
// client and waited for by Close.
package client
