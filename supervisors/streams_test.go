package supervisors

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func isCode(err error, code wire.Code) bool { return errors.Is(err, &wire.Error{Code: code}) }

func detail(t *testing.T, err error) uint64 {
	t.Helper()
	var werr *wire.Error
	if !errors.As(err, &werr) {
		t.Fatalf("not a wire error: %v", err)
	}
	return werr.Detail
}

// Keyed publishes land on the shard the documented hash picks, for both
// routings; unkeyed ones on shard 0; each shard keeps one client's order.
func TestKeyedRoutingMatchesDocumentedHash(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx := testCtx(t)
	c := dialClient(t, n)
	for _, routing := range []client.Routing{client.RoutingHash, client.RoutingJump} {
		name := client.StreamName{Tenant: "t", Namespace: "route", Stream: fmt.Sprint("s", routing)}
		if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 5, Durable: true, Routing: routing}); err != nil {
			t.Fatal(err)
		}
		perShard := map[uint32][]string{}
		for i := range 200 {
			key := fmt.Appendf(nil, "key-%d", i%37)
			payload := fmt.Sprintf("%d", i)
			ack, err := c.Publish(ctx, name, []byte(payload), client.WithKey(key))
			if err != nil {
				t.Fatal(err)
			}
			if want := wire.ShardFor(key, 5, wire.Routing(routing)); ack.Shard != want {
				t.Fatalf("%s: key %s went to shard %d, the documented hash says %d", routing, key, ack.Shard, want)
			}
			perShard[ack.Shard] = append(perShard[ack.Shard], payload)
		}
		if ack, err := c.Publish(ctx, name, []byte("unkeyed")); err != nil || ack.Shard != 0 {
			t.Fatalf("unkeyed publish: shard %d, %v", ack.Shard, err)
		}
		perShard[0] = append(perShard[0], "unkeyed")
		for shard, want := range perShard {
			page, err := c.Read(ctx, name, shard, 0, client.ReadToTail)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Records) != len(want) {
				t.Fatalf("shard %d holds %d records, want %d", shard, len(page.Records), len(want))
			}
			for i, ev := range page.Records {
				if string(ev.Payload) != want[i] || ev.Offset != uint64(i) {
					t.Fatalf("shard %d offset %d: %q, want %q (issue order)", shard, ev.Offset, ev.Payload, want[i])
				}
			}
		}
	}
}

// Two writers expecting the same offset: exactly one is written, every
// round; the other is refused with the tail and consumes no offset.
func TestConcurrentConditionalWriters(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx := testCtx(t)
	a, b := dialClient(t, n), dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "cond", Stream: "match"}
	if _, err := a.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	next := uint64(0)
	for round := range 100 {
		var wg sync.WaitGroup
		results := make([]client.ConditionalResult, 2)
		errs := make([]error, 2)
		for i, c := range []*client.Client{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = c.PublishIf(ctx, name, [][]byte{fmt.Appendf(nil, "r%d-w%d", round, i)}, next)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if results[0].Written == results[1].Written {
			t.Fatalf("round %d: written %v and %v; exactly one must win", round, results[0].Written, results[1].Written)
		}
		for _, r := range results {
			if r.Written && r.Offset != next {
				t.Fatalf("round %d: written at %d, expected %d", round, r.Offset, next)
			}
			if !r.Written && r.Tail != next+1 {
				t.Fatalf("round %d: refused with tail %d, want %d", round, r.Tail, next+1)
			}
		}
		next++
	}
	info, err := a.DescribeStream(ctx, name)
	if err != nil || info.Tails[0] != 100 {
		t.Fatalf("tail %v %v: refused publishes must consume no offset", info.Tails, err)
	}
	eph := client.StreamName{Tenant: "t", Namespace: "cond", Stream: "eph"}
	if _, err := a.CreateStream(ctx, eph, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishIf(ctx, eph, [][]byte{[]byte("x")}, 0); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("conditional publish on an ephemeral stream: %v", err)
	}
}

// An idempotent producer re-sending after a lost ack, and after a node
// restart, writes nothing twice.
func TestIdempotentProducerResendAndRestart(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "idem", Stream: "orders"}
	p := c.NewProducer(name, 42)
	var acks []client.PublishAck
	for i := range 5 {
		ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "a%d", i), fmt.Appendf(nil, "b%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	if p.Sequence(0) != 5 {
		t.Fatalf("sequence %d after 5 publishes", p.Sequence(0))
	}
	// The ack of sequence 5 was "lost": re-send it.
	dup, err := p.PublishSequence(ctx, 5, [][]byte{[]byte("a4"), []byte("b4")})
	if err != nil || !dup.Duplicate || dup.Offset != acks[4].Offset {
		t.Fatalf("re-send: %+v %v", dup, err)
	}
	_ = c.Close()
	ctxShut, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = n.Shutdown(ctxShut)
	cancel()

	n2 := testNode(t, dir)
	c2 := dialClient(t, n2)
	p2 := c2.NewProducer(name, 42)
	p2.SetSequence(0, 5)
	dup, err = p2.PublishSequence(ctx, 4, [][]byte{[]byte("a3"), []byte("b3")})
	if err != nil || !dup.Duplicate || dup.Offset != acks[3].Offset {
		t.Fatalf("re-send after restart: %+v %v", dup, err)
	}
	ack, err := p2.Publish(ctx, [][]byte{[]byte("a5")})
	if err != nil || ack.Duplicate || ack.Offset != 10 {
		t.Fatalf("next publish after restart: %+v %v", ack, err)
	}
	if _, err := p2.PublishSequence(ctx, 9, [][]byte{[]byte("x")}); !isCode(err, wire.CodeSequenceGap) || detail(t, err) != 7 {
		t.Fatalf("gap: %v", err)
	}
	info, err := c2.DescribeStream(ctx, name)
	if err != nil || info.Tails[0] != 11 {
		t.Fatalf("tail %v %v, want 11: nothing written twice", info.Tails, err)
	}
}

// A range read returns one page of committed records in [start, end), capped,
// with the next page's offset; it never waits.
func TestRangeReadPages(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "read", Stream: "pages"}
	for b := range 10 {
		batch := make([][]byte, 7)
		for i := range batch {
			batch[i] = fmt.Appendf(nil, "%d", b*7+i)
		}
		if _, err := c.PublishBatch(ctx, name, batch); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.Read(ctx, name, 0, 3, 50, client.WithMaxRecords(20))
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 20 || page.Next != 23 || page.Tail != 70 || page.First != 0 {
		t.Fatalf("page: %d records next %d tail %d first %d", len(page.Records), page.Next, page.Tail, page.First)
	}
	for i, ev := range page.Records {
		if ev.Offset != uint64(3+i) || string(ev.Payload) != fmt.Sprint(3+i) {
			t.Fatalf("record %d: offset %d %q", i, ev.Offset, ev.Payload)
		}
	}
	page, err = c.Read(ctx, name, 0, 60, client.ReadToTail)
	if err != nil || len(page.Records) != 10 || page.Next != 70 {
		t.Fatalf("to the tail: %d records next %d %v", len(page.Records), page.Next, err)
	}
	page, err = c.Read(ctx, name, 0, 70, client.ReadToTail)
	if err != nil || len(page.Records) != 0 || page.Next != 70 {
		t.Fatalf("at the tail (must not wait): %d records %v", len(page.Records), err)
	}
	if _, err := c.Read(ctx, name, 0, 71, client.ReadToTail); !isCode(err, wire.CodeOffsetOutOfRange) || detail(t, err) != 70 {
		t.Fatalf("past the tail: %v", err)
	}
	if _, err := c.Read(ctx, name, 3, 0, client.ReadToTail); !isCode(err, wire.CodeInvalidShard) {
		t.Fatalf("bad shard: %v", err)
	}
}

// Replay-to-live handover under concurrent publishing, over random
// interleavings: a subscriber resumed from a random offset of a shard whose
// ring holds only a little history reads while a publisher keeps appending,
// and sees every record once, in order.
func TestResumeHandoverUnderConcurrentPublishing(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
		c.ReplayRingRecords = 16
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 99))
		name := client.StreamName{Tenant: "t", Namespace: "resume", Stream: fmt.Sprint("s", seed)}
		// The whole history is decided up front: batch sizes and payloads.
		var batches [][][]byte
		var total uint64
		for i := range 40 + rng.IntN(120) {
			batch := make([][]byte, 1+rng.IntN(5))
			for j := range batch {
				batch[j] = fmt.Appendf(nil, "%d.%d", i, j)
			}
			batches = append(batches, batch)
			total += uint64(len(batch))
		}
		want := make([]string, 0, total)
		for _, b := range batches {
			for _, p := range b {
				want = append(want, string(p))
			}
		}
		before := 1 + rng.IntN(len(batches)-1)
		var start uint64
		for _, b := range batches[:before] {
			if _, err := c.PublishBatch(ctx, name, b); err != nil {
				t.Fatal(err)
			}
			start += uint64(len(b))
		}
		start = rng.Uint64N(start + 1)
		// A queue this small can overflow while the publisher runs ahead
		// (drop_new ends the subscription as lagged): WithAutoResume picks up
		// where it stopped, and the sequence must still be whole.
		sub, err := c.Subscribe(ctx, name, client.WithShard(0), client.WithStartOffset(start), client.WithQueueCapacity(uint32(1+rng.IntN(8))),
			client.WithAutoResume())
		if err != nil {
			t.Fatal(err)
		}
		// Publish the rest while the subscriber replays and catches up.
		done := make(chan error, 1)
		go func() {
			for _, b := range batches[before:] {
				if _, err := c.PublishBatch(ctx, name, b); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for off := start; off < total; off++ {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("seed %d at %d: %v", seed, off, err)
			}
			if ev.Offset != off || string(ev.Payload) != want[off] {
				t.Fatalf("seed %d: got offset %d %q, want %d %q", seed, ev.Offset, ev.Payload, off, want[off])
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		_ = sub.Close()
	}
}

// A subscriber that stops reading on a durable stream overflows: the node
// ends it with lagged and the offset to resume from; with WithAutoResume the
// client resubscribes there and the application sees every offset once.
func TestLaggedSubscriberResumes(t *testing.T) {
	// A small egress bound: the stalled lane fills its share quickly and
	// the queue, then the overflow policy, take over.
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.SubscriberEgressMaxBytes = 256 << 10 })
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "lag", Stream: "durable"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	// Each subscriber on its own connection: an unread subscription stalls
	// its connection's QUIC flow control, and the publisher must not share it.
	plain, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(1))
	if err != nil {
		t.Fatal(err)
	}
	resuming, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(1), client.WithAutoResume())
	if err != nil {
		t.Fatal(err)
	}
	// Large batches nobody reads yet: QUIC flow control stops the node's
	// lanes, the queues of one batch fill, and live batches overflow.
	payload := make([]byte, 60<<10)
	const batches = 400
	for i := range batches {
		if _, err := c.PublishBatch(ctx, name, [][]byte{payload, fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var lagged *client.LaggedError
	for {
		_, err := plain.Next(ctx)
		if err != nil {
			if !errors.As(err, &lagged) {
				t.Fatalf("want a LaggedError, got %v", err)
			}
			break
		}
	}
	if lagged.ResumeFrom == 0 || lagged.ResumeFrom >= 2*batches {
		t.Fatalf("resume offset %d", lagged.ResumeFrom)
	}
	for want := uint64(0); want < 2*batches; want++ {
		ev, err := resuming.Next(ctx)
		if err != nil {
			t.Fatalf("auto-resuming subscription at %d: %v", want, err)
		}
		if ev.Offset != want {
			t.Fatalf("auto-resuming subscription: offset %d, want %d", ev.Offset, want)
		}
	}
	if resuming.Resumes() == 0 {
		t.Fatal("the resuming subscription never lagged: the test did not overflow it")
	}
}

// On an ephemeral stream an overflow shows as an offset gap.
func TestEphemeralOverflowShowsGap(t *testing.T) {
	// A small egress bound: the stalled lane fills its share quickly and
	// the queue, then the overflow policy, take over.
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.SubscriberEgressMaxBytes = 256 << 10 })
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "lag", Stream: "ephemeral"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: false}); err != nil {
		t.Fatal(err)
	}
	sub, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(1))
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 60<<10)
	const batches = 400
	for range batches {
		if _, err := c.PublishBatch(ctx, name, [][]byte{payload}); err != nil {
			t.Fatal(err)
		}
	}
	// Any of the 400 may have been skipped, the last ones too: publish small
	// end markers until one arrives (the subscriber, now reading, has room).
	last, gaps := int64(-1), 0
	for {
		ev, err := func() (client.Event, error) {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return sub.Next(rctx)
		}()
		if errors.Is(err, context.DeadlineExceeded) {
			if _, err := c.PublishBatch(ctx, name, [][]byte{[]byte("end")}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if int64(ev.Offset) <= last {
			t.Fatalf("offset %d after %d: duplicate or reorder", ev.Offset, last)
		}
		if int64(ev.Offset) > last+1 {
			gaps++
		}
		last = int64(ev.Offset)
		if string(ev.Payload) == "end" {
			break
		}
	}
	if gaps == 0 {
		t.Fatal("no gap: the subscriber never overflowed")
	}
}

// Subscribing without a shard delivers every shard, merged, each in order.
func TestMultiShardSubscribe(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "multi", Stream: "s"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 3, Durable: true}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	for i := range total {
		if _, err := c.Publish(ctx, name, []byte("x"), client.WithKey(fmt.Appendf(nil, "k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	next := map[uint32]uint64{}
	for range total {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Offset != next[ev.Shard] {
			t.Fatalf("shard %d: offset %d, want %d", ev.Shard, ev.Offset, next[ev.Shard])
		}
		next[ev.Shard]++
	}
	if len(next) != 3 {
		t.Fatalf("records from %d shards, want 3", len(next))
	}
}

// Retention deletes only whole batches past the age bound; resumes and reads
// below it get offset_out_of_range naming the first retained offset.
func TestRetentionDeletesWholeExpiredBatches(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) { o.Now = now })
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "ret", Stream: "age"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true, RetentionAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		batch := make([][]byte, n)
		for i := range batch {
			batch[i] = []byte("r")
		}
		if _, err := c.PublishBatch(ctx, name, batch); err != nil {
			t.Fatal(err)
		}
	}
	publish(3) // [0,3) at t0
	publish(4) // [3,7) at t0
	clock.Add(int64(40 * time.Minute))
	publish(5)                         // [7,12) at t0+40m
	clock.Add(int64(21 * time.Minute)) // t0+61m: the first two batches are expired
	if err := n.ApplyRetention(); err != nil {
		t.Fatal(err)
	}
	page, err := c.Read(ctx, name, 0, 7, client.ReadToTail)
	if err != nil || len(page.Records) != 5 || page.First != 7 {
		t.Fatalf("after retention: %d records first %d %v", len(page.Records), page.First, err)
	}
	if _, err := c.Read(ctx, name, 0, 2, client.ReadToTail); !isCode(err, wire.CodeOffsetOutOfRange) || detail(t, err) != 7 {
		t.Fatalf("read below retention: %v", err)
	}
	if _, err := c.Subscribe(ctx, name, client.WithShard(0), client.WithStartOffset(3)); !isCode(err, wire.CodeOffsetOutOfRange) || detail(t, err) != 7 {
		t.Fatalf("resume below retention: %v", err)
	}
	sub, err := c.Subscribe(ctx, name, client.WithShard(0), client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := sub.Next(ctx); err != nil || ev.Offset != 7 {
		t.Fatalf("earliest after retention: %d %v", ev.Offset, err)
	}

	// By bytes: the oldest whole batches go while the shard holds more.
	byBytes := client.StreamName{Tenant: "t", Namespace: "ret", Stream: "bytes"}
	if _, err := c.CreateStream(ctx, byBytes, client.StreamConfig{Shards: 1, Durable: true, RetentionBytes: 2000}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := c.PublishBatch(ctx, byBytes, [][]byte{make([]byte, 500)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.ApplyRetention(); err != nil {
		t.Fatal(err)
	}
	page, err = c.Read(ctx, byBytes, 0, 0, client.ReadToTail)
	if isCode(err, wire.CodeOffsetOutOfRange) {
		page, err = c.Read(ctx, byBytes, 0, detail(t, err), client.ReadToTail)
	}
	if err != nil || page.Tail != 10 || page.First == 0 || page.First > 7 || len(page.Records) != int(10-page.First) {
		t.Fatalf("retention by bytes: first %d tail %d records %d %v", page.First, page.Tail, len(page.Records), err)
	}
}

// Deleting a stream ends its subscriptions and makes it unknown.
func TestDeleteStream(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.AutoCreateStreams = false })
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "del", Stream: "s"}
	if _, err := c.Publish(ctx, name, []byte("x")); !isCode(err, wire.CodeStreamNotFound) {
		t.Fatalf("publish to a missing stream with auto-create off: %v", err)
	}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 3, Durable: true}); !isCode(err, wire.CodeStreamExists) {
		t.Fatalf("create with another config: %v", err)
	}
	if _, err := c.CreateStream(ctx, client.StreamName{Tenant: "t", Namespace: "del", Stream: "bad"}, client.StreamConfig{Shards: 5000, Durable: true}); !isCode(err, wire.CodeInvalidConfig) {
		t.Fatalf("invalid config: %v", err)
	}
	if _, err := c.Publish(ctx, name, []byte("x")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, name, client.WithShard(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if before, err := n.durable.Stats(storage.ShardKey{Stream: 1, Shard: 0}); err != nil || before.Batches == 0 {
		t.Fatalf("before delete: %+v %v", before, err)
	}
	if err := c.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	// The records and the stream's config are gone when delete returns.
	for shard := range uint32(2) {
		if st, err := n.durable.Stats(storage.ShardKey{Stream: 1, Shard: shard}); err != nil || st.Batches != 0 {
			t.Fatalf("shard %d after delete: %+v %v", shard, st, err)
		}
	}
	if _, err := n.durable.GetMeta([]byte("stream/" + name.String())); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the stream's config after delete: %v", err)
	}
	if _, err := sub.Next(ctx); err == nil {
		t.Fatal("subscription survived its stream's deletion")
	}
	if _, err := c.DescribeStream(ctx, name); !isCode(err, wire.CodeStreamNotFound) {
		t.Fatalf("describe after delete: %v", err)
	}
	if _, err := c.Publish(ctx, name, []byte("x")); !isCode(err, wire.CodeStreamNotFound) {
		t.Fatalf("publish after delete: %v", err)
	}
	if err := c.DeleteStream(ctx, name); !isCode(err, wire.CodeStreamNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// The same name again is a new, empty stream.
	info, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true})
	if err != nil || info.Tails[0] != 0 {
		t.Fatalf("recreated: %v %v", info.Tails, err)
	}
}

// stallingLog stalls the commits of one shard until released.
type stallingLog struct {
	storage.Log
	stalled storage.ShardKey
	entered chan struct{}
	release chan struct{}
}

func (s *stallingLog) Commit(a []storage.Append, m []storage.MetaPut) error {
	if len(a) > 0 && a[0].Shard == s.stalled {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Log.Commit(a, m)
}

// A stalled shard holds up only its own publishes: the client gives each
// shard its own publish stream, and the node's other shards keep going.
func TestStalledShardHoldsUpOnlyItsOwnPublishes(t *testing.T) {
	// The stream created below is the node's first: id 1. Its shard 1 stalls.
	stall := &stallingLog{stalled: storage.ShardKey{Stream: 1, Shard: 1}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	n := testNode(t, t.TempDir(), func(c *Config, o *Options) {
		// A window of one: if both shards shared a publish stream, the
		// stalled publish would hold up every other.
		c.PublishWindow = 1
		o.WrapMemoryLog = func(l storage.Log) storage.Log { stall.Log = l; return stall }
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "stall", Stream: "s"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 2, Durable: false}); err != nil {
		t.Fatal(err)
	}
	var k0, k1 []byte
	for i := 0; k0 == nil || k1 == nil; i++ {
		k := fmt.Appendf(nil, "k%d", i)
		switch wire.ShardFor(k, 2, wire.RoutingHash) {
		case 0:
			k0 = k
		case 1:
			k1 = k
		}
	}
	stuck, err := c.PublishAsync(ctx, name, [][]byte{[]byte("stuck")}, client.WithKey(k1))
	if err != nil {
		t.Fatal(err)
	}
	<-stall.entered // shard 1's storage is now stalled
	for i := range 20 {
		ack, err := c.Publish(ctx, name, fmt.Appendf(nil, "%d", i), client.WithKey(k0))
		if err != nil || ack.Shard != 0 || ack.Offset != uint64(i) {
			t.Fatalf("shard 0 publish %d behind a stalled shard 1: %+v %v", i, ack, err)
		}
	}
	close(stall.release)
	if ack, err := stuck.Wait(ctx); err != nil || ack.Shard != 1 {
		t.Fatalf("stalled publish after release: %+v %v", ack, err)
	}
}

// Deleting a stream answers every publish queued at its shard: none hangs.
func TestDeleteAnswersQueuedPublishes(t *testing.T) {
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.ShardProps = func(p *actor.Props) *actor.Props {
			return p.Configure(actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
				return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
					if _, ok := env.Message.(*actors.PublishRequest); ok {
						time.Sleep(time.Millisecond) // a slow shard, so publishes queue in its mailbox
					}
					next(c, env)
				}
			}))
		}
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "del", Stream: "busy"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	futures := make([]*client.PublishFuture, 200)
	for i := range futures {
		f, err := c.PublishAsync(ctx, name, [][]byte{[]byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = f
	}
	if err := dialClient(t, n).DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for _, f := range futures {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := f.Wait(wctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a publish queued at a deleted stream's shard was never answered (%d answered before it)", answered)
		}
		answered++
	}
}

// Idempotence holds across a restart of an ephemeral stream's shard too.
func TestEphemeralProducerSurvivesShardRestart(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.ShardProps = panicOnce(&armed, "*actors.ShardInfoRequest")
		o.RequestTimeout = time.Second
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "idem", Stream: "eph"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(name, 9)
	first, err := p.Publish(ctx, [][]byte{[]byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, [][]byte{[]byte("b")}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	_, _ = c.DescribeStream(ctx, name) // the shard panics on it and restarts
	dup, err := p.PublishSequence(ctx, 1, [][]byte{[]byte("a")})
	if err != nil || !dup.Duplicate || dup.Offset != first.Offset {
		t.Fatalf("re-send after the shard restarted: %+v %v", dup, err)
	}
}

// A client that routed with a stale view of a recreated stream is refused
// and routes again: keyed records land where the stream's routing says.
func TestStaleRoutingIsRefusedAndRetried(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx := testCtx(t)
	a, b := dialClient(t, n), dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "route", Stream: "recreated"}
	if _, err := a.CreateStream(ctx, name, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := a.Publish(ctx, name, []byte("x"), client.WithKey(fmt.Appendf(nil, "k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateStream(ctx, name, client.StreamConfig{Shards: 8, Durable: true, Routing: client.RoutingJump}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		key := fmt.Appendf(nil, "k%d", i)
		ack, err := a.Publish(ctx, name, []byte("y"), client.WithKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if want := wire.ShardFor(key, 8, wire.RoutingJump); ack.Shard != want {
			t.Fatalf("key %s landed on shard %d, the stream's routing says %d", key, ack.Shard, want)
		}
	}
}
