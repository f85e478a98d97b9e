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
// their answers and close, and exits 0. After a restart the shards hold
// every acknowledged record, nothing refused as
// shutting_down (retryable), and nothing else except from publishes the
// client reported as of unknown outcome: a publish sent as several frames
// (AckPerMessage) that the drain caught half written.
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
	// Publishers 0-2 publish single records acked per batch; publisher 3
	// publishes batches of 8 acked per message, which the client sends as
	// one frame per record, so a drain can catch one half written.
	const publishers, inflight, perMessage = 4, 32, 8
	var (
		mu   sync.Mutex
		acks []acked
		// refused holds the payloads of publishes that failed with the
		// retryable shutting_down: none may have been written. unknown
		// holds those that failed as outcome unknown.
		refused, unknown = map[string]bool{}, map[string]bool{}
		other            []error
		wg               sync.WaitGroup
		enough           = make(chan struct{})
		enoughMu         sync.Once
	)
	settle := func(payloads []string, ack client.PublishAck, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil && ack.Offsets != nil:
			for i, p := range payloads {
				acks = append(acks, acked{ack.Shard, ack.Offsets[i], p})
			}
		case err == nil:
			acks = append(acks, acked{ack.Shard, ack.Offset, payloads[0]})
		case errors.Is(err, client.ErrOutcomeUnknown):
			for _, p := range payloads {
				unknown[p] = true
			}
		case errors.Is(err, client.ErrShuttingDown):
			for _, p := range payloads {
				refused[p] = true
			}
		default:
			other = append(other, err)
		}
		if len(acks) >= 300 {
			enoughMu.Do(func() { close(enough) })
		}
	}
	for p := range publishers {
		// Without reconnecting, so each publisher sees what the node
		// answered: a reconnecting client would resend what was refused as
		// shutting_down to the next node (TestReconnectAcrossKillNine
		// covers that).
		c := node.dial(t, client.WithoutReconnect())
		wg.Add(1)
		go func() {
			defer wg.Done()
			type pending struct {
				f        *client.PublishFuture
				payloads []string
			}
			queue := make(chan pending, inflight)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for q := range queue {
					ack, err := q.f.Wait(ctx)
					settle(q.payloads, ack, err)
				}
			}()
			defer func() { close(queue); <-done }()
			for i := 0; ; i++ {
				var payloads []string
				opts := []client.PublishOption{client.WithAck(client.AckPerBatch)}
				if p == publishers-1 {
					for j := range perMessage {
						payloads = append(payloads, fmt.Sprintf("p%d-%d-%d", p, i, j))
					}
					opts = []client.PublishOption{client.WithAck(client.AckPerMessage), client.WithKey([]byte(payloads[0]))}
				} else {
					payloads = []string{fmt.Sprintf("p%d-%d", p, i)}
					opts = append(opts, client.WithKey([]byte(payloads[0])))
				}
				records := make([][]byte, len(payloads))
				for j, pl := range payloads {
					records[j] = []byte(pl)
				}
				f, err := c.PublishAsync(ctx, name, records, opts...)
				if err != nil {
					settle(payloads, client.PublishAck{}, err)
					return
				}
				queue <- pending{f, payloads}
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

	// Every publisher stopped on an error: the retryable shutting_down
	// (nothing of that publish was written) or, for a publish the drain
	// caught partly written, outcome unknown; never anything else.
	if len(other) > 0 {
		t.Errorf("errors other than shutting_down and outcome unknown: %v", other)
	}
	if len(refused) == 0 {
		t.Error("no publisher was told the node was draining")
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
	// What was refused as shutting_down was not written; what the shards
	// hold beyond the acknowledged records comes only from publishes whose
	// outcome the client reported unknown.
	ackedPayloads := map[string]bool{}
	for _, a := range acks {
		ackedPayloads[a.payload] = true
	}
	extra := 0
	for h := range held {
		if refused[h.payload] {
			t.Errorf("record %+v was written, but its publish failed as shutting_down (retryable)", h)
		}
		if !ackedPayloads[h.payload] {
			extra++
			if !unknown[h.payload] {
				t.Errorf("record %+v is neither acknowledged nor from a publish of unknown outcome", h)
			}
		}
	}
	t.Logf("%d records acknowledged, %d refused as shutting_down, %d of unknown outcome (%d of them written), %d held",
		len(acks), len(refused), len(unknown), extra, len(held))
}
