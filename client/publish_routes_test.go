package client

import (
	"math/rand/v2"
	"strings"
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

// TestRouteTableLastHit holds the lock-free fast path to the map: whatever
// sequence of lookups, describes and drops, cached returns only the map's
// own, described entry for the name, and finds it once a lookup has.
func TestRouteTableLastHit(t *testing.T) {
	names := []wire.StreamName{orders, {Tenant: "a", Namespace: "b", Stream: "c"}}
	info := func(n wire.StreamName, shards uint32) wire.StreamInfo {
		return wire.StreamInfo{Name: n, Config: wire.StreamConfig{Shards: shards}}
	}
	tab := newRouteTable()
	check := func(step int, op string) {
		t.Helper()
		for _, n := range names {
			r := tab.cached(n)
			if r == nil {
				continue
			}
			tab.mu.Lock()
			cur := tab.mu.m[n]
			tab.mu.Unlock()
			if r != cur || !isClosed(r.ready) || r.err != nil || r.missing || r.name != n {
				t.Fatalf("step %d (%s): cached(%v) = %+v, the map holds %+v", step, op, n, r, cur)
			}
		}
	}

	// The basic cycle: a lookup of a described entry makes it the fast hit;
	// forgetting, replacing or invalidating it ends that.
	r, _ := tab.lookup(orders)
	if tab.cached(orders) != nil {
		t.Fatal("a pending entry is cached")
	}
	tab.finish(orders, r, info(orders, 2), nil)
	if tab.cached(orders) != nil {
		t.Fatal("cached before a lookup found the described entry")
	}
	tab.lookup(orders)
	if tab.cached(orders) != r {
		t.Fatal("a lookup of the described entry did not make it the fast hit")
	}
	tab.learn(info(orders, 4))
	if got := tab.cached(orders); got != nil {
		t.Fatalf("learn replaced the entry but the fast hit is still %+v", got)
	}
	r, _ = tab.lookup(orders)
	if tab.cached(orders) != r || r.shards != 4 {
		t.Fatalf("fast hit after learn: %+v", tab.cached(orders))
	}
	tab.invalidate(orders, r)
	if tab.cached(orders) != nil {
		t.Fatal("invalidate kept the fast hit")
	}

	// Random sequences.
	rng := rand.New(rand.NewPCG(1, 2))
	var pending []*streamRoute
	for step := range 5000 {
		n := names[rng.IntN(len(names))]
		var op string
		switch rng.IntN(8) {
		case 0, 1:
			op = "lookup"
			if r, owner := tab.lookup(n); owner {
				pending = append(pending, r)
			}
		case 2:
			op = "finish"
			if len(pending) > 0 {
				i := rng.IntN(len(pending))
				r := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				switch rng.IntN(3) {
				case 0:
					tab.finish(r.name, r, info(r.name, 3), nil)
				case 1:
					tab.finish(r.name, r, wire.StreamInfo{}, wire.Errorf(wire.CodeStreamNotFound, "no"))
					tab.anySent(r)
				default:
					tab.finish(r.name, r, wire.StreamInfo{}, wire.Errorf(wire.CodeUnauthenticated, "no"))
				}
			}
		case 3:
			op = "learn"
			tab.learn(info(n, uint32(1+rng.IntN(4))))
		case 4:
			op = "forget"
			tab.forget(n)
		case 5:
			op = "invalidate"
			if r := tab.cached(n); r != nil {
				tab.invalidate(n, r)
			}
		case 6:
			op = "anySettled"
			tab.mu.Lock()
			r := tab.mu.m[n]
			tab.mu.Unlock()
			if r != nil && r.missing && r.anyInFlight > 0 {
				tab.anySettled(n, r)
			}
		default:
			op = "cached"
			tab.cached(n)
		}
		check(step, op)
	}
}

// BenchmarkRouteTable compares the fast path of a publish's route (cached)
// with the locked map lookup it saves.
func BenchmarkRouteTable(b *testing.B) {
	tab := newRouteTable()
	tab.learn(wire.StreamInfo{Name: orders, Config: wire.StreamConfig{Shards: 1}})
	tab.lookup(orders)
	// The caller's name has its own strings, as a name the node described
	// has.
	name := wire.StreamName{Tenant: strings.Clone(orders.Tenant), Namespace: strings.Clone(orders.Namespace), Stream: strings.Clone(orders.Stream)}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if tab.cached(name) == nil {
				b.Fatal("not cached")
			}
		}
	})
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			if r, _ := tab.lookup(name); !isClosed(r.ready) {
				b.Fatal("not described")
			}
		}
	})
}
