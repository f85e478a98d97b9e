package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/heraldmq/herald/net/wire"
)

// routeTable caches, per stream name, what the client needs to pick a
// publish's shard itself: the stream's shard count and routing, learned with
// DescribeStream on the first publish to the name (or from CreateStream and
// DescribeStream calls). The client then sets Publish.Shard explicitly and
// sends the publish on that shard's QUIC stream.
//
// A name the node does not know (describe answered stream_not_found) is
// cached as missing while publishes to it are in flight: they go out with
// wire.AnyShard, so a node that auto-creates streams creates it and routes
// them, and once the last of them is answered the entry is dropped so that
// the next publish describes the stream again.
//
// An entry is dropped too when a publish with an explicit shard is refused
// with invalid_shard or stream_not_found (the stream was deleted, or
// re-created with another shard count).
//
// It is shared by the callers' goroutines and the publish-stream actors
// (which report settled publishes); mu guards the map and every entry's
// anyInFlight. It does no I/O while holding mu.
//
// last is the described entry a lookup found last, read without mu: a
// client publishing to one stream finds its route with one atomic load and
// a name comparison instead of a lock and a hash of three strings. Every
// change to the map clears it, under mu, and lookup sets it only to the
// map's own entry, under mu, so it never holds an entry the map has
// dropped.
type routeTable struct {
	last atomic.Pointer[streamRoute]
	mu   struct {
		sync.Mutex
		// m maps a stream name to its current entry.
		m map[wire.StreamName]*streamRoute
	}
}

// streamRoute is one cached stream description, or one being fetched.
type streamRoute struct {
	// name is the stream's name.
	name wire.StreamName
	// ready is closed once the fields below it are set; they never change
	// afterwards.
	ready chan struct{}
	// shards is the stream's shard count (at least 1).
	shards uint32
	// routing is the stream's routing.
	routing wire.Routing
	// missing is set when the node answered stream_not_found.
	missing bool
	// err is set when the describe failed otherwise (the entry is then
	// removed from the table).
	err error

	// anyInFlight counts the unsettled AnyShard publishes sent while the
	// stream was missing; guarded by routeTable.mu.
	anyInFlight int
}

func newRouteTable() *routeTable {
	t := &routeTable{}
	t.mu.m = make(map[wire.StreamName]*streamRoute)
	return t
}

// cached returns name's entry if it is the described entry a lookup found
// last, else nil.
func (t *routeTable) cached(name wire.StreamName) *streamRoute {
	if r := t.last.Load(); r != nil && r.name == name {
		return r
	}
	return nil
}

// lookup returns name's entry; owner reports that it was just created and
// the caller must fill it (describe, then finish).
func (t *routeTable) lookup(name wire.StreamName) (r *streamRoute, owner bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r = t.mu.m[name]; r != nil {
		if isClosed(r.ready) && r.err == nil && !r.missing {
			t.last.Store(r)
		}
		return r, false
	}
	r = &streamRoute{name: name, ready: make(chan struct{})}
	t.mu.m[name] = r
	return r, true
}

// drop removes name's entry if it is r (any entry when r is nil); mu is
// held.
func (t *routeTable) drop(name wire.StreamName, r *streamRoute) {
	if cur := t.mu.m[name]; cur != nil && (r == nil || cur == r) {
		delete(t.mu.m, name)
		t.last.CompareAndSwap(cur, nil)
	}
}

// finish fills r, created by lookup, with the outcome of describing name.
func (t *routeTable) finish(name wire.StreamName, r *streamRoute, info wire.StreamInfo, err error) {
	switch {
	case err == nil:
		r.shards, r.routing = max(info.Config.Shards, 1), info.Config.Routing
	case errors.Is(err, ErrStreamNotFound):
		r.missing = true
	default:
		r.err = err
		t.mu.Lock()
		t.drop(name, r)
		t.mu.Unlock()
	}
	close(r.ready)
}

// learn caches info (from CreateStream or DescribeStream), unless a
// describe of the name is in progress.
func (t *routeTable) learn(info wire.StreamInfo) {
	r := &streamRoute{name: info.Name, ready: make(chan struct{}), shards: max(info.Config.Shards, 1), routing: info.Config.Routing}
	close(r.ready)
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur := t.mu.m[info.Name]; cur != nil && !isClosed(cur.ready) {
		return
	}
	t.drop(info.Name, nil)
	t.mu.m[info.Name] = r
}

// forget drops name's entry (the stream was deleted).
func (t *routeTable) forget(name wire.StreamName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drop(name, nil)
}

// invalidate drops r if it is still name's entry.
func (t *routeTable) invalidate(name wire.StreamName, r *streamRoute) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drop(name, r)
}

// anySent records an AnyShard publish sent on r's behalf.
func (t *routeTable) anySent(r *streamRoute) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.anyInFlight++
}

// anySettled records that an AnyShard publish settled; after the last one,
// r is dropped so that the next publish describes the stream again.
func (t *routeTable) anySettled(name wire.StreamName, r *streamRoute) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.anyInFlight--
	if r.anyInFlight <= 0 {
		t.drop(name, r)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// publishTarget is where one publish goes.
type publishTarget struct {
	// route is the description the shard was picked with.
	route *streamRoute
	// shard is the publish's shard; with anyShard, the shard whose QUIC
	// stream carries it (0).
	shard uint32
	// anyShard: the stream was missing; the node routes the publish.
	anyShard bool
}

// resolveRoute returns name's description, describing the stream if the
// client has none cached. Concurrent first publishes to a name share one
// describe.
func (c *Client) resolveRoute(ctx context.Context, name wire.StreamName) (*streamRoute, error) {
	if r := c.routes.cached(name); r != nil {
		return r, nil
	}
	for {
		r, owner := c.routes.lookup(name)
		if owner {
			info, err := c.describe(ctx, name)
			c.routes.finish(name, r, info, err)
		}
		select {
		case <-r.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, ErrClosed
		}
		if r.err == nil {
			return r, nil
		}
		// Another caller's describe was cut short by its context: describe
		// again with ours.
		if !owner && ctx.Err() == nil && (errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded)) {
			continue
		}
		return nil, r.err
	}
}

// target picks the shard of a publish to name with key.
func (c *Client) target(ctx context.Context, name wire.StreamName, key []byte) (publishTarget, error) {
	r, err := c.resolveRoute(ctx, name)
	if err != nil {
		return publishTarget{}, err
	}
	if r.missing {
		return publishTarget{route: r, anyShard: true}, nil
	}
	return publishTarget{route: r, shard: wire.ShardFor(key, r.shards, r.routing)}, nil
}

// isRouteError reports whether err, a node's refusal of a publish with an
// explicit shard, says the cached description is stale.
func isRouteError(err error) bool {
	return errors.Is(err, ErrInvalidShard) || errors.Is(err, ErrStreamNotFound)
}
