package actors

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// The catalog's side of the cluster's own state (cluster_state.go): an
// operator's drain or undrain is proposed to the metadata group like a
// stream's create, every node applies it alike, and the proposer answers
// once its own apply is stored.

// leaderNodes are the nodes placement may give a shard's preferred
// leadership: every node but the drained ones (every node, if all are).
func (c *catalog) leaderNodes() []uint64 {
	nodes := c.cfg.Cluster.Router.Nodes
	if c.cluster == nil || len(c.cluster.Drained) == 0 {
		return nodes
	}
	up := slices.DeleteFunc(slices.Clone(nodes), c.cluster.IsDrained)
	if len(up) == 0 {
		return nodes
	}
	return up
}

// proposeClusterChange proposes an operator's change of the cluster's
// state; the answer comes once it applied here (applyDrain).
func (c *catalog) proposeClusterChange(ctx actor.Context, from *actor.PID, m *ClusterChangeRequest) {
	reply := func(r *ClusterChangeResponse) {
		if from != nil {
			ctx.Send(from, r)
		}
	}
	cl := c.cfg.Cluster
	switch {
	case cl == nil:
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "this node is not part of a cluster (it runs without --peers)")})
		return
	case m.Op != ClusterDrain && m.Op != ClusterUndrain:
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "unknown cluster operation %q", m.Op)})
		return
	case !slices.Contains(cl.Router.Nodes, m.Node):
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "node %d is not a node of this cluster (its nodes are %v)", m.Node, cl.Router.Nodes)})
		return
	case m.Op == ClusterDrain && c.cluster.IsDrained(m.Node), m.Op == ClusterUndrain && !c.cluster.IsDrained(m.Node):
		reply(&ClusterChangeResponse{Membership: c.clusterState()}) // nothing to change
		return
	case m.Op == ClusterDrain && len(c.leaderNodes()) == 1 && c.leaderNodes()[0] == m.Node:
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest,
			"node %d is the only node not drained: draining it would leave no node to lead (undrain another first)", m.Node)})
		return
	case c.meta == nil || c.meta.failed() != nil:
		reply(&ClusterChangeResponse{Err: &wire.Error{Code: wire.CodeNotLeader, Message: "the cluster's metadata group is not running on this node yet; retry shortly"}})
		return
	}
	c.nextMetaProposal++
	id := c.nextMetaProposal
	data, _ := json.Marshal(metaEntry{Op: string(m.Op), Node: cl.Self, Proposal: id, Target: m.Node, Created: c.cfg.Now().UnixNano()})
	if err := c.meta.propose(ctx, data); err != nil {
		reply(&ClusterChangeResponse{Err: &wire.Error{Code: wire.CodeNotLeader,
			Message: fmt.Sprintf("the cluster's metadata group has no leader this node can reach (%v); retry shortly", err)}})
		return
	}
	c.waitMeta(ctx, id, from).cluster = true
}

// clusterState is the cluster's state as this node applied it (never
// nil).
func (c *catalog) clusterState() *ClusterMembership {
	if c.cluster == nil {
		return &ClusterMembership{}
	}
	return c.cluster
}

// applyDrain applies a committed drain or undrain: the state changes at
// once (every stream's preferred leaders are placed again, and the shards
// told), it is stored with the entry's applied index, and the proposer
// answers once it is.
func (c *catalog) applyDrain(ctx actor.Context, me metaEntry, w *metaWait, appliedPut storage.MetaPut) {
	answer := func(r *ClusterChangeResponse) {
		if w != nil {
			for _, from := range w.waiters {
				ctx.Send(from, r)
			}
		}
	}
	if !slices.Contains(c.cfg.Cluster.Router.Nodes, me.Target) {
		// Checked by the proposer; every node refuses it alike.
		answer(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "node %d is not a node of this cluster", me.Target)})
		c.writeMetaApplied(ctx, appliedPut)
		return
	}
	next := c.clusterState().withDrained(me.Target, me.Op == "drain")
	if len(next.Drained) == len(c.cfg.Cluster.Router.Nodes) {
		// Two drains raced past the proposers' checks: the later one is
		// refused on every node alike, so that some node leads.
		answer(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest,
			"node %d is the only node not drained: draining it would leave no node to lead (undrain another first)", me.Target)})
		c.writeMetaApplied(ctx, appliedPut)
		return
	}
	if next != c.clusterState() {
		ctx.Logger().Info("cluster: node "+me.Op+"ed", slog.Uint64("node", me.Target), slog.Any("drained", next.Drained))
		c.setClusterState(ctx, next)
	}
	// Written again when nothing changed (applied before a restart, or
	// asked twice), so that storage holds what the catalog does.
	value, _ := json.Marshal(c.clusterState())
	req := &MetaWriteRequest{Puts: []storage.MetaPut{{Key: clusterMetaKey, Value: value}, appliedPut}}
	f := ctx.RequestFuture(c.cfg.Writer, req, 30*time.Second)
	meta, state := c.meta, c.clusterState()
	ctx.ReenterAfter(f, func(res any, err error) {
		if r, ok := res.(*MetaWriteResponse); ok && err == nil {
			err = r.Err
		}
		if err != nil {
			ctx.Logger().Error("catalog: cannot store the cluster's state", slog.Any("error", err))
			answer(&ClusterChangeResponse{Err: storageError(err)})
			// As for a replica count: the metadata replica starts again
			// from what storage holds, and applies the entry again.
			if c.meta != nil && c.meta == meta && c.meta.failed() == nil {
				c.meta.fail(ctx, fmt.Errorf("storing the cluster's state: %w", err))
				c.restartMeta(ctx)
			}
			return
		}
		answer(&ClusterChangeResponse{Membership: state})
	})
}

// setClusterState makes next the cluster's state here: published to the
// view, every replicated stream's placement made again (its preferred
// leaders skip drained nodes), its shards told (a quiet leader wakes to
// hand its leadership over), and the metadata replica woken (a drained
// leader hands it over on its next tick).
func (c *catalog) setClusterState(ctx actor.Context, next *ClusterMembership) {
	c.cluster = next
	c.clusterGen++
	c.cfg.Cluster.View.store(next)
	for _, h := range c.streams {
		if h.ID < replicatedIDBase || h.Config.Replicas < 1 {
			continue
		}
		c.placement(h)
		for _, pid := range h.Shards {
			ctx.Send(pid, &ShardReplicasChanged{})
		}
	}
	if c.meta != nil {
		c.meta.wake(ctx)
	}
}

// metaHandingAway reports whether this node leads the metadata group while
// drained, with another voter to hand it to: it must keep ticking.
func (c *catalog) metaHandingAway() bool {
	if c.meta == nil || !c.clusterState().IsDrained(c.cfg.Cluster.Self) {
		return false
	}
	return c.meta.status().RaftState == raft.StateLeader && len(c.meta.core.conf.GetVoters()) > 1
}

// onMetaTick hands the metadata group's leadership away from a drained
// node (on each tick while it leads: raft abandons a transfer that does
// not complete within an election timeout).
func (c *catalog) onMetaTick(ctx actor.Context) {
	if !c.metaHandingAway() || c.meta.status().LeadTransferee != 0 {
		return
	}
	if to := c.metaSuccessor(true); to != 0 {
		ctx.Logger().Info("cluster: handing the metadata group's leadership over; this node is drained", slog.Uint64("to", to))
		c.meta.handle(ctx, c.meta.core.transferLeader(to))
	}
}

// metaSuccessor is the voter of the metadata group, other than this node,
// whose node is alive and whose log is furthest along (0: none); with
// skipDrained, only an undrained one. A stopping node asks with
// skipDrained false and takes a drained one when no other is left.
func (c *catalog) metaSuccessor(skipDrained bool) uint64 {
	st := c.meta.core.rn.Status()
	drained := c.clusterState()
	best, bestMatch, bestDrained := uint64(0), uint64(0), true
	for _, id := range c.meta.core.conf.GetVoters() {
		pr, ok := st.Progress[id]
		if id == c.cfg.Cluster.Self || !ok || pr.State != tracker.StateReplicate || !c.cfg.Cluster.Router.Alive(id) {
			continue
		}
		d := drained.IsDrained(id)
		if d && skipDrained {
			continue
		}
		// An undrained voter beats a drained one; then the furthest along.
		if best == 0 || (bestDrained && !d) || (bestDrained == d && pr.Match > bestMatch) {
			best, bestMatch, bestDrained = id, pr.Match, d
		}
	}
	return best
}

// metaStatus is this node's view of the metadata group.
func (c *catalog) metaStatus() *MetaStatusResponse {
	if c.meta == nil {
		return &MetaStatusResponse{}
	}
	st := c.meta.status()
	return &MetaStatusResponse{Leader: st.Lead, Term: st.GetTerm(),
		Voters: slices.Clone(c.meta.core.conf.GetVoters()), Learners: slices.Clone(c.meta.core.conf.GetLearners())}
}
