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
