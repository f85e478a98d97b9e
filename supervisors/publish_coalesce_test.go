package supervisors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/storage"
)

// TestCoalescedSinglePublishes: many goroutines of one client make
// one-record PublishAsync calls to one shard, so that the client merges
// what queues into shared frames (producer batching); an invalid call among
// them fails alone. Every valid call gets its own offset, the offsets are
// exactly 0..n-1, each goroutine's calls land in call order, and reading
// the shard back finds at each offset the record its call was told (the
// client recycles the buffers of frames written and acknowledged).
func TestCoalescedSinglePublishes(t *testing.T) {
	const writers, perWriter = 8, 500
	const total = writers * perWriter
	n := testNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "coalesced"}
	c := dialClient(t, n)
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	batches0 := n.Metric("herald_storage_committed_batches_total")

	type sent struct {
		payload string
		f       *client.PublishFuture
	}
	calls := make([][]sent, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				if i == perWriter/2 {
					// A call whose key is too long fails at once, alone.
					_, err := c.PublishAsync(ctx, name, [][]byte{[]byte("bad")}, client.WithKey(make([]byte, 5000)))
					if !errors.Is(err, client.ErrInvalidRequest) {
						errs <- fmt.Errorf("writer %d: publish with a key too long: %v", w, err)
						return
					}
				}
				// Sizes from a few bytes to 3 KiB: frames of the client's
				// recycled buffers (1 KiB and up) as well as small ones.
				p := fmt.Sprintf("w%d-%d-", w, i) + strings.Repeat("x", i*37%3000)
				f, err := c.PublishAsync(ctx, name, [][]byte{[]byte(p)})
				if err != nil {
					errs <- err
					return
				}
				calls[w] = append(calls[w], sent{payload: p, f: f})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	at := make(map[uint64]string, total)
	for w, cs := range calls {
		last := int64(-1)
		for i, s := range cs {
			ack, err := s.f.Wait(ctx)
			if err != nil {
				t.Fatalf("writer %d call %d: %v", w, i, err)
			}
			if ack.Count != 1 || ack.Shard != 0 {
				t.Fatalf("writer %d call %d: ack %+v, want one record on shard 0", w, i, ack)
			}
			if int64(ack.Offset) <= last {
				t.Fatalf("writer %d call %d at offset %d, after its call at %d", w, i, ack.Offset, last)
			}
			last = int64(ack.Offset)
			if prev, dup := at[ack.Offset]; dup {
				t.Fatalf("offset %d acked to %q and %q", ack.Offset, prev, s.payload)
			}
			at[ack.Offset] = s.payload
		}
	}
	for o := range uint64(total) {
		if _, ok := at[o]; !ok {
			t.Fatalf("no call was acked offset %d of 0..%d", o, total-1)
		}
	}
	read := 0
	for next := uint64(0); next < total; {
		page, err := c.Read(ctx, name, 0, next, total)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) == 0 {
			t.Fatalf("read at %d found nothing, tail %d", next, page.Tail)
		}
		for _, ev := range page.Records {
			if ev.Offset != next || string(ev.Payload) != at[ev.Offset] {
				t.Fatalf("record at %d (next %d) is %q, its call was acked %q", ev.Offset, next, ev.Payload, at[ev.Offset])
			}
			next++
			read++
		}
	}
	if page, err := c.Read(ctx, name, 0, total, client.ReadToTail); err != nil || len(page.Records) != 0 {
		t.Fatalf("records past the %d acked: %d, %v", total, len(page.Records), err)
	}
	// Not asserted (it depends on timing), but shown: how many frames the
	// calls took.
	t.Logf("%d calls, %d read back, in %.0f batches", total, read, n.Metric("herald_storage_committed_batches_total")-batches0)
}

// TestCoalescedPublishesTraced: publishes that queue behind an unanswered
// one (a window of one, its shard's storage stalled) share the next frame;
// every publish's span still has the node's receive span of the frame that
// carried it, as its parent (the frame's first publish) or linked to it
// (the others).
func TestCoalescedPublishesTraced(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	// The stream created below is the node's first: id 1.
	stall := &stallingLog{stalled: storage.ShardKey{Stream: 1, Shard: 0}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	n := testNode(t, t.TempDir(), func(c *Config, o *Options) {
		c.PublishWindow = 1
		o.TracerProvider = tp
		o.WrapMemoryLog = func(l storage.Log) storage.Log { stall.Log = l; return stall }
	})
	ctx := testCtx(t)
	c := dialClient(t, n, client.WithTracerProvider(tp))
	name := client.StreamName{Tenant: "t", Namespace: "trace", Stream: "merged"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: false}); err != nil {
		t.Fatal(err)
	}
	const n1 = 6
	futs := make([]*client.PublishFuture, n1)
	var err error
	if futs[0], err = c.PublishAsync(ctx, name, [][]byte{[]byte("p0")}); err != nil {
		t.Fatal(err)
	}
	<-stall.entered // p0 is at the node, unanswered: the rest queue in the client
	for i := 1; i < n1; i++ {
		if futs[i], err = c.PublishAsync(ctx, name, [][]byte{fmt.Appendf(nil, "p%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for { // later commits go through
			select {
			case <-stall.entered:
			case <-done:
				return
			}
		}
	}()
	close(stall.release)
	for i, f := range futs {
		if ack, err := f.Wait(ctx); err != nil || ack.Offset != uint64(i) {
			t.Fatalf("publish %d = %+v, %v", i, ack, err)
		}
	}

	publishes := map[trace.SpanID]bool{}
	receivedBy := map[trace.SpanID]bool{} // publish span → a receive span names it
	merged := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		clear(publishes)
		clear(receivedBy)
		merged = 0
		for _, s := range mem.GetSpans() {
			switch s.Name {
			case "publish t/trace/merged":
				publishes[s.SpanContext.SpanID()] = true
			case "herald.publish.receive":
				receivedBy[s.Parent.SpanID()] = true
				for _, l := range s.Links {
					receivedBy[l.SpanContext.SpanID()] = true
				}
				if len(s.Links) > 0 {
					merged++
				}
			}
		}
		all := len(publishes) == n1
		for id := range publishes {
			all = all && receivedBy[id]
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d publish spans, %d of them with a receive span; want %d, all", len(publishes), len(receivedBy), n1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d merged frames", merged)
}
