package actors

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// The metadata group's own members follow the cluster's (cluster_state.go):
// its leader moves the group's configuration to the members with the rule
// the shards follow (planConfChange: a new node joins as a learner and is
// promoted once caught up; a node that left is removed, the leader last,
// after a handover), one change at a time.
//
// A node added to a running cluster does not know how the group began, so
// its replica starts with nothing (--join) and the leader sends it a
// snapshot: every replica takes one at each configuration change it
// applies (the one that adds the node included), holding the catalog's
// state there (its cluster streams' records and the cluster's state), and
// raft sends the latest to a replica whose log is behind its first entry,
// as a new one's is. A replica installs a snapshot by taking the streams
// it lacks, the replica counts that changed and the cluster's state; no
// cluster stream is ever deleted, so what it holds beyond the snapshot
// stays.

// metaSnapshot is the data of a metadata group snapshot.
type metaSnapshot struct {
	Streams []storedStream     `json:"streams"`
	Cluster *ClusterMembership `json:"cluster"`
}

// metaSnapshotData is the catalog's state now, as a snapshot holds it.
func (c *catalog) metaSnapshotData() []byte {
	ms := metaSnapshot{Cluster: c.clusterState()}
	for _, h := range c.streams {
		if h.ID >= replicatedIDBase {
			ms.Streams = append(ms.Streams, recordOf(h))
		}
	}
	for _, cr := range c.creating {
		if cr.handle.ID >= replicatedIDBase {
			ms.Streams = append(ms.Streams, recordOf(cr.handle))
		}
	}
	data, _ := json.Marshal(ms)
	return data
}

// decodeMetaSnapshot decodes a snapshot's data: the catalog's state at
// its index. A snapshot without data is a group's first state, implied by
// its configuration: no stream, its voters the cluster's first members.
func decodeMetaSnapshot(data []byte, cs *pb.ConfState) (metaSnapshot, error) {
	if len(data) == 0 {
		m := &ClusterMembership{First: cs.GetVoters()}
		for _, id := range cs.GetVoters() {
			m.Members = append(m.Members, ClusterMember{ID: id})
		}
		return metaSnapshot{Cluster: m}, nil
	}
	var ms metaSnapshot
	if err := json.Unmarshal(data, &ms); err != nil {
		return metaSnapshot{}, fmt.Errorf("catalog: the metadata group's snapshot: %w", err)
	}
	if ms.Cluster == nil || len(ms.Cluster.Members) == 0 {
		return metaSnapshot{}, errors.New("catalog: the metadata group's snapshot holds no members")
	}
	v, _ := json.Marshal(ms.Cluster)
	if _, err := decodeClusterMembership(v); err != nil {
		return metaSnapshot{}, fmt.Errorf("catalog: the metadata group's snapshot: %w", err)
	}
	for i, st := range ms.Streams {
		v, _ := json.Marshal(st)
		if _, err := decodeStoredStream(v); err != nil {
			return metaSnapshot{}, fmt.Errorf("catalog: the metadata group's snapshot, stream %d: %w", i, err)
		}
		if st.ID < replicatedIDBase {
			return metaSnapshot{}, fmt.Errorf("catalog: the metadata group's snapshot holds stream id %d, not a cluster stream's", st.ID)
		}
	}
	return ms, nil
}

// onMetaConf learns a configuration change the metadata replica applied at
// index: the peers are told (a node removed from the group loses its links
// once this node applied it), and, the first time it is applied, a
// snapshot is taken there.
func (c *catalog) onMetaConf(ctx actor.Context, cs *pb.ConfState, index uint64, fresh bool) {
	c.metaConfUntil = 0
	c.notifyPeers()
	if !fresh {
		return
	}
	c.cfg.Stats.add(&c.cfg.Stats.RaftConfChanges, 1)
	ctx.Logger().Info("cluster: the metadata group's configuration changed", slog.Uint64("index", index),
		slog.Any("voters", cs.GetVoters()), slog.Any("learners", cs.GetLearners()))
	c.takeMetaSnapshot(ctx, index, cs)
}

// takeMetaSnapshot takes a snapshot of the catalog's state at index (the
// entry applied last), whose configuration is cs, and stores it. The raft
// log is kept: the snapshot is for replicas behind its first entry.
func (c *catalog) takeMetaSnapshot(ctx actor.Context, index uint64, cs *pb.ConfState) {
	r := c.meta
	first, _ := r.core.log.FirstIndex()
	if err := r.core.compact(index, 0, proto.Clone(cs).(*pb.ConfState), c.metaSnapshotData()); err != nil {
		if !errors.Is(err, raft.ErrSnapOutOfDate) {
			ctx.Logger().Warn("cluster: the metadata group's snapshot", slog.Any("error", err))
		}
		return
	}
	snap, _ := r.core.log.Snapshot()
	metas, err := raftCompactMetas(metaGroupKey, snap, first, 0)
	if err != nil {
		ctx.Logger().Warn("cluster: the metadata group's snapshot", slog.Any("error", err))
		return
	}
	ctx.Request(c.cfg.Writer, &MetaWriteRequest{Puts: metas}) // no token: the replica ignores its answer
}

// checkMetaRestartSnapshot runs on a tick once a restart applied again
// every configuration change up to where the replica applied before it: if
// the stored snapshot's configuration is not the one that makes (a crash
// came before the snapshot onMetaConf took was stored), one is taken at
// the entry applied last.
func (c *catalog) checkMetaRestartSnapshot(ctx actor.Context) {
	r := c.meta
	if c.metaConfChecked || r == nil || r.core.rn.Status().Applied < r.startApplied {
		return
	}
	c.metaConfChecked = true
	snap, err := r.core.log.Snapshot()
	if err != nil || proto.Equal(snap.GetMetadata().GetConfState(), r.core.conf) || r.applied <= snap.GetMetadata().GetIndex() {
		return
	}
	c.takeMetaSnapshot(ctx, r.applied, r.core.conf)
}

// metaReconfiguring reports whether this node leads the metadata group and
// its configuration is not the members yet (its reason not to quiesce).
func (c *catalog) metaReconfiguring() bool {
	if c.meta == nil || c.left || c.meta.status().RaftState != raft.StateLeader {
		return false
	}
	target := c.clusterState().IDs()
	return len(target) > 0 && !confIsTarget(c.meta.core.conf, target)
}

// driveMetaConf takes the metadata group's leader's next step towards a
// configuration whose voters are the members (on each tick while it
// leads).
func (c *catalog) driveMetaConf(ctx actor.Context) {
	r := c.meta
	if !c.metaReconfiguring() || r.core.rn.Status().Applied < r.startApplied {
		return
	}
	st := r.core.rn.Status()
	if st.LeadTransferee != 0 {
		return
	}
	election := cmp.Or(c.cfg.Cluster.ElectionTicks, 10)
	if c.metaConfUntil != 0 && c.metaTicks <= c.metaConfUntil && c.metaConfTerm == st.GetTerm() {
		return // the last change proposed has not applied yet (raft would drop another)
	}
	target := c.clusterState().IDs()
	progress := map[uint64]confProgress{}
	for id, pr := range st.Progress {
		progress[id] = confProgress{Match: pr.Match, Replicating: pr.State == tracker.StateReplicate,
			Active: id == c.cfg.Cluster.Self || c.cfg.Cluster.Router.Alive(id)}
	}
	step := planConfChange(target, r.core.conf, c.cfg.Cluster.Self, progress, st.GetCommit())
	switch {
	case step.Transfer != 0:
		ctx.Logger().Info("cluster: handing the metadata group's leadership over before leaving it", slog.Uint64("to", step.Transfer))
		r.handle(ctx, r.core.transferLeader(step.Transfer))
	case step.Change != nil:
		if err := r.proposeConfChange(ctx, step.Change); err != nil {
			var nl errNotLeader
			if !errors.As(err, &nl) {
				ctx.Logger().Warn("cluster: the metadata group's configuration change was not proposed", slog.Any("error", err))
			}
			return
		}
		c.metaConfUntil, c.metaConfTerm = c.metaTicks+2*election, st.GetTerm()
		ctx.Logger().Info("cluster: proposed a change of the metadata group's configuration", slog.String("change", describeConfChange(step.Change)),
			slog.Any("members", target))
	}
}

// installMeta installs a snapshot of the metadata group the leader sent
// (this replica was behind its first entry: a node that joined, or one
// down for long): the streams it lacks are created (their records stored,
// their shards started under the snapshot's cluster state), the replica
// counts that differ are taken, and the cluster's state is the snapshot's;
// all of it is stored in one write with raft's snapshot, and raft goes on
// from there once it is durable.
func (c *catalog) installMeta(ctx actor.Context, snap *pb.Snapshot) {
	ms, err := decodeMetaSnapshot(snap.GetData(), snap.GetMetadata().GetConfState())
	if err != nil {
		c.meta.fail(ctx, err)
		return
	}
	index := snap.GetMetadata().GetIndex()
	var puts []storage.MetaPut
	var added []*StreamHandle
	changed := 0
	record := func(h *StreamHandle) {
		value, _ := json.Marshal(recordOf(h))
		puts = append(puts, storage.MetaPut{Key: append(append([]byte(nil), metaStreamPrefix...), nameKey(h.Name)...), Value: value})
	}
	for _, st := range ms.Streams {
		name := wire.StreamName{Tenant: st.Tenant, Namespace: st.NS, Stream: st.Stream}
		key := nameKey(name)
		if _, creating := c.creating[key]; creating {
			continue // its create applied here already
		}
		h, ok := c.streams[key]
		switch {
		case ok && h.ID != st.ID:
			ctx.Logger().Error("catalog: the cluster holds a stream this node holds another stream under; this node's stays, and holds no replica of the cluster's",
				slog.String("stream", key))
		case ok && h.Config.Replicas != st.Replicas:
			nh := &StreamHandle{ID: h.ID, Name: h.Name, Config: h.Config, CreatedUnixNano: h.CreatedUnixNano, Log: h.Log,
				Shards: h.Shards, Progress: h.Progress, createdReplicas: cmp.Or(h.createdReplicas, h.Config.Replicas), createdNodes: h.createdNodes}
			nh.Config.Replicas = st.Replicas
			c.streams[key] = nh
			record(nh)
			changed++
		case !ok:
			h := c.newHandle(st)
			added = append(added, h)
			record(h)
		}
	}
	value, _ := json.Marshal(ms.Cluster)
	puts = append(puts, storage.MetaPut{Key: clusterMetaKey, Value: value},
		storage.MetaPut{Key: raftAppliedKey(metaGroupKey), Value: binary.BigEndian.AppendUint64(nil, index)})
	c.meta.finishInstall(ctx, puts, nil)
	c.cfg.Stats.add(&c.cfg.Stats.MetaSnapshotsInstalled, 1)
	// The state first: the new streams' shards are placed under it. The
	// shards ask the storage writer for their state after the write above.
	c.setClusterState(ctx, ms.Cluster)
	for _, h := range added {
		c.spawnShards(ctx, h)
		c.streams[nameKey(h.Name)] = h
	}
	ctx.Logger().Info("cluster: installed the metadata group's snapshot", slog.Uint64("index", index),
		slog.Int("streams", len(ms.Streams)), slog.Int("new", len(added)), slog.Int("replicas_changed", changed),
		slog.Any("members", ms.Cluster.IDs()))
}

// leaveCheck is a leaving node's timer message: does it still hold a
// replica?
type leaveCheck struct{}

// armLeaveCheck arms the leaving node's next check, a second from now.
func (c *catalog) armLeaveCheck(ctx actor.Context) {
	if c.leaveTimer != nil || c.stopping {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	c.leaveTimer = time.AfterFunc(time.Second, func() { root.Send(self, &leaveCheck{}) }).Stop
}

// onLeaveCheck proposes that this leaving node left, once it holds no
// replica of any shard (their leaders moved them to other nodes) and does
// not lead the metadata group.
func (c *catalog) onLeaveCheck(ctx actor.Context) {
	c.leaveTimer = nil
	self := c.cfg.Cluster.Self
	if c.stopping || c.left || !c.clusterState().IsLeaving(self) {
		return
	}
	defer c.armLeaveCheck(ctx)
	held := 0
	c.cfg.Stats.EachRaftGroup(func(*RaftGauges) { held++ })
	if held > 0 || c.meta == nil || c.meta.failed() != nil || c.meta.status().RaftState == raft.StateLeader {
		ctx.Logger().Debug("cluster: this node is leaving; it still holds replicas", slog.Int("replicas", held))
		return
	}
	ctx.Logger().Info("cluster: this node holds no replica any more; it leaves the cluster")
	c.nextMetaProposal++
	data, _ := json.Marshal(metaEntry{Op: string(clusterLeft), Node: self, Proposal: c.nextMetaProposal, Target: self, Created: c.cfg.Now().UnixNano()})
	if err := c.meta.propose(ctx, data); err != nil {
		ctx.Logger().Debug("cluster: leaving: not proposed", slog.Any("error", err))
	}
}

// leftDone is a node's timer message, two election timeouts after it left
// the cluster: it stops its metadata replica and its links.
type leftDone struct{}

// onSelfLeft runs when this node applied its own leaving: it leads and
// holds nothing. Its metadata replica runs on for two election timeouts
// (its vote may still be needed to commit its removal from the group),
// then stops, and the node drops its links.
func (c *catalog) onSelfLeft(ctx actor.Context) {
	ctx.Logger().Warn("cluster: this node left the cluster; stop it (its data directory is no longer the cluster's, and its id is never used again)")
	if c.leftTimer != nil || c.stopping {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	wait := 2 * time.Duration(cmp.Or(c.cfg.Cluster.ElectionTicks, 10)) * cmp.Or(c.cfg.Cluster.Tick, 100*time.Millisecond)
	c.leftTimer = time.AfterFunc(wait, func() { root.Send(self, &leftDone{}) }).Stop
}

// onLeftDone stops the metadata replica and the links of a node that
// left.
func (c *catalog) onLeftDone(ctx actor.Context) {
	c.leftTimer = nil
	if c.left || c.stopping {
		return
	}
	c.left = true
	c.stopMeta(ctx)
	c.meta = nil
	c.notifyPeers()
}
