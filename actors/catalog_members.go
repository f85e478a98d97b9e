package actors

import (
	"cmp"
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
// operator's drain, undrain, add or remove, and a leaving node's word that
// it left, are proposed to the metadata group like a stream's create,
// every node applies them alike (ClusterMembership.change), and the
// proposer answers once its own apply is stored.

// clusterState is the cluster's state as this node applied it (never
// nil).
func (c *catalog) clusterState() *ClusterMembership {
	if c.cluster == nil {
		return &ClusterMembership{}
	}
	return c.cluster
}

// placementNodes are the nodes placement places replicas on: the members
// that are not leaving.
func (c *catalog) placementNodes() []uint64 {
	return c.clusterState().PlacementNodes()
}

// leaderNodes are the nodes placement may give a shard's preferred
// leadership: every placement node but the drained ones (all of them, if
// all are).
func (c *catalog) leaderNodes() []uint64 {
	nodes := c.placementNodes()
	up := slices.DeleteFunc(slices.Clone(nodes), c.clusterState().IsDrained)
	if len(up) == 0 {
		return nodes
	}
	return up
}

// maxReplicas is the largest replica count of the cluster's streams
// (those being created included).
func (c *catalog) maxReplicas() int {
	n := 0
	for _, h := range c.streams {
		if h.ID >= replicatedIDBase {
			n = max(n, int(h.Config.Replicas))
		}
	}
	for _, cr := range c.creating {
		if cr.handle.ID >= replicatedIDBase {
			n = max(n, int(cr.handle.Config.Replicas))
		}
	}
	return n
}

// joined reports whether this node is a member of the cluster as it
// applied the metadata group (a node started with --join is not until the
// group's leader sent it the cluster's state).
func (c *catalog) joined() bool {
	return c.clusterState().IsMember(c.cfg.Cluster.Self)
}

// proposeClusterChange proposes an operator's change of the cluster's
// state; the answer comes once it applied here (applyClusterChange).
func (c *catalog) proposeClusterChange(ctx actor.Context, from *actor.PID, m *ClusterChangeRequest) {
	reply := func(r *ClusterChangeResponse) {
		if from != nil {
			ctx.Send(from, r)
		}
	}
	cl := c.cfg.Cluster
	if cl == nil {
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "this node is not part of a cluster (it runs without --peers)")})
		return
	}
	switch m.Op {
	case ClusterDrain, ClusterUndrain, ClusterAdd, ClusterRemove:
	default:
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "unknown cluster operation %q", m.Op)})
		return
	}
	switch {
	case c.left || slices.Contains(c.clusterState().Removed, cl.Self):
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "this node left the cluster: ask a node of the cluster")})
		return
	case !c.joined():
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest, "this node has not joined the cluster yet: ask a node of the cluster")})
		return
	case c.meta == nil || c.meta.failed() != nil:
		reply(&ClusterChangeResponse{Err: &wire.Error{Code: wire.CodeNotLeader,
			Message: "this node is not running the cluster's metadata group yet (starting): retry shortly, or ask another node"}})
		return
	}
	if m.Op == ClusterRemove && m.Force && (m.Node == cl.Self || cl.Router.Alive(m.Node)) {
		reply(&ClusterChangeResponse{Err: wire.Errorf(wire.CodeInvalidRequest,
			"node %d is up: remove it without --force (its replicas move off it first, and nothing is lost)", m.Node)})
		return
	}
	// The change is not checked against this node's state here: that state
	// may be behind the cluster's (a change another node has just answered
	// and this one not applied yet), so a refusal here, or a "nothing to
	// change", could be wrong. It is proposed, and checked where it applies
	// (applyClusterChange), on the state every node applies it to.
	c.nextMetaProposal++
	id := c.nextMetaProposal
	data, _ := json.Marshal(metaEntry{Op: string(m.Op), Node: cl.Self, Proposal: id, Target: m.Node, Addr: m.Addr, Force: m.Force,
		Created: c.cfg.Now().UnixNano()})
	// Without a leader now (one is being elected, or handed over), the
	// entry is proposed again until it applies or the wait is over.
	_ = c.meta.propose(ctx, data)
	w := c.waitMeta(ctx, id, from)
	w.cluster, w.data = true, data
	c.armMetaRetry(ctx, id, w)
}

// metaRetry is a cluster change's timer message: propose it again.
type metaRetry struct{ proposal uint64 }

// armMetaRetry proposes w's entry again an election timeout from now.
func (c *catalog) armMetaRetry(ctx actor.Context, id uint64, w *metaWait) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	every := time.Duration(cmp.Or(c.cfg.Cluster.ElectionTicks, 10)) * cmp.Or(c.cfg.Cluster.Tick, 100*time.Millisecond)
	w.retry = time.AfterFunc(every, func() { root.Send(self, &metaRetry{proposal: id}) }).Stop
}

// onMetaRetry proposes a cluster change again while it waits to apply.
func (c *catalog) onMetaRetry(ctx actor.Context, m *metaRetry) {
	w, ok := c.metaWaits[m.proposal]
	if !ok || c.meta == nil || c.meta.failed() != nil {
		return
	}
	_ = c.meta.propose(ctx, w.data)
	c.armMetaRetry(ctx, m.proposal, w)
}

// applyClusterChange applies a committed change of the cluster's state:
// the state changes at once (setClusterState), it is stored with the
// entry's applied index, and the proposer answers once it is.
func (c *catalog) applyClusterChange(ctx actor.Context, me metaEntry, w *metaWait, appliedPut storage.MetaPut) {
	answer := func(r *ClusterChangeResponse) {
		if w != nil {
			for _, from := range w.waiters {
				ctx.Send(from, r)
			}
		}
	}
	change := clusterChange{Op: ClusterOp(me.Op), Target: me.Target, Addr: me.Addr, Force: me.Force}
	next, werr := c.clusterState().change(change, c.maxReplicas())
	if werr != nil {
		// Refused on the applied state: every node refuses it alike.
		answer(&ClusterChangeResponse{Err: werr})
		c.writeMetaApplied(ctx, appliedPut)
		return
	}
	if next != c.clusterState() {
		ctx.Logger().Info("cluster: "+clusterChangeLog[change.Op], slog.Uint64("node", me.Target), slog.Any("members", next.IDs()),
			slog.Any("drained", next.Drained), slog.Any("leaving", leavingOf(next)))
		c.setClusterState(ctx, next)
	}
	// Written again when nothing changed (applied before a restart, or
	// asked twice), so that storage holds what the catalog does.
	c.storeClusterState(ctx, appliedPut, func(err error) {
		if err != nil {
			answer(&ClusterChangeResponse{Err: storageError(err)})
			return
		}
		answer(&ClusterChangeResponse{Membership: next})
	})
}

// clusterChangeLog is how each change is logged.
var clusterChangeLog = map[ClusterOp]string{
	ClusterDrain:   "node drained",
	ClusterUndrain: "node undrained",
	ClusterAdd:     "node added",
	ClusterRemove:  "node removed (its replicas move off it, then it leaves)",
	clusterLeft:    "node left",
}

// leavingOf lists the members of m that are leaving.
func leavingOf(m *ClusterMembership) []uint64 {
	var out []uint64
	for _, mb := range m.Members {
		if mb.Leaving {
			out = append(out, mb.ID)
		}
	}
	return out
}

// storeClusterState writes the cluster's state with more puts (the
// metadata group's applied index) and calls done once the write is
// durable or failed. A failed write restarts the metadata replica (it
// applies the entry again from what storage holds).
func (c *catalog) storeClusterState(ctx actor.Context, more storage.MetaPut, done func(error)) {
	value, _ := json.Marshal(c.clusterState())
	req := &MetaWriteRequest{Puts: []storage.MetaPut{{Key: clusterMetaKey, Value: value}}}
	if more.Key != nil {
		req.Puts = append(req.Puts, more)
	}
	f := ctx.RequestFuture(c.cfg.Writer, req, 30*time.Second)
	meta := c.meta
	ctx.ReenterAfter(f, func(res any, err error) {
		if r, ok := res.(*MetaWriteResponse); ok && err == nil {
			err = r.Err
		}
		if err != nil {
			ctx.Logger().Error("catalog: cannot store the cluster's state", slog.Any("error", err))
			if c.meta != nil && c.meta == meta && c.meta.failed() == nil {
				c.meta.fail(ctx, fmt.Errorf("storing the cluster's state: %w", err))
				c.restartMeta(ctx)
			}
		}
		if done != nil {
			done(err)
		}
	})
}

// setClusterState makes next the cluster's state here: published to the
// view, every replicated stream placed again (its replicas over the
// members not leaving, its preferred leaders over those not drained), its
// shards told (a leader moves its group to the new replicas, a quiet one
// wakes to hand its leadership over), the metadata replica woken (its
// leader moves the group to the members, a drained one hands it over),
// the peer links told who the peers are now, and, on a node that is
// leaving or left, its own part done.
func (c *catalog) setClusterState(ctx actor.Context, next *ClusterMembership) {
	prev := c.cluster
	c.cluster = next
	c.clusterGen++
	c.cfg.Cluster.View.store(next)
	c.countCluster()
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
	c.notifyPeers()
	self := c.cfg.Cluster.Self
	switch {
	case prev.IsMember(self) && !next.IsMember(self):
		c.onSelfLeft(ctx)
	case next.IsLeaving(self):
		c.armLeaveCheck(ctx)
	}
}

// notifyPeers tells the node who its peers are now: the members, and the
// metadata group's replicas as this node applied its configuration (a node
// that left keeps its link until its removal from the group applied), but
// none once this node left.
func (c *catalog) notifyPeers() {
	cl := c.cfg.Cluster
	if cl.OnPeers == nil || c.cluster == nil || len(c.cluster.Members) == 0 {
		return
	}
	peers := map[uint64]string{}
	if !c.left {
		for _, mb := range c.cluster.Members {
			peers[mb.ID] = mb.Addr
		}
		if c.meta != nil {
			for _, id := range confMembers(c.meta.core.conf) {
				if _, ok := peers[id]; !ok {
					peers[id] = ""
				}
			}
		}
	}
	delete(peers, cl.Self)
	cl.OnPeers(peers)
}

// metaHandingAway reports whether this node leads the metadata group while
// it must lead nothing (drained, or leaving), with another voter to hand
// it to: it must keep ticking.
func (c *catalog) metaHandingAway() bool {
	if c.meta == nil || !c.clusterState().LeadsNothing(c.cfg.Cluster.Self) {
		return false
	}
	return c.meta.status().RaftState == raft.StateLeader && len(c.meta.core.conf.GetVoters()) > 1
}

// onMetaTick runs on each tick of the metadata replica: a leader that must
// lead nothing hands its leadership away (again on each tick: raft
// abandons a transfer that does not complete within an election timeout);
// the leader moves the group's configuration to the members; a restart's
// snapshot is checked once the configuration is current.
func (c *catalog) onMetaTick(ctx actor.Context) {
	c.metaTicks++
	c.checkMetaRestartSnapshot(ctx)
	if c.metaHandingAway() && c.meta.status().LeadTransferee == 0 {
		if to := c.metaSuccessor(true); to != 0 {
			ctx.Logger().Info("cluster: handing the metadata group's leadership over; this node leads nothing", slog.Uint64("to", to))
			c.meta.handle(ctx, c.meta.core.transferLeader(to))
		}
		return
	}
	c.driveMetaConf(ctx)
}

// metaSuccessor is the voter of the metadata group, other than this node,
// whose node is alive and whose log is furthest along (0: none); one that
// may lead (not drained, not leaving) before one that may not, and with
// skipDrained only one that may. A stopping node asks with skipDrained
// false and takes a drained one when no other is left.
func (c *catalog) metaSuccessor(skipDrained bool) uint64 {
	st := c.meta.core.rn.Status()
	state := c.clusterState()
	best, bestMatch, bestDrained := uint64(0), uint64(0), true
	for _, id := range c.meta.core.conf.GetVoters() {
		pr, ok := st.Progress[id]
		if id == c.cfg.Cluster.Self || !ok || pr.State != tracker.StateReplicate || !c.cfg.Cluster.Router.Alive(id) {
			continue
		}
		d := state.LeadsNothing(id)
		if d && skipDrained {
			continue
		}
		// One that may lead beats one that may not; then the furthest along.
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

// loadClusterState takes the cluster's state storage held at the catalog's
// start (nil: none). A node's first start in a cluster records the nodes
// of --peers as the members and the cluster's first nodes; a node joining
// a running cluster (--join) records nothing: it takes the state from the
// metadata group's snapshot.
func (c *catalog) loadClusterState(ctx actor.Context, stored *ClusterMembership) {
	cl := c.cfg.Cluster
	st := stored
	if (st == nil || len(st.Members) == 0) && !cl.Join {
		st = st.clone()
		st.First = cl.Router.Nodes
		for _, id := range cl.Router.Nodes {
			st.Members = append(st.Members, ClusterMember{ID: id})
		}
		c.cluster = st
		c.storeClusterState(ctx, storage.MetaPut{}, nil)
	}
	if st == nil {
		return // joining: nothing known yet
	}
	c.cluster = st
	cl.View.store(st)
	c.countCluster()
	switch self := cl.Self; {
	case slices.Contains(st.Removed, self):
		c.left = true
		ctx.Logger().Warn("cluster: this node left the cluster; stop it (its data directory is no longer the cluster's, and its id is never used again)")
	case st.IsLeaving(self):
		c.armLeaveCheck(ctx)
	}
	c.notifyPeers()
}

// countCluster publishes the cluster's state to the node's metrics.
func (c *catalog) countCluster() {
	st, m := c.cfg.Stats, c.clusterState()
	st.ClusterMembers.Store(int64(len(m.Members)))
	st.ClusterDrained.Store(int64(len(m.Drained)))
	st.ClusterLeaving.Store(int64(len(leavingOf(m))))
	st.ClusterSelf.Store(int32(m.selfState(c.cfg.Cluster.Self)))
}
