package supervisors

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

func dialClient(t testing.TB, n *Node, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.Addr(), append([]client.Option{client.WithCAFile(n.CAFile())}, opts...)...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Three publishers × 10,000 records into one stream over real QUIC
// connections; five subscribers each get every record exactly once, in
// offset order, and what they see at each offset is what the publisher was
// acknowledged for.
func TestEndToEndPublishersAndSubscribers(t *testing.T) {
	const publishers, perPublisher, subscribers = 3, 10_000, 5
	const total = publishers * perPublisher
	n := testNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	admin := dialClient(t, n)
	if _, err := admin.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}

	// Subscribers first, from earliest, each on its own connection.
	type seen struct {
		offsets  []uint64
		payloads []string
		err      error
	}
	results := make([]seen, subscribers)
	var subWG sync.WaitGroup
	for i := range subscribers {
		sc := dialClient(t, n)
		// A subscriber slower than three publishers lags (drop_new); it
		// resumes from the offset the node names, so it still sees each
		// record once.
		sub, err := sc.Subscribe(ctx, name, client.WithStartEarliest(), client.WithAutoResume())
		if err != nil {
			t.Fatal(err)
		}
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			defer sub.Close()
			r := &results[i]
			for len(r.offsets) < total {
				ev, err := sub.Next(ctx)
				if err != nil {
					r.err = err
					return
				}
				r.offsets = append(r.offsets, ev.Offset)
				r.payloads = append(r.payloads, string(ev.Payload))
			}
		}()
	}

	// One more subscriber speaks the wire protocol by hand: the client drops
	// records it has seen, so this one proves the node itself sends each
	// batch once and in order.
	raw := dialRaw(t, n)
	rawSub := raw.subscribeRaw(name, wire.StartEarliest)
	_ = rawSub.SetReadDeadline(time.Time{})
	rawErr := make(chan error, 1)
	go func() {
		next := uint64(0)
		for next < total {
			f, err := wire.ReadFrame(rawSub, 1<<24)
			if err != nil {
				rawErr <- err
				return
			}
			if f.Header.Type == wire.TypeError {
				// A slow reader lags (drop_new): resume where the node says.
				e, err := wire.DecodeError(f.Body)
				if err != nil || e.Code != wire.CodeLagged || e.Detail != next {
					rawErr <- fmt.Errorf("raw subscriber ended: %v %v (next %d)", e, err, next)
					return
				}
				rawSub = raw.stream()
				if _, err := rawSub.Write(wire.AppendSubscribe(nil, 99, wire.Subscribe{Name: name, Start: wire.StartOffset, Offset: next})); err != nil {
					rawErr <- err
					return
				}
				if f, err := wire.ReadFrame(rawSub, 1<<24); err != nil || f.Header.Type != wire.TypeSubscribed {
					rawErr <- fmt.Errorf("resubscribe at %d: %v", next, err)
					return
				}
				continue
			}
			views, err := wire.DecodeEventBatch(f.Body)
			if err != nil {
				rawErr <- err
				return
			}
			for _, v := range views {
				if v.Base != next {
					rawErr <- fmt.Errorf("raw subscriber: batch at %d, want %d", v.Base, next)
					return
				}
				next += uint64(v.Count)
			}
		}
		rawErr <- nil
	}()

	// Publishers pipeline single-record acked publishes.
	acked := make([]map[uint64]string, publishers)
	var pubWG sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		pc := dialClient(t, n)
		acked[p] = make(map[uint64]string, perPublisher)
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			pctx, stop := context.WithCancel(ctx)
			defer stop()
			futures := make(chan *client.PublishFuture, perPublisher)
			payloads := make(chan string, perPublisher)
			go func() {
				defer close(futures)
				for i := range perPublisher {
					payload := fmt.Sprintf("p%d-%05d", p, i)
					f, err := pc.PublishAsync(pctx, name, [][]byte{[]byte(payload)}, client.WithAck(client.AckPerBatch))
					if err != nil {
						return // the waiting side reports the failure that stopped it
					}
					payloads <- payload
					futures <- f
				}
			}()
			last := int64(-1)
			for f := range futures {
				ack, err := f.Wait(ctx)
				if err != nil {
					errs <- err
					return
				}
				payload := <-payloads
				if int64(ack.Offset) <= last {
					errs <- fmt.Errorf("publisher %d: ack offset %d not after %d", p, ack.Offset, last)
					return
				}
				last = int64(ack.Offset)
				acked[p][ack.Offset] = payload
			}
		}()
	}
	pubWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
	want := make(map[uint64]string, total)
	for _, m := range acked {
		for off, p := range m {
			if _, dup := want[off]; dup {
				t.Fatalf("offset %d acknowledged twice", off)
			}
			want[off] = p
		}
	}
	if len(want) != total {
		t.Fatalf("%d acknowledged offsets, want %d", len(want), total)
	}

	subWG.Wait()
	if err := <-rawErr; err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("subscriber %d after %d records: %v", i, len(r.offsets), r.err)
		}
		for k, off := range r.offsets {
			if off != uint64(k) {
				t.Fatalf("subscriber %d: record %d has offset %d (gap, duplicate or reorder)", i, k, off)
			}
			if r.payloads[k] != want[off] {
				t.Fatalf("subscriber %d: offset %d holds %q, acknowledged %q", i, off, r.payloads[k], want[off])
			}
		}
	}
}

// Resume: a subscriber can start at any retained offset below the tail and
// then follows live publishes with no gap and no duplicate.
func TestSubscribeFromOffsetThenLive(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
		c.ReplayRingRecords = 4 // force the history read path
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "resume"}
	// Durable, as auto-create makes it, with overflow block: a queue of 3
	// behind a publisher that runs ahead of the reader (as it may on a
	// loaded machine) holds the publisher back instead of dropping records
	// and ending the subscription as lagged.
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true, Overflow: client.OverflowBlock}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := c.PublishBatch(ctx, name, [][]byte{[]byte(fmt.Sprint(2 * i)), []byte(fmt.Sprint(2*i + 1))}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Subscribe(ctx, name, client.WithStartOffset(17), client.WithQueueCapacity(3))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if sub.QueueCapacity() != 3 {
		t.Fatalf("granted capacity %d", sub.QueueCapacity())
	}
	go func() {
		for i := 100; i < 140; i++ {
			if _, err := c.Publish(ctx, name, []byte(fmt.Sprint(i))); err != nil {
				return
			}
		}
	}()
	for want := uint64(17); want < 140; want++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("at %d: %v", want, err)
		}
		if ev.Offset != want || string(ev.Payload) != fmt.Sprint(want) {
			t.Fatalf("got offset %d %q, want %d", ev.Offset, ev.Payload, want)
		}
	}
}
