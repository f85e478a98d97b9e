package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// SIGTERM in the middle of acked durable publishing from several clients:
// the node stops admitting (publishers get the retryable ErrShuttingDown),
// answers what it admitted once it is synced, waits for the clients to take
// their answers and close, and exits 0. No publish is left in doubt: after
// a restart the shards hold exactly the acknowledged records.
func TestSigtermDrainsInFlightPublishes(t *testing.T) {
	dir := t.TempDir()
	node := startNode(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := client.StreamName{Tenant: "acme", Namespace: "drain", Stream: "orders"}
	if _, err := node.dial(t).CreateStream(ctx, name, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}

	type acked struct {
		shard   uint32
		offset  uint64
		payload string
	}
	const publishers, inflight = 3, 32
	var (
		mu       sync.Mutex
		acks     []acked
		errs     []error
		wg       sync.WaitGroup
		enough   = make(chan struct{})
		enoughMu sync.Once
	)
	for p := range publishers {
		c := node.dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			type pending struct {
				f       *client.PublishFuture
				payload string
			}
			queue := make(chan pending, inflight)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for q := range queue {
					ack, err := q.f.Wait(ctx)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						acks = append(acks, acked{ack.Shard, ack.Offset, q.payload})
						if len(acks) >= 300 {
							enoughMu.Do(func() { close(enough) })
						}
					}
					mu.Unlock()
				}
			}()
			defer func() { close(queue); <-done }()
			for i := 0; ; i++ {
				payload := fmt.Sprintf("p%d-%d", p, i)
				f, err := c.PublishAsync(ctx, name, [][]byte{[]byte(payload)}, client.WithKey([]byte(payload)), client.WithAck(client.AckPerBatch))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				queue <- pending{f, payload}
			}
		}()
	}
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("publishers did not get going")
	}
	if err := node.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-node.done:
	case <-time.After(30 * time.Second):
		t.Fatal("node did not exit after SIGTERM")
	}
	if code := node.exitState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	wg.Wait()

	// Every publisher stopped on an error; at least one learned that the
	// node was draining (the typed, retryable error) rather than only
	// seeing its connection go.
	shuttingDown := 0
	for _, err := range errs {
		if errors.Is(err, client.ErrShuttingDown) {
			shuttingDown++
		}
	}
	if shuttingDown == 0 {
		t.Errorf("no publisher was told the node was draining; errors: %v", errs)
	}
	// A graceful drain leaves no publish in doubt: every one was answered
	// before the node went, acked or refused as shutting_down (not
	// written, so safe to retry).
	if shuttingDown != len(errs) {
		t.Errorf("%d of %d errors are not shutting_down: %v", len(errs)-shuttingDown, len(errs), errs)
	}

	restarted := startNode(t, dir)
	c := restarted.dial(t)
	held := map[acked]bool{}
	for shard := range uint32(2) {
		for start := uint64(0); ; {
			page, err := c.Read(ctx, name, shard, start, start+1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Records {
				held[acked{shard, r.Offset, string(r.Payload)}] = true
			}
			if len(page.Records) == 0 || page.Next <= start {
				break
			}
			start = page.Next
		}
	}
	for _, a := range acks {
		if !held[a] {
			t.Fatalf("acknowledged record %+v missing after the drain and restart", a)
		}
	}
	// And what was refused was not written: the shards hold exactly the
	// acknowledged records.
	if len(held) != len(acks) {
		t.Errorf("%d records held, %d acknowledged: refused publishes were written", len(held), len(acks))
	}
	t.Logf("%d publishes acknowledged before the drain, %d errors (%d shutting_down), %d records held", len(acks), len(errs), shuttingDown, len(held))
}
