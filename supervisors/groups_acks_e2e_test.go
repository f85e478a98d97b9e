package supervisors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// Many goroutines ack records one by one through a real node, as a pull
// consumer does, while the client coalesces their acks into shared
// requests: every record is settled exactly once (each ack counts 1, its
// duplicate 0), acks of offsets never delivered, mixed in, fail alone with
// ErrNotDelivered, and the group's cursors end at the tails.
func TestGroupConcurrentAcksSettleEachRecordOnce(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(t, n)
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "acks"}
	const shards, total = 2, 1200
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: shards, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < total; i += 100 {
		batch := make([][]byte, 100)
		for j := range batch {
			batch[j] = fmt.Appendf(nil, "r%d", i+j)
		}
		// Keyed batches spread over the shards.
		if _, err := c.PublishBatch(ctx, stream, batch, client.WithKey(fmt.Appendf(nil, "k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	g := c.Group(stream, "workers")
	var recs []client.GroupRecord
	perShard := map[uint32]int{}
	for len(recs) < total {
		for s := range uint32(shards) {
			r, err := g.Poll(ctx, s, 1000, 0)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r...)
			perShard[s] += len(r)
		}
	}
	if len(perShard) != shards || perShard[0] == 0 || perShard[1] == 0 {
		t.Fatalf("records per shard %v: want both shards used", perShard)
	}
	var settled, duplicates, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(recs))
	sem := make(chan struct{}, 64)
	for i, r := range recs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, err := g.Ack(ctx, r)
			if err != nil {
				errs <- fmt.Errorf("ack of %d/%d: %w", r.Shard, r.Offset, err)
				return
			}
			settled.Add(int64(n))
			if i%7 == 0 {
				// Acked again: settled already, 0, no error.
				n, err := g.Ack(ctx, r)
				if err != nil || n != 0 {
					errs <- fmt.Errorf("second ack of %d/%d: %d, %v; want 0", r.Shard, r.Offset, n, err)
				}
				duplicates.Add(1)
			}
		}()
		if i%50 == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := g.AckOffsets(ctx, r.Shard, total+uint64(i))
				if !errors.Is(err, client.ErrNotDelivered) || n != 0 {
					errs <- fmt.Errorf("ack of an undelivered offset: %d, %v; want ErrNotDelivered", n, err)
					return
				}
				refused.Add(1)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := settled.Load(); got != total {
		t.Fatalf("acks settled %d records, want each of %d once", got, total)
	}
	if duplicates.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("%d duplicate and %d refused acks: the test exercised nothing", duplicates.Load(), refused.Load())
	}
	info, err := g.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Shards {
		if s.Committed != uint64(perShard[s.Shard]) || s.Claims != 0 {
			t.Errorf("shard %d: committed %d with %d claims, want %d with none", s.Shard, s.Committed, s.Claims, perShard[s.Shard])
		}
	}
	if got := n.Metric("herald_group_acked_total"); got != total {
		t.Errorf("herald_group_acked_total = %v, want %d", got, total)
	}
}

// A pull consumer acks every record with AckAsync from its poll loop, no
// goroutine per ack, through a real node; after waiting every future, each
// record was settled exactly once, the cursors are at the tails with no
// claims, and the node restarted on the same data delivers nothing again
// (the acks were durable when their futures resolved).
func TestGroupAckAsyncSettlesEveryRecordDurably(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(t, n)
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "async-acks"}
	const total = 3000
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < total; i += 100 {
		batch := make([][]byte, 100)
		for j := range batch {
			batch[j] = fmt.Appendf(nil, "r%d", i+j)
		}
		if _, err := c.PublishBatch(ctx, stream, batch); err != nil {
			t.Fatal(err)
		}
	}
	g := c.Group(stream, "workers")
	var futs []*client.AckFuture
	for got := 0; got < total; {
		recs, err := g.Poll(ctx, 0, 100, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got += len(recs)
		for _, r := range recs {
			f, err := g.AckAsync(r)
			if err != nil {
				t.Fatal(err)
			}
			futs = append(futs, f)
		}
	}
	settled := 0
	for i, f := range futs {
		k, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
		settled += k
	}
	if settled != total {
		t.Fatalf("async acks settled %d records, want each of %d once", settled, total)
	}
	info, err := g.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := info.Shards[0]; s.Committed != total || s.Claims != 0 {
		t.Fatalf("committed %d with %d claims, want %d with none", s.Committed, s.Claims, total)
	}
	c.Close()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	n = testNode(t, dir)
	c = dialClient(t, n)
	if recs, err := c.Group(stream, "workers").Poll(ctx, 0, 100, 0); err != nil || len(recs) != 0 {
		t.Fatalf("after a restart: polled %d records, %v; want none (every ack durable)", len(recs), err)
	}
}
