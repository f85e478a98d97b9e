package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/cmd/herald/internal/history"
	"github.com/heraldmq/herald/supervisors"
)

// waitPlaced waits until every node of dc places every shard of stream on
// the same replicas, and each node holding one sees the shard with voters
// exactly those replicas, no learner and a leader; it returns the replicas
// by shard.
func (dc *devCluster) waitPlaced(t *testing.T, stream string) [][]uint64 {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var placed [][]uint64
		var last error
		for _, n := range dc.nodes {
			d, err := nodeDescribe(n, stream)
			if err == nil {
				var these [][]uint64
				for _, s := range d.Shard {
					reps := slices.Sorted(slices.Values(s.Replicas))
					these = append(these, reps)
					if slices.Contains(reps, n.id) && (!slices.Equal(reps, s.Voters) || len(s.Learners) > 0 || s.Leader == 0) {
						err = fmt.Errorf("shard %d: replicas %v, voters %v, learners %v, leader %d", s.Shard, reps, s.Voters, s.Learners, s.Leader)
						break
					}
				}
				if err == nil && placed != nil && !slices.EqualFunc(placed, these, slices.Equal) {
					err = fmt.Errorf("placed %v, another node %v", these, placed)
				}
				placed = these
			}
			if err != nil {
				last = fmt.Errorf("node %d, %s: %w", n.id, stream, err)
				break
			}
		}
		if last == nil {
			return placed
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s's replicas to be placed: %v", stream, last)
		}
		time.Sleep(100 * time.Millisecond) // polling other processes' state
	}
}

// The cluster grows to four node processes and shrinks back to three under
// the kill runs' workload (two `herald pub` processes, a Go
// ClusterProducer, a reader, two racing conditional writers), its clients
// given every node's address: node 4 is started with --join (it waits, not
// a member), added with `herald cluster add 4=ADDR --wait`, and the shards
// placement now puts on it get a replica there (a learner, caught up,
// promoted, the replica it displaces removed); node 1 is then removed with
// `herald cluster remove 1`, which returns once its replicas moved to the
// others and it left, and is stopped. The history checker then runs over
// the three nodes left: every acknowledged record is there once at its
// offset, none is lost or duplicated, no idempotent publish failed or is
// unknown, the replicas' logs agree, and each node's status holds every
// group. How long each step took is logged.
func TestClusterAddAndRemoveNode(t *testing.T) {
	dc := startDevCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	listen, httpAddr := freePorts(t)
	clusterListen, _ := freePorts(t)
	n4 := &clusterNodeProcess{id: 4, dir: t.TempDir(), listen: listen, http: httpAddr, clusterListen: clusterListen,
		peers: dc.nodes[0].peers + ",4=" + clusterListen, join: true}
	n4.start(t)
	if st := n4.status(t); len(st.Members) != 0 || len(st.Peers) != 3 {
		t.Fatalf("node 4, started before its add, sees members %+v and peers %+v", st.Members, st.Peers)
	}
	dc.servers += "," + listen
	dc.cas += "," + filepath.Join(n4.dir, "tls", "ca.pem")
	w := startWorkload(t, ctx, dc)
	time.Sleep(2 * time.Second) // publishing goes on before the change
	before := map[string][][]uint64{"orders": dc.waitPlaced(t, "orders"), "ledger": dc.waitPlaced(t, "ledger")}

	added := time.Now()
	var res supervisors.ClusterChangeResult
	out := dc.cliHTTP(t, "cluster", "add", "4="+clusterListen, "--http", dc.nodes[0].http, "--wait", "--timeout", "2m", "-o", "json")
	if err := json.Unmarshal([]byte(out), &res); err != nil || !slices.Equal(res.Members, []uint64{1, 2, 3, 4}) {
		t.Fatalf("herald cluster add: %v: %s", err, out)
	}
	joined := time.Since(added)
	dc.nodes = append(dc.nodes, n4)
	moved := 0
	for _, stream := range []string{"orders", "ledger"} {
		for i, reps := range dc.waitPlaced(t, stream) {
			if slices.Contains(reps, 4) {
				moved++
				t.Logf("%s shard %d: replicas %v, were %v", stream, i, reps, before[stream][i])
			}
		}
	}
	if moved == 0 {
		t.Fatal("placement put no replica on node 4")
	}
	for _, stream := range []string{"orders", "ledger"} {
		dc.waitCaughtUp(t, stream)
	}
	t.Logf("node 4 joined %v after herald cluster add; %d shards have a replica on it, caught up %v after the add",
		joined.Round(time.Millisecond), moved, time.Since(added).Round(time.Millisecond))

	time.Sleep(2 * time.Second) // publishing goes on between the changes
	removed := time.Now()
	out = dc.cliHTTP(t, "cluster", "remove", "1", "--http", dc.nodes[1].http, "--timeout", "5m")
	if !strings.Contains(out, "node 1 left the cluster") {
		t.Fatalf("herald cluster remove 1: %q", out)
	}
	left := time.Since(removed)
	n1 := dc.nodes[0]
	dc.nodes = dc.nodes[1:]
	for _, stream := range []string{"orders", "ledger"} {
		for i, reps := range dc.waitPlaced(t, stream) {
			if !slices.Equal(reps, []uint64{2, 3, 4}) {
				t.Fatalf("%s shard %d: replicas %v after node 1 left", stream, i, reps)
			}
		}
	}
	for _, n := range dc.nodes {
		st := n.status(t)
		for _, g := range st.Groups {
			if slices.Contains(g.Voters, 1) {
				t.Fatalf("node %d: %s shard %d still has node 1 as a voter: %v", n.id, g.Stream, g.Shard, g.Voters)
			}
		}
		if slices.Contains(st.Meta.Voters, 1) || len(st.Members) != 3 {
			t.Fatalf("node %d: members %+v, metadata %+v", n.id, st.Members, st.Meta)
		}
	}
	t.Logf("node 1 left %v after herald cluster remove (its replicas moved to the others first)", left.Round(time.Millisecond))
	if err := n1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-n1.done
	w.finish(*clusterHistoryDuration)
	if sum := history.Summarize(w.rec.History(), nil); sum.Failed != 0 || sum.Unknown != 0 {
		t.Errorf("orders: %d publishes failed and %d are unknown across the add and the remove", sum.Failed, sum.Unknown)
	}
}
