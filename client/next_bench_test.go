package client

import (
	"context"
	"testing"
)

// BenchmarkNextBuffered hands out a request's 256 events with Next, as a
// replaying or fast subscriber does between its requests to the actor.
func BenchmarkNextBuffered(b *testing.B) {
	sub := &Subscription{subscriptionHandle: subscriptionHandle{closed: make(chan struct{})}}
	evs := make([]Event, 256)
	for i := range evs {
		evs[i] = Event{Offset: uint64(i), Payload: make([]byte, 128)}
	}
	ctx := context.Background()
	for b.Loop() {
		sub.buf, sub.pos = evs[:256:256], 0
		for range 256 {
			if _, err := sub.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}
