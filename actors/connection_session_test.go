package actors

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestConnSessionPlace checks that a connection's place among
// max_connections is given back exactly once, whichever comes first: the
// handshake keeping the place it took, or the actor stopping.
func TestConnSessionPlace(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stopFirst runs the actor's Stopped before the handshake keeps
		// its place.
		stopFirst bool
		wantKept  bool
	}{
		{name: "handshake then stop", wantKept: true},
		{name: "stop then handshake", stopFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := &atomic.Int64{}
			cs := newConnSession(nil, ConnectionConfig{Authenticated: count}, nil, nil, nil)
			defer cs.cancel()
			if tc.stopFirst {
				cs.releasePlace()
			}
			count.Add(1) // the handshake takes a place
			if kept := cs.keepPlace(); kept != tc.wantKept {
				t.Fatalf("keepPlace = %v, want %v", kept, tc.wantKept)
			}
			if !tc.stopFirst {
				if n := count.Load(); n != 1 {
					t.Fatalf("%d places held while the connection runs, want 1", n)
				}
				cs.releasePlace()
			}
			if n := count.Load(); n != 0 {
				t.Fatalf("%d places held after the connection stopped, want 0", n)
			}
		})
	}
}

// TestConnSessionPlaceNotHeld checks that a connection that never took a
// place gives nothing back.
func TestConnSessionPlaceNotHeld(t *testing.T) {
	count := &atomic.Int64{}
	count.Add(3) // other connections' places
	cs := newConnSession(nil, ConnectionConfig{Authenticated: count}, nil, nil, nil)
	defer cs.cancel()
	cs.releasePlace()
	if n := count.Load(); n != 3 {
		t.Fatalf("%d places held, want the other connections' 3", n)
	}
}

// TestConnSessionPlaceRace races the handshake against the actor's Stopped
// many times: the count always ends at zero.
func TestConnSessionPlaceRace(t *testing.T) {
	count := &atomic.Int64{}
	kept := 0
	const rounds = 1000
	for range rounds {
		cs := newConnSession(nil, ConnectionConfig{Authenticated: count}, nil, nil, nil)
		var wg sync.WaitGroup
		var ok bool
		wg.Go(func() {
			count.Add(1)
			ok = cs.keepPlace()
		})
		wg.Go(cs.releasePlace)
		wg.Wait()
		cs.cancel()
		if ok {
			kept++
		}
		if n := count.Load(); n != 0 {
			t.Fatalf("%d places held after a connection stopped, want 0", n)
		}
	}
	t.Logf("the handshake kept its place first in %d of %d rounds", kept, rounds)
}
