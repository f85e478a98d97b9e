package supervisors

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// scrapeSeries fetches /metrics and returns each series (name{labels}) with its
// value.
func scrapeSeries(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	line := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})?) (\S+)$`)
	for _, l := range strings.Split(string(body), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out[m[1]] = v
	}
	return out
}

// After traffic, /metrics has the documented series with the right values.
func TestMetricsAfterTraffic(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n)
	a := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "a"}
	b := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "b"}
	for _, s := range []client.StreamName{a, b} {
		if _, err := c.CreateStream(ctx, s, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // 3 batches of 4 records of 10 bytes to a
		if _, err := c.PublishBatch(ctx, a, [][]byte{[]byte("0123456789"), []byte("0123456789"), []byte("0123456789"), []byte("0123456789")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctx, b, []byte("x")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, a, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for range 12 {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A group that took 5 of a's 12 records and acked 2.
	recs, err := c.Group(a, "g").Poll(ctx, 0, 5, time.Second)
	if err != nil || len(recs) != 5 {
		t.Fatalf("poll: %d %v", len(recs), err)
	}
	if _, err := c.Group(a, "g").AckOffsets(ctx, 0, recs[0].Offset, recs[1].Offset); err != nil {
		t.Fatal(err)
	}

	want := map[string]float64{
		`herald_publish_records_total{stream="acme/shop/a"}`:  12,
		`herald_publish_bytes_total{stream="acme/shop/a"}`:    12 * 13, // a record: key length, header count, payload length, 10 bytes
		`herald_publish_batches_total{stream="acme/shop/a"}`:  3,
		`herald_publish_records_total{stream="acme/shop/b"}`:  1,
		`herald_publish_ack_duration_seconds_count`:           4,
		`herald_group_delivered_total`:                        5,
		`herald_group_acked_total`:                            2,
		`herald_group_claims{group="g",stream="acme/shop/a"}`: 3,
		`herald_group_lag{group="g",stream="acme/shop/a"}`:    10,
		`herald_connections`:                                  1,
		`herald_subscriptions`:                                1,
	}
	var got map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = scrapeSeries(t, n)
		ok := true
		for k, v := range want {
			if got[k] != v {
				ok = false
			}
		}
		if ok && got["herald_delivered_batches_total"] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			t.Fatalf("delivered batches %v", got["herald_delivered_batches_total"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, k := range []string{`herald_storage_commit_duration_seconds_count`, `herald_storage_commit_batches_count`,
		`herald_storage_commits_total`, `herald_delivered_bytes_total`,
		`go_goroutines`, `go_memstats_heap_alloc_bytes`, `process_resident_memory_bytes`} {
		if got[k] < 1 {
			t.Errorf("%s = %v, want at least 1", k, got[k])
		}
	}
	if got[`herald_storage_commit_batches_sum`] < 4 {
		t.Errorf("commits carried %v batches, want at least the 4 published", got[`herald_storage_commit_batches_sum`])
	}
	for k := range got {
		if strings.Contains(k, "offset") || strings.Contains(k, "client") || strings.Contains(k, "member=") {
			t.Errorf("series %s has an unbounded label", k)
		}
	}
}

// With actor_metrics, protoactor's own series are on /metrics too.
func TestActorMetrics(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.ActorMetrics = true })
	c := dialClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, client.StreamName{Tenant: "a", Namespace: "b", Stream: "c"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for k := range scrapeSeries(t, n) {
		if strings.HasPrefix(k, "protoactor_") {
			found[strings.SplitN(k, "{", 2)[0]] = true
		}
	}
	for _, want := range []string{"protoactor_actor_spawn_count_total", "protoactor_actor_message_receive_duration_seconds_count"} {
		if !found[want] {
			t.Errorf("no %s among %v", want, found)
		}
	}
}
