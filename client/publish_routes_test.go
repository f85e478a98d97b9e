package client

import (
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// TestRouteTable exercises the description cache without a connection.
func TestRouteTable(t *testing.T) {
	tab := newRouteTable()
	info := wire.StreamInfo{Name: orders, Config: wire.StreamConfig{Shards: 3, Routing: wire.RoutingJump}}

	// The first lookup owns the describe; a second one waits for it.
	r, owner := tab.lookup(orders)
	if !owner {
		t.Fatal("first lookup does not own the describe")
	}
	if r2, owner2 := tab.lookup(orders); r2 != r || owner2 {
		t.Fatal("second lookup did not share the pending entry")
	}
	// learn does not replace a describe in progress.
	tab.learn(info)
	if r2, _ := tab.lookup(orders); r2 != r {
		t.Fatal("learn replaced a pending entry")
	}
	tab.finish(orders, r, info, nil)
	if !isClosed(r.ready) || r.shards != 3 || r.routing != wire.RoutingJump || r.missing || r.err != nil {
		t.Fatalf("described entry %+v", r)
	}

	// invalidate drops only the entry it was given.
	tab.invalidate(orders, &streamRoute{})
	if r2, _ := tab.lookup(orders); r2 != r {
		t.Fatal("a stale invalidate dropped the current entry")
	}
	tab.invalidate(orders, r)
	r, owner = tab.lookup(orders)
	if !owner {
		t.Fatal("invalidate kept the entry")
	}

	// Missing: kept while AnyShard publishes are in flight, dropped after
	// the last.
	tab.finish(orders, r, wire.StreamInfo{}, wire.Errorf(wire.CodeStreamNotFound, "no"))
	if !r.missing || r.err != nil {
		t.Fatalf("missing entry %+v", r)
	}
	tab.anySent(r)
	tab.anySent(r)
	tab.anySettled(orders, r)
	if r2, _ := tab.lookup(orders); r2 != r {
		t.Fatal("entry dropped with a publish still in flight")
	}
	tab.anySettled(orders, r)
	if _, owner := tab.lookup(orders); !owner {
		t.Fatal("entry kept after the last AnyShard publish settled")
	}

	// Another describe failure is not cached.
	other := wire.StreamName{Tenant: "a", Namespace: "b", Stream: "c"}
	r, _ = tab.lookup(other)
	tab.finish(other, r, wire.StreamInfo{}, wire.Errorf(wire.CodeUnauthenticated, "no"))
	if r.err == nil || !isClosed(r.ready) {
		t.Fatalf("failed entry %+v", r)
	}
	if _, owner := tab.lookup(other); !owner {
		t.Fatal("a failed describe was cached")
	}
}
