package actors

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/heraldmq/herald/net/wire"
)

// The cluster's own state, beside its streams, lives in the metadata group
// too: which nodes are drained. A drained node leads nothing: placement
// gives none of its replicas a shard's preferred leadership, every leader
// it holds hands leadership to another replica (the metadata group's
// too), and one it wins again in an election is handed away at once. Its
// replicas stay where they are and keep replicating, so it can be stopped
// (SIGTERM or kill -9) and started again without a publish waiting for an
// election. Undrained, it takes back the shards it is the preferred leader
// of, as a node that came back from a failure does.
//
// Every node applies the same entries, so every node holds the same state;
// the catalog is its one writer, and it publishes it to the shards (which
// read it on their ticks) and to the node (cluster status) through a
// ClusterView.

// clusterMetaKey is where the cluster's state is stored (a JSON
// ClusterMembership), written with the metadata group's applied index.
var clusterMetaKey = []byte("cluster/state")

// ClusterMembership is the cluster's state as the metadata group holds it.
// Treat it as immutable: a change makes a new one.
type ClusterMembership struct {
	// Drained are the drained nodes' ids, sorted.
	Drained []uint64 `json:"drained,omitempty"`
}

// IsDrained reports whether node id is drained.
func (m *ClusterMembership) IsDrained(id uint64) bool {
	return m != nil && slices.Contains(m.Drained, id)
}

// withDrained returns m with node id drained or not (m itself when
// nothing changes).
func (m *ClusterMembership) withDrained(id uint64, drained bool) *ClusterMembership {
	if m.IsDrained(id) == drained {
		return m
	}
	out := &ClusterMembership{}
	if m != nil {
		*out = *m
	}
	if drained {
		out.Drained = append(slices.Clone(out.Drained), id)
		slices.Sort(out.Drained)
	} else {
		out.Drained = slices.DeleteFunc(slices.Clone(out.Drained), func(n uint64) bool { return n == id })
	}
	if len(out.Drained) == 0 {
		out.Drained = nil
	}
	return out
}

// decodeClusterMembership decodes a stored ClusterMembership.
func decodeClusterMembership(b []byte) (*ClusterMembership, error) {
	m := &ClusterMembership{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("catalog: the stored cluster state: %w", err)
	}
	if !slices.IsSorted(m.Drained) || slices.Contains(m.Drained, 0) {
		return nil, fmt.Errorf("catalog: the stored cluster state names drained nodes %v", m.Drained)
	}
	return m, nil
}

// ClusterView publishes the catalog's ClusterMembership to whoever reads
// it (the shards, on their ticks; the node's status): one writer, the
// catalog, and any number of readers.
type ClusterView struct {
	p atomic.Pointer[ClusterMembership]
}

// Load returns the cluster's state as this node applied it last (never
// nil).
func (v *ClusterView) Load() *ClusterMembership {
	if v == nil {
		return &ClusterMembership{}
	}
	if m := v.p.Load(); m != nil {
		return m
	}
	return &ClusterMembership{}
}

// store publishes m.
func (v *ClusterView) store(m *ClusterMembership) {
	if v != nil {
		v.p.Store(m)
	}
}

// ClusterOp is a change of the cluster's state an operator asks for.
type ClusterOp string

// The cluster operations.
const (
	// ClusterDrain drains a node: it hands its leaderships away and takes
	// none back until undrained.
	ClusterDrain ClusterOp = "drain"
	// ClusterUndrain ends a node's drain.
	ClusterUndrain ClusterOp = "undrain"
)

// ClusterChangeRequest asks the catalog to change the cluster's state
// through the metadata group. Answered with *ClusterChangeResponse once
// the change applied on this node and is stored (or failed).
type ClusterChangeRequest struct {
	Op   ClusterOp
	Node uint64
}

// ClusterChangeResponse answers ClusterChangeRequest: the cluster's state
// after the change, or why it was refused.
type ClusterChangeResponse struct {
	Membership *ClusterMembership
	Err        *wire.Error
}

// MetaStatusRequest asks the catalog for its metadata replica's view of
// the metadata group. Answered with *MetaStatusResponse (zero while the
// replica does not run).
type MetaStatusRequest struct{}

// MetaStatusResponse answers MetaStatusRequest.
type MetaStatusResponse struct {
	// Leader is the metadata group's leader as this replica knows it (0:
	// none), Term its term.
	Leader, Term uint64
	// Voters and Learners are the group's configuration as this replica
	// applied it.
	Voters, Learners []uint64
}
