package actors

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sync/atomic"

	"github.com/heraldmq/herald/net/wire"
)

// The cluster's own state, beside its streams, lives in the metadata group
// too: which nodes are its members, and which of them are drained or
// leaving.
//
// Drained. A drained node leads nothing: placement gives none of its
// replicas a shard's preferred leadership, every leader it holds hands
// leadership to another replica (the metadata group's too), and one it
// wins again in an election is handed away at once. Its replicas stay
// where they are and keep replicating, so it can be stopped (SIGTERM or
// kill -9) and started again without a publish waiting for an election.
// Undrained, it takes back the shards it is the preferred leader of, as a
// node that came back from a failure does.
//
// Members. The nodes of --peers are the first members (each node's first
// start records them). A node added later (cluster add) is a member from
// the entry on: every node links to it, placement places replicas over it
// (rendezvous hashing moves only the replicas it now outweighs), and the
// metadata group's leader adds it to the group, a learner first. A node
// removed (cluster remove) is leaving: placement gives it nothing, so the
// shards' leaders move its replicas to other nodes, and it leads nothing,
// as a drained node; once it holds no replica it says so (a "left" entry
// of its own) and is no member any more: the metadata group's leader
// removes it from the group, and every node drops its link once that
// applied. A node that is gone for good is removed with force: it leaves
// at once. An id that left is never taken again.
//
// Every node applies the same entries, so every node holds the same state;
// the catalog is its one writer, and it publishes it to the shards (which
// read it on their ticks) and to the node (cluster status, peer links)
// through a ClusterView.

// clusterMetaKey is where the cluster's state is stored (a JSON
// ClusterMembership), written with the metadata group's applied index.
var clusterMetaKey = []byte("cluster/state")

// ClusterMembership is the cluster's state as the metadata group holds it.
// Treat it as immutable: a change makes a new one.
type ClusterMembership struct {
	// Members are the cluster's nodes, by increasing id (none before the
	// state was first stored).
	Members []ClusterMember `json:"members,omitempty"`
	// Drained are the drained nodes' ids, sorted.
	Drained []uint64 `json:"drained,omitempty"`
	// Removed are the ids of the nodes that left, sorted: never members
	// again.
	Removed []uint64 `json:"removed,omitempty"`
	// First are the nodes the cluster started with (the nodes of --peers
	// when the state was first stored): the streams created before the
	// cluster recorded each stream's nodes were placed over them.
	First []uint64 `json:"first,omitempty"`
}

// ClusterMember is one node of the cluster.
type ClusterMember struct {
	ID uint64 `json:"id"`
	// Addr is the address its peers reach it at, as cluster add gave it
	// ("" for a first node: each node's --peers says where it is).
	Addr string `json:"addr,omitempty"`
	// Leaving is set once it is being removed: it holds and leads nothing
	// new, and leaves once it holds no replica.
	Leaving bool `json:"leaving,omitempty"`
}

// IDs are every member's id, leaving ones included, sorted.
func (m *ClusterMembership) IDs() []uint64 {
	if m == nil {
		return nil
	}
	out := make([]uint64, len(m.Members))
	for i, mb := range m.Members {
		out[i] = mb.ID
	}
	return out
}

// PlacementNodes are the members placement places replicas on: every
// member that is not leaving, sorted.
func (m *ClusterMembership) PlacementNodes() []uint64 {
	if m == nil {
		return nil
	}
	var out []uint64
	for _, mb := range m.Members {
		if !mb.Leaving {
			out = append(out, mb.ID)
		}
	}
	return out
}

// member returns node id's entry.
func (m *ClusterMembership) member(id uint64) (ClusterMember, bool) {
	if m == nil {
		return ClusterMember{}, false
	}
	for _, mb := range m.Members {
		if mb.ID == id {
			return mb, true
		}
	}
	return ClusterMember{}, false
}

// IsMember reports whether node id is a member (leaving or not).
func (m *ClusterMembership) IsMember(id uint64) bool {
	_, ok := m.member(id)
	return ok
}

// IsLeaving reports whether node id is a member being removed.
func (m *ClusterMembership) IsLeaving(id uint64) bool {
	mb, ok := m.member(id)
	return ok && mb.Leaving
}

// IsDrained reports whether node id is drained.
func (m *ClusterMembership) IsDrained(id uint64) bool {
	return m != nil && slices.Contains(m.Drained, id)
}

// LeadsNothing reports whether node id must lead nothing: it is drained,
// or leaving.
func (m *ClusterMembership) LeadsNothing(id uint64) bool {
	return m.IsDrained(id) || m.IsLeaving(id)
}

// clone returns a copy of m that shares nothing with it.
func (m *ClusterMembership) clone() *ClusterMembership {
	out := &ClusterMembership{}
	if m != nil {
		out.Members = slices.Clone(m.Members)
		out.Drained = slices.Clone(m.Drained)
		out.Removed = slices.Clone(m.Removed)
		out.First = slices.Clone(m.First)
	}
	return out
}

// withDrained returns m with node id drained or not (m itself when
// nothing changes).
func (m *ClusterMembership) withDrained(id uint64, drained bool) *ClusterMembership {
	if m.IsDrained(id) == drained {
		return m
	}
	out := m.clone()
	if drained {
		out.Drained = append(out.Drained, id)
		slices.Sort(out.Drained)
	} else {
		out.Drained = slices.DeleteFunc(out.Drained, func(n uint64) bool { return n == id })
	}
	if len(out.Drained) == 0 {
		out.Drained = nil
	}
	return out
}

// clusterChange is one change of the cluster's state, as an entry of the
// metadata group carries it.
type clusterChange struct {
	Op     ClusterOp
	Target uint64
	// Addr is an added node's peer address.
	Addr string
	// Force removes a node at once (it is gone: nothing waits for it).
	Force bool
}

// change returns the state after c, or why c is refused; maxReplicas is
// the largest replica count of the cluster's streams (no node may leave
// fewer nodes than that to place them on). Every node applying the entry
// follows it on the same applied state, so every node refuses or applies
// alike (the proposer does not check it first: its state may be behind).
// A change that changes nothing returns m itself.
func (m *ClusterMembership) change(c clusterChange, maxReplicas int) (*ClusterMembership, *wire.Error) {
	id := c.Target
	mb, member := m.member(id)
	// stillLeading says whether some node not drained and not leaving
	// would be left: someone must lead.
	stillLeading := func(next *ClusterMembership) bool {
		for _, n := range next.PlacementNodes() {
			if !next.IsDrained(n) {
				return true
			}
		}
		return false
	}
	switch c.Op {
	case ClusterDrain, ClusterUndrain:
		if !member {
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node %d is not a node of this cluster (its nodes are %v)", id, m.IDs())
		}
		next := m.withDrained(id, c.Op == ClusterDrain)
		if next != m && c.Op == ClusterDrain && !stillLeading(next) {
			return nil, wire.Errorf(wire.CodeInvalidRequest,
				"node %d is the only node not drained: draining it would leave no node to lead (undrain another first)", id)
		}
		return next, nil
	case ClusterAdd:
		switch {
		case id == 0:
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node id 0: node ids are not 0")
		case slices.Contains(m.Removed, id):
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node %d left the cluster: an id is never used again, give the new node another", id)
		case member && mb.Addr == c.Addr:
			return m, nil // added before (asked twice)
		case member:
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node %d is a node of this cluster already", id)
		}
		if _, _, err := net.SplitHostPort(c.Addr); err != nil || c.Addr == "" {
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node %d's address %q is not host:port", id, c.Addr)
		}
		next := m.clone()
		next.Members = append(next.Members, ClusterMember{ID: id, Addr: c.Addr})
		slices.SortFunc(next.Members, func(a, b ClusterMember) int { return cmp.Compare(a.ID, b.ID) })
		return next, nil
	case ClusterRemove, clusterLeft:
		switch {
		case !member && slices.Contains(m.Removed, id):
			return m, nil // left before
		case !member:
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node %d is not a node of this cluster (its nodes are %v)", id, m.IDs())
		case c.Op == clusterLeft && !mb.Leaving:
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node %d is not leaving", id)
		case c.Op == ClusterRemove && mb.Leaving && !c.Force:
			return m, nil // asked twice
		}
		next := m.clone()
		if c.Op == clusterLeft || c.Force {
			next.Members = slices.DeleteFunc(next.Members, func(x ClusterMember) bool { return x.ID == id })
			next.Drained = slices.DeleteFunc(next.Drained, func(n uint64) bool { return n == id })
			if len(next.Drained) == 0 {
				next.Drained = nil
			}
			next.Removed = append(next.Removed, id)
			slices.Sort(next.Removed)
		} else {
			for i := range next.Members {
				if next.Members[i].ID == id {
					next.Members[i].Leaving = true
				}
			}
		}
		if c.Op == clusterLeft || mb.Leaving {
			return next, nil // already counted out of placement
		}
		switch left := len(next.PlacementNodes()); {
		case left == 0:
			return nil, wire.Errorf(wire.CodeInvalidRequest, "node %d is the last node placing replicas: the cluster needs one", id)
		case left < maxReplicas:
			return nil, wire.Errorf(wire.CodeInvalidRequest,
				"removing node %d would leave %d nodes for a stream of %d replicas: add a node first, or lower the stream's replicas", id, left, maxReplicas)
		case !stillLeading(next):
			return nil, wire.Errorf(wire.CodeInvalidRequest, "removing node %d would leave only drained nodes: undrain one first", id)
		}
		return next, nil
	}
	return nil, wire.Errorf(wire.CodeInvalidRequest, "unknown cluster operation %q", c.Op)
}

// decodeClusterMembership decodes a stored ClusterMembership.
func decodeClusterMembership(b []byte) (*ClusterMembership, error) {
	m := &ClusterMembership{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("catalog: the stored cluster state: %w", err)
	}
	if !slices.IsSorted(m.Drained) || slices.Contains(m.Drained, 0) || !slices.IsSorted(m.Removed) || slices.Contains(m.Removed, 0) {
		return nil, fmt.Errorf("catalog: the stored cluster state names drained nodes %v and removed nodes %v", m.Drained, m.Removed)
	}
	if !slices.IsSortedFunc(m.Members, func(a, b ClusterMember) int { return cmp.Compare(a.ID, b.ID) }) {
		return nil, fmt.Errorf("catalog: the stored cluster state's members are not in order: %v", m.IDs())
	}
	ids := m.IDs()
	if slices.Contains(ids, 0) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		return nil, fmt.Errorf("catalog: the stored cluster state names members %v", ids)
	}
	return m, nil
}

// ClusterSelfState is a node's own state in the cluster, as it applied the
// metadata group (Stats.ClusterSelf).
type ClusterSelfState int32

// The states of a node.
const (
	// ClusterSelfJoining: not a member yet (started with --join, not
	// added, or not sent the cluster's state yet).
	ClusterSelfJoining ClusterSelfState = iota
	// ClusterSelfActive: a member that may lead.
	ClusterSelfActive
	// ClusterSelfDrained: a drained member.
	ClusterSelfDrained
	// ClusterSelfLeaving: a member being removed.
	ClusterSelfLeaving
	// ClusterSelfLeft: removed; the node should be stopped.
	ClusterSelfLeft
)

// String names s as the metrics label it.
func (s ClusterSelfState) String() string {
	switch s {
	case ClusterSelfActive:
		return "active"
	case ClusterSelfDrained:
		return "drained"
	case ClusterSelfLeaving:
		return "leaving"
	case ClusterSelfLeft:
		return "left"
	}
	return "joining"
}

// selfState is node self's state in m.
func (m *ClusterMembership) selfState(self uint64) ClusterSelfState {
	switch {
	case m != nil && slices.Contains(m.Removed, self):
		return ClusterSelfLeft
	case !m.IsMember(self):
		return ClusterSelfJoining
	case m.IsLeaving(self):
		return ClusterSelfLeaving
	case m.IsDrained(self):
		return ClusterSelfDrained
	}
	return ClusterSelfActive
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
	// ClusterAdd adds a node (ClusterChangeRequest.Addr is its peer
	// address).
	ClusterAdd ClusterOp = "add"
	// ClusterRemove removes a node: its replicas move off it, then it
	// leaves (with Force, at once: it is gone).
	ClusterRemove ClusterOp = "remove"
	// clusterLeft is a leaving node's own word that it holds no replica
	// any more: it is no member from then on.
	clusterLeft ClusterOp = "left"
)

// ClusterChangeRequest asks the catalog to change the cluster's state
// through the metadata group. Answered with *ClusterChangeResponse once
// the change applied on this node and is stored (or failed).
type ClusterChangeRequest struct {
	Op   ClusterOp
	Node uint64
	// Addr is an added node's peer address (ClusterAdd).
	Addr string
	// Force removes a node that is gone at once (ClusterRemove): refused
	// while its link is up.
	Force bool
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
