package supervisors

import (
	"context"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// A control request in flight when the node starts draining gets its
// answer: the client closes its connection only once nothing awaits one
// (here a group poll still waiting for work), and the node waits for it.
func TestDrainAnswersPendingControlRequests(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.DrainGrace = 10 * time.Second })
	ctx := context.Background()
	c := dialClient(t, n)
	s := client.StreamName{Tenant: "t", Namespace: "n", Stream: "s"}
	if _, err := c.CreateStream(ctx, s, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		recs []client.GroupRecord
		err  error
	}
	polled := make(chan result, 1)
	go func() {
		recs, err := c.Group(s, "g").Poll(ctx, 0, 10, time.Second)
		polled <- result{recs, err}
	}()
	// The poll made the group: once it can be described, the poll waits at
	// its coordinator.
	waitFor(t, "the poll to wait at the node", func() bool {
		_, err := c.Group(s, "g").Describe(ctx)
		return err == nil
	})
	shutdownDone := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		shutdownDone <- n.Shutdown(sctx)
	}()
	select {
	case r := <-polled:
		if r.err != nil || len(r.recs) != 0 {
			t.Fatalf("poll during the drain: %d records, %v; want its (empty) answer", len(r.recs), r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the poll never returned")
	}
	if err := <-shutdownDone; err != nil {
		t.Fatal(err)
	}
}
