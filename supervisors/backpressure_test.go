package supervisors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// shardInfo asks a stream's shard actor directly (tests only).
func shardInfo(t *testing.T, n *Node, shard int) *actors.ShardInfoResponse {
	t.Helper()
	res, err := n.sys.Root.RequestFuture(n.children.Catalog, &actors.AllShardsRequest{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	pids := res.(*actors.AllShardsResponse).Shards
	r, err := n.sys.Root.RequestFuture(pids[shard], &actors.ShardInfoRequest{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return r.(*actors.ShardInfoResponse)
}

// waitFor polls cond (a state, never a duration) for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a state, not asserting time
	}
}

// drop_old really evicts: the oldest queued batches go, the newest stay.
func TestDropOldEvictsOldestFirst(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.SubscriberEgressMaxBytes = 128 << 10 })
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "dropold"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true, Overflow: client.OverflowDropOld}); err != nil {
		t.Fatal(err)
	}
	sub, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(4))
	if err != nil {
		t.Fatal(err)
	}
	const batches = 300
	payload := make([]byte, 60<<10)
	for i := range batches {
		if _, err := c.PublishBatch(ctx, name, [][]byte{payload, fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if info := shardInfo(t, n, 0); info.Drops.Evicted == 0 {
		t.Fatal("nothing was evicted: the subscriber never overflowed")
	}
	var got []uint64
	for len(got) == 0 || got[len(got)-1] != 2*batches-1 {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Offset)
	}
	// The queue kept the newest batches (two records each): the last four
	// arrive, in order, after a gap where older ones were evicted.
	tail := got[len(got)-8:]
	for i, off := range tail {
		if off != 2*batches-8+uint64(i) {
			t.Fatalf("the newest batches did not survive: got %v at the end", tail)
		}
	}
	gaps := 0
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("reorder or duplicate: %d after %d", got[i], got[i-1])
		}
		if got[i] > got[i-1]+1 {
			gaps++
		}
	}
	if gaps == 0 {
		t.Fatal("no gap: drop_old evicted nothing the subscriber could see")
	}
}

// block loses nothing and keeps order; the shard waits for a full
// subscriber, and one that goes away releases the publishers.
func TestBlockLosesNothingAndReleasesWhenSubscriberLeaves(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
		c.SubscriberEgressMaxBytes = 128 << 10
		c.PublishQueueWaitTimeoutMillis = 120_000
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "block"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true, Overflow: client.OverflowBlock}); err != nil {
		t.Fatal(err)
	}
	fast, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(2))
	if err != nil {
		t.Fatal(err)
	}
	slowClient := dialClient(t, n)
	slow, err := slowClient.Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(2))
	if err != nil {
		t.Fatal(err)
	}
	const batches = 200
	published := make(chan error, 1)
	go func() {
		payload := make([]byte, 60<<10)
		for i := range batches {
			if _, err := c.PublishBatch(ctx, name, [][]byte{payload, fmt.Appendf(nil, "%d", i)}); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	// The fast subscriber reads everything it is given, in order.
	var fastMu sync.Mutex
	fastNext := uint64(0)
	fastErr := make(chan error, 1)
	go func() {
		for fastNext < 2*batches {
			ev, err := fast.Next(ctx)
			if err != nil {
				fastErr <- err
				return
			}
			fastMu.Lock()
			if ev.Offset != fastNext {
				fastMu.Unlock()
				fastErr <- fmt.Errorf("fast subscriber: offset %d, want %d", ev.Offset, fastNext)
				return
			}
			fastNext++
			fastMu.Unlock()
		}
		fastErr <- nil
	}()
	// The slow one never reads: the shard blocks and publishes wait.
	waitFor(t, "the shard to block on the slow subscriber", func() bool {
		info := shardInfo(t, n, 0)
		return info.Blocked && info.Held > 0
	})
	select {
	case err := <-published:
		t.Fatalf("publishing finished while the shard was blocked: %v", err)
	default:
	}
	// Read a little from the slow one: nothing was dropped or reordered.
	for want := uint64(0); want < 10; want++ {
		ev, err := slow.Next(ctx)
		if err != nil || ev.Offset != want {
			t.Fatalf("slow subscriber: offset %d %v, want %d", ev.Offset, err, want)
		}
	}
	// It goes away: the publishers are released.
	_ = slowClient.Close()
	if err := <-published; err != nil {
		t.Fatalf("publishing after the blocking subscriber left: %v", err)
	}
	if err := <-fastErr; err != nil {
		t.Fatal(err)
	}
	if info := shardInfo(t, n, 0); info.Drops != (actors.DropCounts{}) {
		t.Fatalf("block dropped something: %+v", info.Drops)
	}
}

// A subscriber's own queue capacity is clamped to [1, max] and granted.
func TestQueueCapacityClampedAndGranted(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "cap"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	withCap := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "cap2"}
	if _, err := c.CreateStream(ctx, withCap, client.StreamConfig{Shards: 1, Durable: true, QueueCapacity: 100}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stream client.StreamName
		ask    uint32
		want   uint32
	}{
		{name, 0, 512},       // the node's default
		{name, 1, 1},         // the smallest
		{name, 1000, 1000},   // as asked
		{name, 100000, 4096}, // clamped to subscriber_queue_capacity_max
		{withCap, 0, 100},    // the stream's own default
		{withCap, 7, 7},      // the subscriber's ask wins
	} {
		sub, err := c.Subscribe(ctx, tc.stream, client.WithShard(0), client.WithQueueCapacity(tc.ask))
		if err != nil {
			t.Fatal(err)
		}
		if got := sub.QueueCapacity(); got != tc.want {
			t.Fatalf("%s asked %d: granted %d, want %d", tc.stream.Stream, tc.ask, got, tc.want)
		}
		_ = sub.Close()
	}
}

// A publish that cannot be admitted within publish_queue_wait_timeout_ms
// fails with a typed overloaded error the client surfaces.
func TestPublishOverloadedWhenQueueStaysFull(t *testing.T) {
	stall := &stallingLog{stalled: storage.ShardKey{Stream: 1, Shard: 0}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	n := testNode(t, t.TempDir(), func(c *Config, o *Options) {
		c.PubQueueDepth = 1
		c.PublishQueueWaitTimeoutMillis = 100
		o.WrapDurableLog = func(l storage.Log) storage.Log { stall.Log = l; return stall }
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "overload"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	first, err := c.PublishAsync(ctx, name, [][]byte{[]byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	<-stall.entered // the first publish is pending: the queue of one is full
	_, err = c.Publish(ctx, name, []byte("second"))
	if !isCode(err, wire.CodeOverloaded) || wire.CodeOverloaded.Retry() != wire.RetryAfter {
		t.Fatalf("publish behind a full queue: %v, want overloaded", err)
	}
	close(stall.release)
	if ack, err := first.Wait(ctx); err != nil || ack.Offset != 0 {
		t.Fatalf("the pending publish: %+v %v", ack, err)
	}
	if ack, err := c.Publish(ctx, name, []byte("third")); err != nil || ack.Offset != 1 {
		t.Fatalf("after the queue drained: %+v %v (the refused publish must take no offset)", ack, err)
	}
}

// scrape returns /metrics as text.
func scrape(t *testing.T, n *Node) string {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// metricValue finds one series' value in a scrape.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, series)), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("series %s not in the scrape:\n%s", series, text)
	return 0
}

// The documented series are exported with the values the node counted.
func TestMetricsCountPublishesAndDrops(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.SubscriberEgressMaxBytes = 128 << 10 })
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "m", Stream: "ephemeral"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	sub, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(2))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	payload := make([]byte, 60<<10)
	for range 100 {
		if _, err := c.PublishBatch(ctx, name, [][]byte{payload, payload}); err != nil {
			t.Fatal(err)
		}
	}
	text := scrape(t, n)
	if v := metricValue(t, text, `herald_publish_records_total{stream="t/m/ephemeral"}`); v != 200 {
		t.Fatalf("herald_publish_records_total %v, want 200", v)
	}
	if v := metricValue(t, text, `herald_publish_batches_total{stream="t/m/ephemeral"}`); v != 100 {
		t.Fatalf("herald_publish_batches_total %v, want 100", v)
	}
	info := shardInfo(t, n, 0)
	if info.Drops.CountBound == 0 {
		t.Fatal("the subscriber never overflowed")
	}
	if v := metricValue(t, text, `herald_subscriber_drops_total{cause="count_bound"}`); v != float64(info.Drops.CountBound) {
		t.Fatalf("count_bound drops exported %v, the shard counted %d", v, info.Drops.CountBound)
	}
	if v := metricValue(t, text, "herald_subscriptions"); v != 1 {
		t.Fatalf("herald_subscriptions %v", v)
	}
	if v := metricValue(t, text, "herald_subscriber_queue_batches"); v < 0 || v > 2 {
		t.Fatalf("herald_subscriber_queue_batches %v outside the queue bound", v)
	}
}

// subscriber_queue_max_bytes_total: once a stalled subscriber holds the
// node's total, a fast subscriber's live batches meet the overflow policy
// too; when the stalled one leaves, every byte comes back.
func TestQueueTotalSharedAndReleased(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
		c.SubscriberQueueMaxBytesTotal = 1 << 20
		c.SubscriberEgressMaxBytes = 256 << 10
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "total"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	stalledClient := dialClient(t, n)
	if _, err := stalledClient.Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest()); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 60<<10)
	for range 100 {
		if _, err := c.PublishBatch(ctx, name, [][]byte{payload}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the stalled subscriber to hold the node's total", func() bool {
		return n.queueTotal.Used() > (1<<20)-2*(64<<10)
	})
	fast, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishBatch(ctx, name, [][]byte{payload}); err != nil {
		t.Fatal(err)
	}
	if info := shardInfo(t, n, 0); info.Drops.TotalBound == 0 {
		t.Fatal("a fast subscriber's batch fit a spent total")
	}
	_ = fast.Close()
	_ = stalledClient.Close()
	waitFor(t, "every byte of the total to come back", func() bool { return n.queueTotal.Used() == 0 })
}

// subscriber_lane_queue_policy: under drop_new each subscription of a
// connection has its own egress share, so a reader beside a stalled
// subscription on the same connection loses nothing; under block they share
// one pool, so the stalled one stops the reader, whose queue overflows; when
// the stalled one goes, the reader carries on.
func TestLaneQueuePolicies(t *testing.T) {
	for _, policy := range []string{"drop_new", "block"} {
		t.Run(policy, func(t *testing.T) {
			n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
				c.SubscriberLaneQueuePolicy = policy
				c.SubscriberEgressMaxBytes = 512 << 10
			})
			ctx := testCtx(t)
			pub := dialClient(t, n)
			name := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "lane"}
			if _, err := pub.CreateStream(ctx, name, client.StreamConfig{Shards: 1}); err != nil {
				t.Fatal(err)
			}
			shared := dialClient(t, n)
			stalled, err := shared.Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(4))
			if err != nil {
				t.Fatal(err)
			}
			// The reader's queue holds every batch of the drop_new run, so
			// however the machine schedules it, only the stalled one's lane
			// share can make it miss any.
			reader, err := shared.Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest(), client.WithQueueCapacity(256))
			if err != nil {
				t.Fatal(err)
			}
			const batches = 200
			readerGot := make(chan int, 1)
			go func() {
				got := 0
				for {
					rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					ev, err := reader.Next(rctx)
					cancel()
					if err != nil || string(ev.Payload) == "last" {
						readerGot <- got
						return
					}
					got++
				}
			}()
			payload := make([]byte, 60<<10)
			// Under block, the reader stops once the stalled subscription's
			// lane holds the whole pool; how many batches that takes depends
			// on how many the stalled one's own small queue dropped on the
			// way (drop_new, by timing), so publish until the reader stops
			// (its Next times out), up to far more than the stalled path can
			// hold (its client frames, QUIC window, queue and the pool).
			limit := batches
			if policy == "block" {
				limit = 1000
			}
			published, got, stopped := 0, 0, false
			for ; published < limit && !stopped; published++ {
				if _, err := pub.PublishBatch(ctx, name, [][]byte{payload}); err != nil {
					t.Fatal(err)
				}
				select {
				case got = <-readerGot:
					stopped = true
				default:
				}
			}
			if !stopped {
				if _, err := pub.PublishBatch(ctx, name, [][]byte{[]byte("last")}); err != nil {
					t.Fatal(err)
				}
				got = <-readerGot
			}
			switch policy {
			case "drop_new":
				// Only the stalled subscription overflows; the reader gets all.
				if got != batches {
					t.Fatalf("the reader got %d of %d batches beside a stalled subscription with its own share", got, batches)
				}
			case "block":
				if got >= published {
					t.Fatalf("the reader got all %d batches: it never waited for the stalled subscription's pool", published)
				}
				// With the stalled one gone the reader carries on.
				_ = stalled.Close()
				for {
					if _, err := pub.PublishBatch(ctx, name, [][]byte{[]byte("again")}); err != nil {
						t.Fatal(err)
					}
					rctx, cancel := context.WithTimeout(ctx, time.Second)
					var err error
					for {
						var ev client.Event
						if ev, err = reader.Next(rctx); err != nil || string(ev.Payload) == "again" {
							break
						}
					}
					cancel()
					if err == nil {
						break
					}
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// Subscriptions that come and go while a publisher runs give back every
// byte of the node's queue total, including batches pushed as they ended.
func TestQueueTotalNoLeakOnSubscriberChurn(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.SubscriberQueueMaxBytesTotal = 4 << 20 })
	ctx := testCtx(t)
	pub := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "churn"}
	if _, err := pub.CreateStream(ctx, name, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				published <- nil
				return
			default:
			}
			if _, err := pub.PublishBatch(ctx, name, [][]byte{make([]byte, 1000)}); err != nil {
				published <- err
				return
			}
		}
	}()
	sc := dialClient(t, n)
	for range 20 {
		sub, err := sc.Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest())
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if _, err := sub.Next(ctx); err != nil {
				t.Fatal(err)
			}
		}
		_ = sub.Close()
	}
	close(stop)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every byte of the total to come back", func() bool { return n.queueTotal.Used() == 0 })
}

// A block stream never waits on the node's queue total (bytes freed by
// other streams' subscribers would never wake it): its own queue bounds it.
func TestBlockStreamIgnoresQueueTotal(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) {
		c.SubscriberQueueMaxBytesTotal = 1 << 20
		c.SubscriberEgressMaxBytes = 256 << 10
		c.PublishQueueWaitTimeoutMillis = 500
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	hog := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "hog"}
	blocking := client.StreamName{Tenant: "t", Namespace: "bp", Stream: "blocking"}
	if _, err := c.CreateStream(ctx, hog, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateStream(ctx, blocking, client.StreamConfig{Shards: 1, Durable: true, Overflow: client.OverflowBlock}); err != nil {
		t.Fatal(err)
	}
	if _, err := dialClient(t, n).Subscribe(ctx, hog, client.WithShard(0), client.WithStartLatest()); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 60<<10)
	// Enough that the hog's client buffers (64 frames, a 1 MiB stream
	// window) fill and the node's queue holds the rest.
	for range 200 {
		if _, err := c.PublishBatch(ctx, hog, [][]byte{payload}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the hog to spend the total", func() bool { return n.queueTotal.Used() > (1<<20)-2*(64<<10) })
	reader, err := dialClient(t, n).Subscribe(ctx, blocking, client.WithShard(0), client.WithStartLatest())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.PublishBatch(ctx, blocking, [][]byte{fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatalf("publish %d to a block stream while the total is spent: %v", i, err)
		}
		ev, err := reader.Next(ctx)
		if err != nil || string(ev.Payload) != fmt.Sprint(i) {
			t.Fatalf("reader: %q %v", ev.Payload, err)
		}
	}
}

// subscriber_egress_max_bytes is split in equal shares among a
// connection's subscriptions, each share updated as subscriptions come and
// go (and a connection's share never counts another connection's).
func TestEgressSharePerConnection(t *testing.T) {
	const bound = 300 << 10
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.SubscriberEgressMaxBytes = bound })
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "t", Namespace: "egress", Stream: "shares"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	var subs []*client.Subscription
	for range 3 {
		sub, err := c.Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest())
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs = append(subs, sub)
	}
	other, err := dialClient(t, n).Subscribe(ctx, name, client.WithShard(0), client.WithStartLatest())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// shares returns the lane shares of the shard's subscriptions, sorted.
	shares := func() []int64 {
		var page struct {
			Rows []struct {
				LaneShare int64 `json:"lane_share"`
			} `json:"rows"`
		}
		if status := getJSON(t, n, "/api/v1/streams/t/egress/shares/shards/0/subscriptions?sort=id", &page); status != http.StatusOK {
			t.Fatalf("subscriptions: %d", status)
		}
		var out []int64
		for _, r := range page.Rows {
			out = append(out, r.LaneShare)
		}
		slices.Sort(out)
		return out
	}
	want := func(w ...int64) func() bool {
		return func() bool { return slices.Equal(shares(), w) }
	}
	waitFor(t, "three shares of one connection, and the other connection's whole bound", want(bound/3, bound/3, bound/3, bound))
	if err := subs[0].Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two shares once one subscription left", want(bound/2, bound/2, bound))
}
