package actors

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/heraldmq/herald/net/wire"
)

// withDrained adds and removes a node, keeps the list sorted, returns the
// same state when nothing changes, and never changes the state it was
// called on (a published state is shared).
func TestClusterMembershipWithDrained(t *testing.T) {
	var none *ClusterMembership
	if none.IsDrained(1) || none.withDrained(1, false) != none {
		t.Fatal("a nil state drains nobody, and undraining changes nothing")
	}
	a := none.withDrained(3, true)
	b := a.withDrained(1, true)
	c := b.withDrained(3, false)
	for _, tc := range []struct {
		m    *ClusterMembership
		want []uint64
	}{{a, []uint64{3}}, {b, []uint64{1, 3}}, {c, []uint64{1}}} {
		if !slices.Equal(tc.m.Drained, tc.want) {
			t.Errorf("drained %v, want %v", tc.m.Drained, tc.want)
		}
	}
	if b.withDrained(1, true) != b || c.withDrained(3, false) != c {
		t.Error("a change that changes nothing made a new state")
	}
	if d := c.withDrained(1, false); d.Drained != nil || d.IsDrained(1) {
		t.Errorf("undrained all: %+v", d)
	}
	// Stored and read back.
	v, _ := json.Marshal(b)
	back, err := decodeClusterMembership(v)
	if err != nil || !slices.Equal(back.Drained, b.Drained) {
		t.Fatalf("read back %+v, %v", back, err)
	}
	for _, bad := range []string{`{"drained":[3,1]}`, `{"drained":[0]}`, `{"drained":"x"}`, `nope`, `{"removed":[0]}`,
		`{"members":[{"id":2},{"id":1}]}`, `{"members":[{"id":1},{"id":1}]}`, `{"members":[{"id":0}]}`} {
		if _, err := decodeClusterMembership([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

// The rule every node applies a cluster change by: what it refuses, what
// changes nothing, and the state it makes, from a cluster of nodes 1, 2
// and 3 where node 2 is drained and node 5 left before.
func TestClusterMembershipChange(t *testing.T) {
	base := &ClusterMembership{Members: []ClusterMember{{ID: 1}, {ID: 2}, {ID: 3}}, Drained: []uint64{2}, Removed: []uint64{5}, First: []uint64{1, 2, 3}}
	leaving3 := &ClusterMembership{Members: []ClusterMember{{ID: 1}, {ID: 2}, {ID: 3, Leaving: true}}, Drained: []uint64{2}, Removed: []uint64{5}}
	for _, c := range []struct {
		name        string
		from        *ClusterMembership
		change      clusterChange
		maxReplicas int
		refused     string // a part of the refusal; "" when applied
		same        bool   // nothing changes
		members     []uint64
		leaving     []uint64
		drained     []uint64
		removed     []uint64
	}{
		{name: "drain", from: base, change: clusterChange{Op: ClusterDrain, Target: 1}, members: []uint64{1, 2, 3}, drained: []uint64{1, 2}, removed: []uint64{5}},
		{name: "drain again", from: base, change: clusterChange{Op: ClusterDrain, Target: 2}, same: true},
		{name: "drain the last undrained", from: base.withDrained(1, true), change: clusterChange{Op: ClusterDrain, Target: 3}, refused: "the only node not drained"},
		{name: "drain a stranger", from: base, change: clusterChange{Op: ClusterDrain, Target: 9}, refused: "not a node of this cluster"},
		{name: "undrain", from: base, change: clusterChange{Op: ClusterUndrain, Target: 2}, members: []uint64{1, 2, 3}, removed: []uint64{5}},
		{name: "undrain one not drained", from: base, change: clusterChange{Op: ClusterUndrain, Target: 1}, same: true},
		{name: "add", from: base, change: clusterChange{Op: ClusterAdd, Target: 4, Addr: "10.0.0.4:7402"}, members: []uint64{1, 2, 3, 4}, drained: []uint64{2}, removed: []uint64{5}},
		{name: "add below the others", from: base, change: clusterChange{Op: ClusterAdd, Target: 0, Addr: "10.0.0.4:7402"}, refused: "node id 0"},
		{name: "add a member", from: base, change: clusterChange{Op: ClusterAdd, Target: 3, Addr: "10.0.0.3:7402"}, refused: "a node of this cluster already"},
		{name: "add a removed id", from: base, change: clusterChange{Op: ClusterAdd, Target: 5, Addr: "10.0.0.5:7402"}, refused: "never used again"},
		{name: "add without an address", from: base, change: clusterChange{Op: ClusterAdd, Target: 4, Addr: "nowhere"}, refused: "is not host:port"},
		{name: "remove", from: base, change: clusterChange{Op: ClusterRemove, Target: 3}, maxReplicas: 2, members: []uint64{1, 2, 3}, leaving: []uint64{3}, drained: []uint64{2}, removed: []uint64{5}},
		{name: "remove below the replicas", from: base, change: clusterChange{Op: ClusterRemove, Target: 3}, maxReplicas: 3, refused: "would leave 2 nodes for a stream of 3 replicas"},
		{name: "remove leaving only drained", from: base.withDrained(3, true), change: clusterChange{Op: ClusterRemove, Target: 1}, maxReplicas: 1, refused: "only drained nodes"},
		{name: "remove twice", from: leaving3, change: clusterChange{Op: ClusterRemove, Target: 3}, maxReplicas: 3, same: true},
		{name: "remove a removed node", from: base, change: clusterChange{Op: ClusterRemove, Target: 5}, same: true},
		{name: "force", from: base, change: clusterChange{Op: ClusterRemove, Target: 3, Force: true}, maxReplicas: 2, members: []uint64{1, 2}, drained: []uint64{2}, removed: []uint64{3, 5}},
		{name: "force a drained one", from: base, change: clusterChange{Op: ClusterRemove, Target: 2, Force: true}, maxReplicas: 2, members: []uint64{1, 3}, removed: []uint64{2, 5}},
		{name: "force a leaving one", from: leaving3, change: clusterChange{Op: ClusterRemove, Target: 3, Force: true}, maxReplicas: 3, members: []uint64{1, 2}, drained: []uint64{2}, removed: []uint64{3, 5}},
		{name: "force below the replicas", from: base, change: clusterChange{Op: ClusterRemove, Target: 3, Force: true}, maxReplicas: 3, refused: "would leave 2 nodes"},
		{name: "left", from: leaving3, change: clusterChange{Op: clusterLeft, Target: 3}, maxReplicas: 3, members: []uint64{1, 2}, drained: []uint64{2}, removed: []uint64{3, 5}},
		{name: "left, not leaving", from: base, change: clusterChange{Op: clusterLeft, Target: 3}, refused: "is not leaving"},
		{name: "unknown", from: base, change: clusterChange{Op: "evict", Target: 3}, refused: "unknown cluster operation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, _ := json.Marshal(c.from)
			next, werr := c.from.change(c.change, c.maxReplicas)
			if after, _ := json.Marshal(c.from); string(after) != string(before) {
				t.Fatalf("the state changed in place: %s, was %s", after, before)
			}
			switch {
			case c.refused != "":
				if werr == nil || werr.Code != wire.CodeInvalidRequest || !strings.Contains(werr.Message, c.refused) {
					t.Fatalf("%+v, %v; want invalid_request: %s", next, werr, c.refused)
				}
				return
			case werr != nil:
				t.Fatalf("refused: %v", werr)
			case c.same:
				if next != c.from {
					t.Fatalf("%+v, want no change", next)
				}
				return
			}
			if !slices.Equal(next.IDs(), c.members) || !slices.Equal(leavingOf(next), c.leaving) || !slices.Equal(next.Drained, c.drained) ||
				!slices.Equal(next.Removed, c.removed) || !slices.Equal(next.First, c.from.First) {
				t.Fatalf("members %v leaving %v drained %v removed %v first %v; want %v %v %v %v %v", next.IDs(), leavingOf(next), next.Drained, next.Removed, next.First,
					c.members, c.leaving, c.drained, c.removed, c.from.First)
			}
			// What every node stores reads back the same.
			v, _ := json.Marshal(next)
			back, err := decodeClusterMembership(v)
			if err != nil || !slices.Equal(back.IDs(), next.IDs()) {
				t.Fatalf("read back %+v, %v", back, err)
			}
			if mb, ok := next.member(c.change.Target); c.change.Op == ClusterAdd && (!ok || mb.Addr != c.change.Addr) {
				t.Fatalf("added %+v", mb)
			}
		})
	}
}

// A metadata snapshot's data reads back as the streams and the cluster's
// state it holds; one without data is a group's first state (its voters
// the members, no stream); data that is not a catalog's is refused.
func TestMetaSnapshotData(t *testing.T) {
	st := storedFrom(replicatedIDBase+7, wire.StreamName{Tenant: "t", Namespace: "n", Stream: "s"}, wire.StreamConfig{Shards: 2, Durable: true, Replicas: 3}, 99)
	st.CreatedNodes = []uint64{1, 2, 4}
	cm := &ClusterMembership{Members: []ClusterMember{{ID: 1}, {ID: 2}, {ID: 4, Addr: "h:1"}}, Removed: []uint64{3}, First: []uint64{1, 2, 3}}
	data, _ := json.Marshal(metaSnapshot{Streams: []storedStream{st}, Cluster: cm})
	ms, err := decodeMetaSnapshot(data, &pb.ConfState{Voters: []uint64{1, 2, 4}})
	if err != nil || len(ms.Streams) != 1 || !slices.Equal(ms.Streams[0].CreatedNodes, st.CreatedNodes) || !slices.Equal(ms.Cluster.IDs(), []uint64{1, 2, 4}) {
		t.Fatalf("%+v, %v", ms, err)
	}
	first, err := decodeMetaSnapshot(nil, &pb.ConfState{Voters: []uint64{1, 2, 3}})
	if err != nil || len(first.Streams) != 0 || !slices.Equal(first.Cluster.IDs(), []uint64{1, 2, 3}) || !slices.Equal(first.Cluster.First, []uint64{1, 2, 3}) {
		t.Fatalf("the first state: %+v, %v", first, err)
	}
	own := st
	own.ID = 5
	for name, bad := range map[string]any{
		"no members":      metaSnapshot{Streams: []storedStream{st}},
		"a node's own":    metaSnapshot{Streams: []storedStream{own}, Cluster: cm},
		"a bad stream":    map[string]any{"streams": []any{map[string]any{"id": replicatedIDBase + 1, "shards": 0}}, "cluster": cm},
		"a bad state":     map[string]any{"cluster": map[string]any{"members": []any{map[string]any{"id": 0}}}},
		"not json at all": "x",
	} {
		data, _ := json.Marshal(bad)
		if name == "not json at all" {
			data = []byte("{")
		}
		if _, err := decodeMetaSnapshot(data, &pb.ConfState{}); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
