package supervisors

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// getJSON GETs path on n's HTTP listener into out and returns the status.
func getJSON(t *testing.T, n *Node, path string, out any) int {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
	return resp.StatusCode
}

// In a cluster the dashboard shows every node with its link, and every
// replicated shard with its leader, replicas and, on the leader, each
// replica's lag; a group's page is on the node that coordinates it (the
// leader of its stream's shard 0), and another node answers not_leader.
func TestDashboardCluster(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "dash", 2)
	tc.describeAll(name, "the stream on every node", func(_ uint64, d StreamDescription) bool { return len(d.Shard) == 2 })
	for i := range 20 {
		if _, err := cc.PublishBatch(ctx, name, [][]byte{[]byte("r")}, client.WithKey([]byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	lead := tc.leaderOf(name, 0)
	if _, err := tc.dial(lead).Group(name, "workers").Poll(ctx, 0, 1, time.Second); err != nil {
		t.Fatal(err)
	}

	var view clusterView
	deadline := time.Now().Add(20 * time.Second)
	for {
		view = clusterView{}
		if status := getJSON(t, tc.nodes[lead], "/api/v1/cluster", &view); status != http.StatusOK {
			t.Fatalf("cluster: %d", status)
		}
		up := 0
		for _, n := range view.Nodes {
			if n.Up != nil && *n.Up {
				up++
			}
		}
		if up == 3 && view.Shards.Total == 2 && len(view.Shards.Rows) == 2 && view.Shards.Rows[0].Raft != nil &&
			view.Shards.Rows[0].Raft.Leader == lead && len(view.Shards.Rows[0].Raft.Lag) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster view never showed 3 nodes up and shard 0 led by %d: %+v", lead, view)
		}
		time.Sleep(50 * time.Millisecond) // polling the sampler's next tick
	}
	if !view.Enabled || view.NodeID != lead {
		t.Errorf("view = %+v", view)
	}
	r := view.Shards.Rows[0]
	if r.Stream != "default/default/dash" || r.Shard != 0 || len(r.Raft.Replicas) != 3 || !r.HeldHere || !r.Answered {
		t.Errorf("shard 0: %+v / %+v", r, r.Raft)
	}
	for _, n := range view.Nodes {
		if !n.Self && n.Addr == "" {
			t.Errorf("node %d has no address in the node scope: %+v", n.ID, n)
		}
	}

	// The group's page: on its coordinator, and refused elsewhere.
	var group groupView
	if status := getJSON(t, tc.nodes[lead], "/api/v1/groups/default/default/dash/workers", &group); status != http.StatusOK || len(group.Shards) != 2 {
		t.Errorf("the group on its coordinator %d: %d %+v", lead, status, group)
	}
	other := lead%3 + 1
	if status := getJSON(t, tc.nodes[other], "/api/v1/groups/default/default/dash/workers", nil); status != http.StatusConflict {
		t.Errorf("the group on node %d, which does not coordinate it: %d, want 409 not_leader", other, status)
	}

	// A single node is not a cluster.
	single := startDashNode(t)
	view = clusterView{}
	if status := getJSON(t, single.Node, "/api/v1/cluster", &view); status != http.StatusOK || view.Enabled || len(view.Nodes) != 0 {
		t.Errorf("a single node's cluster view: %d %+v", status, view)
	}
}
