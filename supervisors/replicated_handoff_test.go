package supervisors

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// A rolling restart under an idempotent publisher: each node in turn shuts
// down gracefully, handing its leaderships over first, and starts again.
// The publisher never gets an error, every acknowledged record is in the
// stream once, and each node led nothing when it closed.
func TestReplicatedRollingRestartHandsLeadershipOver(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "roll", 3)
	for shard := range 3 {
		tc.leaderOf(name, shard)
	}
	p := cc.NewProducer(name, 5)
	var (
		mu      sync.Mutex
		acked   []string
		slowest time.Duration
		pubErr  error
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			payload := fmt.Sprintf("r%d", i)
			start := time.Now()
			_, err := p.Publish(ctx, [][]byte{[]byte(payload)}, client.WithKey(fmt.Appendf(nil, "k%d", i%11)))
			mu.Lock()
			slowest = max(slowest, time.Since(start))
			if err != nil {
				pubErr = fmt.Errorf("publish %d: %w", i, err)
				mu.Unlock()
				return
			}
			acked = append(acked, payload)
			mu.Unlock()
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	timeouts, handed := uint64(0), int64(0)
	for id := uint64(1); id <= 3; id++ {
		before := count()
		for count() < before+50 {
			select {
			case <-done:
				t.Fatalf("the publisher stopped: %v", pubErr)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(10 * time.Millisecond): // let the publisher get ahead (polling another goroutine's progress)
			}
		}
		n := tc.nodes[id]
		led := n.stats.RaftLeading.Load()
		mu.Lock()
		slowest = 0
		mu.Unlock()
		tc.stop(id)
		timeouts += n.stats.RaftProposalTimeouts.Load()
		handed += led
		if left := n.leadingAtStop.Load(); left != 0 {
			t.Fatalf("node %d led %d shards, and still %d when it closed", id, led, left)
		}
		tc.start(id)
		for shard := range 3 {
			tc.leaderOf(name, shard)
		}
		// Back and caught up before the next one stops.
		tc.describeAll(name, "every replica caught up", func(_ uint64, d StreamDescription) bool {
			for _, s := range d.Shard {
				for _, lag := range s.Lag {
					if lag > 0 {
						return false
					}
				}
			}
			return true
		})
		mu.Lock()
		t.Logf("node %d (leading %d shards) restarted; slowest publish meanwhile %v", id, led, slowest.Round(time.Millisecond))
		mu.Unlock()
	}
	close(stop)
	<-done
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	if handed == 0 {
		t.Fatal("no node led anything when it stopped: nothing was handed over")
	}
	for _, n := range tc.nodes {
		timeouts += n.stats.RaftProposalTimeouts.Load()
	}
	// Logged, not asserted: a proposal the old leader had not applied when
	// it stepped down is answered replication_timeout (and re-sent).
	t.Logf("%d records acknowledged; %d publishes answered replication_timeout across the restarts", count(), timeouts)

	// Every acknowledged record is in the stream once.
	seen := map[string]int{}
	c := tc.dial(1)
	for shard := uint32(0); shard < 3; shard++ {
		for next := uint64(0); ; {
			page, err := c.Read(ctx, name, shard, next, ^uint64(0))
			if err != nil {
				t.Fatalf("read shard %d from %d: %v", shard, next, err)
			}
			for _, r := range page.Records {
				seen[string(r.Payload)]++
			}
			if len(page.Records) == 0 || page.Next == next {
				break
			}
			next = page.Next
		}
	}
	for _, a := range acked {
		if seen[a] != 1 {
			t.Fatalf("record %s is in the stream %d times", a, seen[a])
		}
	}
	// One more may be in the stream: the publish in flight when the
	// publisher stopped.
	if extra := len(seen) - len(acked); extra > 1 {
		t.Fatalf("%d records in the stream were never acknowledged", extra)
	}
}
