// Package client is Herald's Go client: Dial a node, create and describe
// streams, publish records and subscribe to a shard's records, over one QUIC
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
//	sub, err := c.Subscribe(ctx, orders, client.FromEarliest(), client.OnShard(ack.Shard))
//	ev, err := sub.Next(ctx)
//
// # Publishing
//
// Acked publishes are pipelined: many may be in flight on one QUIC stream,
// and each caller's result resolves when its ack arrives. PublishAsync
// returns as soon as the publish is queued, so one goroutine can keep many
// in flight and Wait for them in order. Two bounds hold a publisher back: the
// client's in-flight byte budget (WithPublishInflightBytes, 4 MiB by default;
// a publish holds its bytes until its ack arrives) and the node's publish
// window (Welcome.PublishWindow acked publishes unanswered per QUIC stream).
// All publishes to one stream name travel on one QUIC stream, in the order
// they were issued.
//
// A publish whose context ends after it was written may still be applied by
// the node: the caller gets the context's error and the outcome is unknown
// (wire.RetryOutcomeUnknown).
//
// # Subscribing
//
// A Subscription receives one shard's records in offset order, each offset
// at most once. It keeps a bounded number of received frames; past that it
// stops reading its QUIC stream and flow control pushes back to the node.
//
// # Errors
//
// Errors the node sends are *Error values (an alias of wire.Error) with a
// stable Code; compare them with errors.Is against the Err* sentinels, which
// match by code. ErrClosed is returned after Close. A connection failure fails
// every pending call with an error wrapping its cause; a malformed frame from
// the node closes the connection and fails calls with a *Error of
// CodeMalformedFrame (or the decoder's code).
//
// # Inside
//
// The client is actor-backed (protoactor-go), one actor system per Client:
//
//	connection actor        owns the control stream, pending control calls by
//	│                       request id, and the routing of stream names to
//	│                       publish streams
//	├── publish stream (≤ WithPublishStreams)
//	│                       owns one QUIC publish stream's send side and its
//	│                       unacknowledged publishes; a reader goroutine feeds
//	│                       it acks
//	└── subscription (one per Subscribe)
//	                        owns one subscription stream and its received
//	                        frames; a reader goroutine feeds it EventBatch
//	                        frames, and Next asks it for the next event
//
// The exported methods are the Go-shaped doors into these actors: they send a
// message carrying a reply channel and wait on it, their context, and the
// client's shutdown. Every goroutine the client starts (one reader per QUIC
// stream) is owned by the client and waited for by Close.
package client
