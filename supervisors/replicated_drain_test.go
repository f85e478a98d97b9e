package supervisors

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// drainPublisher publishes "r<i>" through an idempotent ClusterProducer
// until stopped, over a spread of keys, and records what was acknowledged
// and the first error.
type drainPublisher struct {
	mu      sync.Mutex
	acked   []string
	slowest time.Duration
	err     error
	stop    chan struct{}
	done    chan struct{}
}

func startDrainPublisher(ctx context.Context, p *client.ClusterProducer) *drainPublisher {
	dp := &drainPublisher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(dp.done)
		for i := 0; ; i++ {
			select {
			case <-dp.stop:
				return
			default:
			}
			payload := fmt.Sprintf("r%d", i)
			start := time.Now()
			_, err := p.Publish(ctx, [][]byte{[]byte(payload)}, client.WithKey(fmt.Appendf(nil, "k%d", i%13)))
			dp.mu.Lock()
			dp.slowest = max(dp.slowest, time.Since(start))
			if err != nil {
				dp.err = fmt.Errorf("publish %d: %w", i, err)
				dp.mu.Unlock()
				return
			}
			dp.acked = append(dp.acked, payload)
			dp.mu.Unlock()
		}
	}()
	return dp
}

// check fails the test if a publish failed.
func (dp *drainPublisher) check(t *testing.T) {
	t.Helper()
	dp.mu.Lock()
	defer dp.mu.Unlock()
	if dp.err != nil {
		t.Fatalf("the idempotent publisher failed: %v", dp.err)
	}
}

// count is how many publishes were acknowledged so far.
func (dp *drainPublisher) count() int {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	return len(dp.acked)
}

// resetSlowest returns the slowest publish since the last call.
func (dp *drainPublisher) resetSlowest() time.Duration {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	s := dp.slowest
	dp.slowest = 0
	return s
}

// finish stops the publisher and checks that every acknowledged record is
// in the stream once.
func (dp *drainPublisher) finish(t *testing.T, ctx context.Context, c *client.Client, name wire.StreamName, shards uint32) {
	t.Helper()
	close(dp.stop)
	<-dp.done
	dp.check(t)
	seen := map[string]int{}
	for shard := uint32(0); shard < shards; shard++ {
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
	for _, a := range dp.acked {
		if seen[a] != 1 {
			t.Fatalf("record %s is in the stream %d times", a, seen[a])
		}
	}
	if extra := len(seen) - len(dp.acked); extra > 1 {
		t.Fatalf("%d records in the stream were never acknowledged", extra)
	}
	t.Logf("%d records acknowledged, every one in the stream once", len(dp.acked))
}

// waitLeadsNothing waits until node id leads no replicated shard and no
// running node sees it lead the metadata group.
func (tc *testCluster) waitLeadsNothing(id uint64, what string) {
	tc.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		leading := tc.nodes[id].stats.RaftLeading.Load()
		meta := false
		for _, n := range tc.nodes {
			if st, ok, err := n.ClusterStatus(context.Background()); err == nil && ok && st.Meta.Leader == id {
				meta = true
			}
		}
		if leading == 0 && !meta {
			return
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("%s: node %d still leads %d shards (metadata group: %t)", what, id, leading, meta)
		}
		time.Sleep(10 * time.Millisecond) // polling the nodes' state
	}
}

// A drained node hands every leadership away (the metadata group's too)
// while an idempotent publisher runs, and takes none back: not when it
// restarts, not when an election it wins after another node stops. Its
// drain is stored (a restart keeps it). Undrained, it takes back the
// shards placement prefers it for. No publish fails, and every
// acknowledged record is in the stream once.
func TestReplicatedDrainMovesLeadershipsAway(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const shards = 6
	cc, name := tc.replicatedStream(ctx, "drain", shards)
	prefers := map[uint64]int{}
	for shard := range shards {
		prefers[tc.leaderOf(name, shard)]++
	}
	// The node to drain: one that leads shards (leaders spread, so all do).
	x := uint64(2)
	if prefers[x] == 0 {
		t.Fatalf("node %d leads nothing to start with: %v", x, prefers)
	}
	dp := startDrainPublisher(ctx, cc.NewProducer(name, 9))
	waitAcked := func(n int) {
		t.Helper()
		dp.mu.Lock()
		target := len(dp.acked) + n
		dp.mu.Unlock()
		for {
			dp.mu.Lock()
			got, err := len(dp.acked), dp.err
			dp.mu.Unlock()
			if err != nil {
				t.Fatalf("the idempotent publisher failed: %v", err)
			}
			if got >= target {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(10 * time.Millisecond): // polling the publisher's progress
			}
		}
	}
	waitAcked(50)

	// Refusals change nothing.
	if _, err := tc.nodes[1].ChangeCluster(ctx, actors.ClusterDrain, ClusterChange{Node: 9}); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("drain of an unknown node: %v, want invalid_request", err)
	}
	if _, err := tc.nodes[1].ChangeCluster(ctx, "evict", ClusterChange{Node: 2}); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("an unknown operation: %v, want invalid_request", err)
	}

	// Drain x through another node; the answer comes once it applied there.
	meta0, _, _ := tc.nodes[1].ClusterStatus(ctx)
	start := time.Now()
	m, err := tc.nodes[1].ChangeCluster(ctx, actors.ClusterDrain, ClusterChange{Node: x})
	if err != nil || !slices.Equal(m.Drained, []uint64{x}) {
		t.Fatalf("drain %d: %+v, %v", x, m, err)
	}
	committed := time.Since(start)
	tc.waitLeadsNothing(x, "drained")
	took := time.Since(start)
	waitAcked(50)
	t.Logf("drain of node %d (leading %d shards; the metadata group led by %d): committed after %v, every leadership moved after %v; slowest publish meanwhile %v",
		x, prefers[x], meta0.Meta.Leader, committed.Round(time.Millisecond), took.Round(time.Millisecond), dp.resetSlowest().Round(time.Millisecond))
	// Every node prefers another leader for every shard, and says x is drained.
	tc.describeAll(name, "no shard preferring the drained node", func(id uint64, d StreamDescription) bool {
		for _, s := range d.Shard {
			if s.Preferred == x || s.Preferred == 0 {
				return false
			}
		}
		st, _, err := tc.nodes[id].ClusterStatus(ctx)
		return err == nil && slices.Equal(st.Drained, []uint64{x})
	})
	if d, n := metricOf(t, tc.nodes[x], "herald_cluster_node_state", `state="drained"`), metricOf(t, tc.nodes[1], "herald_cluster_drained"); d != 1 || n != 1 {
		t.Fatalf("herald_cluster_node_state{state=drained} on node %d %v, herald_cluster_drained on node 1 %v", x, d, n)
	}
	// Draining it again is no change; the last undrained node cannot be.
	if m, err := tc.nodes[3].ChangeCluster(ctx, actors.ClusterDrain, ClusterChange{Node: x}); err != nil || !slices.Equal(m.Drained, []uint64{x}) {
		t.Fatalf("drain %d again: %+v, %v", x, m, err)
	}
	if _, err := tc.nodes[3].ChangeCluster(ctx, actors.ClusterDrain, ClusterChange{Node: 1}); err != nil {
		t.Fatalf("drain 1: %v", err)
	}
	if _, err := tc.nodes[3].ChangeCluster(ctx, actors.ClusterDrain, ClusterChange{Node: 3}); !isCode(err, wire.CodeInvalidRequest) {
		t.Fatalf("drain of the last undrained node: %v, want invalid_request", err)
	}
	if m, err := tc.nodes[3].ChangeCluster(ctx, actors.ClusterUndrain, ClusterChange{Node: 1}); err != nil || !slices.Equal(m.Drained, []uint64{x}) {
		t.Fatalf("undrain 1: %+v, %v", m, err)
	}
	tc.waitLeadsNothing(x, "drained, after node 1's drain and undrain")

	// A graceful restart of x hands nothing over; x comes back drained.
	nx := tc.nodes[x]
	tc.stop(x)
	if left := nx.leadingAtStop.Load(); left > 0 {
		t.Fatalf("node %d led %d shards when it stopped", x, left)
	}
	tc.start(x)
	for {
		st, _, err := tc.nodes[x].ClusterStatus(ctx)
		if err == nil && slices.Equal(st.Drained, []uint64{x}) && st.Meta.Leader != 0 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the restarted node
	}
	waitAcked(50)
	t.Logf("node %d restarted drained; slowest publish meanwhile %v", x, dp.resetSlowest().Round(time.Millisecond))

	// Another node stops: x and the third elect, and whatever x wins it
	// hands to the third.
	y := uint64(1)
	tc.stop(y)
	z := uint64(3)
	for shard := range shards {
		tc.describeAll(name, "the third node leading", func(id uint64, d StreamDescription) bool {
			return d.Shard[shard].Leader == z
		})
	}
	tc.waitLeadsNothing(x, "drained, after an election")
	waitAcked(50)
	t.Logf("node %d stopped: node %d leads every shard; slowest publish meanwhile %v", y, z, dp.resetSlowest().Round(time.Millisecond))
	tc.start(y)
	for shard := range shards {
		tc.leaderOf(name, shard)
	}
	tc.waitLeadsNothing(x, "drained, after the other node came back")

	// Undrained, x takes back the shards it is preferred for.
	start = time.Now()
	if m, err := tc.nodes[z].ChangeCluster(ctx, actors.ClusterUndrain, ClusterChange{Node: x}); err != nil || len(m.Drained) != 0 {
		t.Fatalf("undrain %d: %+v, %v", x, m, err)
	}
	back := 0
	for shard := range shards {
		if tc.leaderOf(name, shard) == x {
			back++
		}
	}
	if back == 0 {
		t.Fatalf("node %d took back no shard once undrained", x)
	}
	t.Logf("undrained node %d leads %d shards again %v after the undrain", x, back, time.Since(start).Round(time.Millisecond))
	waitAcked(50)
	dp.finish(t, ctx, tc.dial(z), name, shards)
}

// POST /cluster/drain and /cluster/undrain on a cluster whose nodes take
// tokens: without a token the answer is 401, with a token lacking the
// cluster permission 403, with one holding it the change; a bad body, an
// unknown node and a GET are refused with what is wrong; a node without
// peers answers 404. Every refusal is a JSON error naming its wire code.
func TestClusterChangeOverHTTP(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(`tokens:
  - name: ops
    tenant: default
    token: ops-token-for-the-cluster-test
    permissions: [cluster]
  - name: shop
    tenant: default
    token: shop-token-for-the-cluster-test
    permissions: [publish, subscribe, consume, manage]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tc := newTestClusterWith(t, func(c *Config) { c.AuthTokensFile = tokens })
	post := func(path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+tc.nodes[1].HTTPAddr()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		path, token, body string
		status            int
		want              string
	}{
		{"/cluster/drain", "", `{"node":2}`, http.StatusUnauthorized, `"code":"unauthenticated"`},
		{"/cluster/drain", "wrong-token-wrong-token", `{"node":2}`, http.StatusUnauthorized, `unknown token`},
		{"/cluster/drain", "shop-token-for-the-cluster-test", `{"node":2}`, http.StatusForbidden, `"code":"permission_denied"`},
		{"/cluster/drain", "ops-token-for-the-cluster-test", `{"node":0}`, http.StatusBadRequest, `"code":"invalid_request"`},
		{"/cluster/drain", "ops-token-for-the-cluster-test", `{"node":2,"extra":1}`, http.StatusBadRequest, `"code":"invalid_request"`},
		{"/cluster/drain", "ops-token-for-the-cluster-test", `{"node":7}`, http.StatusBadRequest, `node 7 is not a node of this cluster`},
		{"/cluster/drain", "ops-token-for-the-cluster-test", `{"node":2}`, http.StatusOK, `"drained":[2]}`},
		{"/cluster/undrain", "ops-token-for-the-cluster-test", `{"node":2}`, http.StatusOK, `"drained":[]}`},
	} {
		var status int
		var body string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			// A fresh cluster may not have elected its metadata leader yet.
			if status, body = post(c.path, c.token, c.body); status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				break
			}
		}
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("POST %s %s (token %q): %d %s, want %d and %s", c.path, c.body, c.token, status, body, c.status, c.want)
		}
	}
	resp, err := http.Get("http://" + tc.nodes[1].HTTPAddr() + "/cluster/drain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /cluster/drain: %s", resp.Status)
	}
	single := testNode(t, t.TempDir())
	resp, err = http.Post("http://"+single.HTTPAddr()+"/cluster/drain", "application/json", strings.NewReader(`{"node":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a single node's POST /cluster/drain: %s", resp.Status)
	}
}

// Leader balance is configurable: with leader_balance_interval_ms 0 a node
// that comes back takes no leadership back (leaders stay where elections
// put them), while with it on the same restart gives the node back the
// shards placement prefers it for.
func TestReplicatedLeaderBalanceInterval(t *testing.T) {
	for _, c := range []struct {
		interval int
		back     bool
	}{{0, false}, {300, true}} {
		t.Run(fmt.Sprintf("interval=%d", c.interval), func(t *testing.T) {
			tc := newTestClusterWith(t, func(cfg *Config) { cfg.LeaderBalanceIntervalMillis = c.interval })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const shards = 6
			_, name := tc.replicatedStream(ctx, "balance", shards)
			// Every shard led by its first elected leader, x preferred for some.
			x, prefers := uint64(2), 0
			tc.describeAll(name, "a leader for every shard", func(_ uint64, d StreamDescription) bool {
				prefers = 0
				for _, s := range d.Shard {
					if s.Leader == 0 {
						return false
					}
					if s.Preferred == x {
						prefers++
					}
				}
				return true
			})
			if prefers == 0 {
				t.Fatalf("node %d is preferred for no shard", x)
			}
			tc.stop(x)
			tc.describeAll(name, "the others leading", func(_ uint64, d StreamDescription) bool {
				for _, s := range d.Shard {
					if s.Leader == 0 || s.Leader == x {
						return false
					}
				}
				return true
			})
			tc.start(x)
			start := time.Now()
			tc.describeAll(name, "node 2 caught up", func(id uint64, d StreamDescription) bool {
				for _, s := range d.Shard {
					if l, ok := s.Lag[x]; s.Leader == id && (!ok || l > 0) {
						return false
					}
				}
				return true
			})
			if c.back {
				for shard := range shards {
					tc.leaderOf(name, shard)
				}
				t.Logf("node %d leads its %d preferred shards again %v after it restarted", x, prefers, time.Since(start).Round(time.Millisecond))
				return
			}
			// Off: three of the default intervals (600 ms here) pass with x
			// leading nothing.
			for until := time.Now().Add(1800 * time.Millisecond); time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
				if n := tc.nodes[x].stats.RaftLeading.Load(); n != 0 {
					t.Fatalf("with leader balance off, node %d took back %d shards", x, n)
				}
			}
		})
	}
}
