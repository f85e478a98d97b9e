package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/supervisors"
)

// nodeDescribe is node n's own view of stream (GET /streams/describe).
func nodeDescribe(n *clusterNodeProcess, stream string) (supervisors.StreamDescription, error) {
	var d supervisors.StreamDescription
	resp, err := http.Get("http://" + n.http + "/streams/describe?stream=default/default/" + stream)
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return d, fmt.Errorf("GET /streams/describe: %s", resp.Status)
	}
	return d, json.NewDecoder(resp.Body).Decode(&d)
}

// waitNodes polls every running node's view of stream until ok holds on
// each (polling other processes' state: no clock to inject).
func (dc *devCluster) waitNodes(t *testing.T, stream, what string, skip uint64, ok func(supervisors.ShardDescription) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var last error
		for _, n := range dc.nodes {
			if n.id == skip {
				continue
			}
			d, err := nodeDescribe(n, stream)
			if err == nil && (len(d.Shard) == 0 || !ok(d.Shard[0])) {
				err = fmt.Errorf("%+v", d.Shard)
			}
			if err != nil {
				last = fmt.Errorf("node %d: %w", n.id, err)
				break
			}
		}
		if last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metric is the value of a counter or gauge on node n's /metrics.
func metric(t *testing.T, n *clusterNodeProcess, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// Three node processes, the default election timeout: an idle replicated
// stream goes quiet on every node (no ticks, no heartbeats); its leader is
// killed with SIGKILL, and the survivors, told only by their links' beats
// going silent, elect a new one that acknowledges a publish (how long
// after the kill is logged). A follower then killed while the group compacts its
// raft log past it (raft_compact_entries 100) catches up from a snapshot
// when it starts again: its log is fetched in pages and every record is
// there at its offset.
func TestClusterQuietGroupsFailOverAndLaggardsCatchUpFromSnapshots(t *testing.T) {
	dc := startDevCluster(t, "HERALD_RAFT_COMPACT_ENTRIES=100")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dc.cli(t, "stream", "create", "idle", "--shards", "1", "--replicas", "3")
	cc, err := client.DialCluster(ctx, dc.servers, client.WithCAFile(dc.cas))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "idle"}
	next := 0
	publish := sequentialPublisher(t, ctx, cc.NewProducer(name, 1), &next)
	publish(10)
	dc.waitNodes(t, "idle", "the group quiet everywhere", 0, func(s supervisors.ShardDescription) bool { return s.Quiesced })
	lead := dc.describe(t, "idle").Replication[0].Leader
	dc.kill(t, lead)
	killed := time.Now()
	publish(1)
	took := time.Since(killed)
	// Logged, not asserted: a timed bound flakes on a busy machine.
	t.Logf("a quiet group's leader killed: a new leader acknowledged a publish %v later", took.Round(time.Millisecond))
	dc.nodes[lead-1].start(t)
	dc.waitNodes(t, "idle", "the records everywhere", 0, func(s supervisors.ShardDescription) bool { return s.Tail == uint64(next) })

	// A follower down while the group compacts past it.
	lead = dc.describe(t, "idle").Replication[0].Leader
	down := lead%3 + 1
	dc.kill(t, down)
	publish(400)
	dc.waitNodes(t, "idle", "raft logs compacted past the killed follower", down, func(s supervisors.ShardDescription) bool {
		return s.Tail == uint64(next) && s.RaftFirst > 200
	})
	dc.nodes[down-1].start(t)
	dc.waitNodes(t, "idle", "the follower caught up", 0, func(s supervisors.ShardDescription) bool { return s.Tail == uint64(next) })
	// The install's last write follows the pages that bring the tail.
	for deadline := time.Now().Add(20 * time.Second); metric(t, dc.nodes[down-1], "herald_raft_snapshots_installed_total") < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("node %d caught up without herald_raft_snapshots_installed_total counting an install", down)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's metrics
	}
	readBack(t, ctx, dc.nodes[down-1], name, next)
}

// sequentialPublisher returns a publish of n records "r<i>" through p,
// one at a time, each acknowledged at offset i of shard 0; next counts
// them.
func sequentialPublisher(t *testing.T, ctx context.Context, p *client.ClusterProducer, next *int) func(n int) {
	return func(n int) {
		t.Helper()
		for range n {
			ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", *next)})
			if err != nil || ack.Offset != uint64(*next) {
				t.Fatalf("publish %d: %+v, %v", *next, ack, err)
			}
			*next++
		}
	}
}

// readBack reads shard 0 of name from node n and checks that it holds
// "r<i>" at every offset i below count.
func readBack(t *testing.T, ctx context.Context, n *clusterNodeProcess, name wire.StreamName, count int) {
	t.Helper()
	c, err := client.Dial(ctx, n.listen, client.WithCAFile(n.dir+"/tls/ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for off := uint64(0); off < uint64(count); {
		page, err := c.Read(ctx, name, 0, off, uint64(count))
		if err != nil || len(page.Records) == 0 {
			t.Fatalf("read node %d from %d: %v", n.id, off, err)
		}
		for _, r := range page.Records {
			if r.Offset != off || string(r.Payload) != fmt.Sprintf("r%d", off) {
				t.Fatalf("node %d: record at %d is offset %d %q", n.id, off, r.Offset, r.Payload)
			}
			off++
		}
	}
}
