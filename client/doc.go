// Package client is Herald's Go client: Dial a node, manage streams,
// publish records (keyed, conditional, idempotent), subscribe to them, read
// ranges of them and consume them in consumer groups, over one QUIC
// connection.
//
// # Shape
//
// A *Client is a QUIC connection to a node that reconnects when it is lost
// (see Reconnecting). Its methods take a context.Context, block until the
// node answers (or the context ends) and are safe for concurrent use:
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
// Publishes that queue on a shard's publish stream while another is written
// (or waits for the window) are written as one Publish frame when they may
// share it: plain one-frame publishes (AckPerBatch or AckNone) of the same
// stream, shard, key and ack mode, up to 4096 records and 256 KiB of records
// per frame. Nothing waits to be merged, and each caller still gets its own
// offsets or error; conditional, idempotent and AckPerMessage publishes are
// never merged. A merged frame is stored as one batch.
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
// # Replicas
//
// A replicated stream's shard is held by several nodes, a leader and
// followers, each with the same committed records at the same offsets.
// WithReplica chooses which serves Subscribe and Read: ReplicaNearest (the
// default), the replica on the node the client is connected to, or
// ReplicaLeader. A follower behind its leader (cut off from it, or too far
// behind) refuses with ErrReplicaBehind, or ends a subscription with it:
// a Client dialled with several addresses then moves to the next and
// resumes after the last record it received. A ClusterClient
// (DialCluster) keeps each shard of a subscription at its replica and
// moves it alone, with no gap and no duplicate, when its node is lost or
// drains, its replica falls behind, or, with ReplicaLeader, stops leading:
//
//	cc, err := client.DialCluster(ctx, "a:7400,b:7400,c:7400", client.WithReplica(client.ReplicaLeader))
//	sub, err := cc.Subscribe(ctx, orders)
//	ev, err := sub.Next(ctx)
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
// # Reconnecting
//
// Dial takes one address or several ("a:7400,b:7400", and WithSeeds) and
// tries them in turn, each within WithDialTimeout (2 s): where nothing
// answers (QUIC runs over UDP, which has no "connection refused") the
// error is a *DialError naming the address and matching ErrNoNodeAnswered.
// Dial itself does not retry.
//
// Once connected, a lost connection is noticed within WithIdleTimeout (5 s)
// when the node stops answering, at once when it closes the connection or
// sends GoAway, and at the next packet the client sends once a node
// restarted on its address is listening (it answers with a QUIC stateless
// reset). The client then reconnects by itself, on by default: its
// attempts are paced by an exponential backoff with jitter and bounded by
// count and time (WithReconnect(Reconnect{...}); 2 minutes by default;
// WithoutReconnect turns it off), and each dials the addresses in turn.
// WithConnectionEvents tells the application: ConnectionDisconnected,
// ConnectionReconnected, and ConnectionClosed once the client will not
// connect again. Meanwhile, and on the new connection:
//
//   - calls wait for the connection, honouring their contexts; a read-only
//     control call (DescribeStream, ListStreams, Read, Group.Describe,
//     Group.DeadLetters) that was unanswered is sent again, a change
//     (CreateStream, DeleteStream, Group.Poll, Ack, Nack, ...) fails with an
//     error matching ErrOutcomeUnknown;
//   - publishes not yet written wait, within the in-flight byte budget
//     (WithPublishInflightBytes), and are written on the new connection in
//     order; a plain publish written and unanswered fails with
//     ErrOutcomeUnknown; a Producer's is sent again and the node's dedup
//     makes it exactly once; one the node refused with ErrShuttingDown is
//     sent again;
//   - a Subscription resubscribes each shard one past the last record it
//     received: no gap and no duplicate on a durable stream; what the node
//     no longer has (an ephemeral stream after its node restarted) is
//     reported in line by Next as a *GapError;
//   - a GroupMember rejoins as the same member (with the id the node gave
//     it, if it gave one); its records come back as the group's rules say,
//     and an Ack of a Delivery from before the rejoin is ErrStaleCursor.
//
// When the client gives up, every call fails with a *ReconnectError. Close
// during a reconnect stops it at once; calls then fail with ErrClosed.
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
// *LaggedError, *OffsetOutOfRangeError and *ShardError from subscriptions
// (a shard a follower behind its leader ended: ErrReplicaBehind),
// *ProducerError from a Producer, *GapError from a resumed subscription,
// *DialError from Dial and *ReconnectError once reconnecting gave up.
// ErrClosed is returned after Close. A malformed frame from the node closes
// the connection with a *Error of CodeMalformedFrame (or the decoder's
// code), which ends the subscription or member it came for and fails the
// read-only calls waiting on the control stream (changes fail in doubt,
// ErrOutcomeUnknown); the client then reconnects for the rest.
//
// # Inside
//
// The client is actor-backed (protoactor-go), one actor system per Client:
//
//	connection actor        owns the control stream, pending control calls by
//	│                       request id, the routing of (stream, shard)
//	│                       pairs to publish streams, and reconnecting: a
//	│                       reconnect loop goroutine dials, paced by a
//	│                       backoff; the actor hands each new session to
//	│                       its children, which resume on it
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
// stream, one heartbeat goroutine per group subscription, the reconnect loop
// and the connection events' dispatcher) is owned by the client and waited
// for by Close. The rules of reconnecting are plain code with no I/O, tested
// on their own: backoff (the schedule), planLoss (what becomes of a publish
// stream's frames), shardResume and eventQueue (where a shard resumes and
// the gap it reports).
package client
