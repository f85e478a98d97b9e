package actors

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/storage"
)

// RaftRouter joins a node's raft replicas to its peer links: a replica
// finds the link to a peer through it, and what a link reads is routed
// through it to the replica of the group each message names. It is shared
// state, not an actor, so that a link's reader goroutine routes without a
// hop; its maps change only when a link set or a replica starts or stops.
type RaftRouter struct {
	// Self is this node's id; Nodes every node's (Self included), sorted.
	Self        uint64
	Nodes       []uint64
	root        *actor.RootContext
	mu          sync.RWMutex
	links       map[uint64]*actor.PID
	groups      map[peerwire.Group]*actor.PID
	undelivered atomic.Uint64
	// alive are the peers whose links heard from them lately.
	alive map[uint64]bool
	// fetches are the pages goroutines wait for (Fetch), by token.
	fetches fetchWaiters
	// clientAddrs are the client addresses the nodes advertise, by id (as
	// their peer hellos said; this node's own too).
	clientAddrs sync.Map
}

// SetClientAddr records the client address node id advertises ("" for
// none).
func (r *RaftRouter) SetClientAddr(id uint64, addr string) {
	if addr == "" {
		r.clientAddrs.Delete(id)
		return
	}
	r.clientAddrs.Store(id, addr)
}

// ClientAddr is the client address node id advertised ("": none known).
func (r *RaftRouter) ClientAddr(id uint64) string {
	if v, ok := r.clientAddrs.Load(id); ok {
		return v.(string)
	}
	return ""
}

// NewRaftRouter makes the router of node self in a cluster of nodes.
func NewRaftRouter(root *actor.RootContext, self uint64, nodes []uint64) *RaftRouter {
	ns := slices.Clone(nodes)
	slices.Sort(ns)
	return &RaftRouter{Self: self, Nodes: ns, root: root, links: map[uint64]*actor.PID{},
		groups: map[peerwire.Group]*actor.PID{}, alive: map[uint64]bool{}}
}

// SetLinks sets the peer links, by peer id: the links of peers not in
// links are gone (their nodes left the cluster).
func (r *RaftRouter) SetLinks(links map[uint64]*actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.links {
		if _, ok := links[id]; !ok {
			delete(r.links, id)
			delete(r.alive, id)
		}
	}
	for id, pid := range links {
		r.links[id] = pid
	}
}

// Link is the link to peer id (nil: none).
func (r *RaftRouter) Link(id uint64) *actor.PID {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.links[id]
}

// Register routes group's messages to pid.
func (r *RaftRouter) Register(group storage.ShardKey, pid *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups[peerwire.Group{Stream: group.Stream, Shard: group.Shard}] = pid
}

// Unregister stops routing group's messages, if they go to pid.
func (r *RaftRouter) Unregister(group storage.ShardKey, pid *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := peerwire.Group{Stream: group.Stream, Shard: group.Shard}
	if cur := r.groups[g]; cur != nil && cur.Equal(pid) {
		delete(r.groups, g)
	}
}

// Deliver routes what peer from sent (a link's Deliver).
func (r *RaftRouter) Deliver(from uint64, msgs []peerwire.Message) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, m := range msgs {
		pid := r.groups[m.Group]
		if pid == nil {
			// A group not started here yet (its stream's creation not
			// applied yet) or gone: raft resends what matters.
			r.undelivered.Add(1)
			continue
		}
		r.root.Send(pid, &RaftInbound{From: from, Data: m.Data})
	}
}

// PeerSuspect tells every group that a peer's node went silent (its link
// heard nothing for a while, or went down): a quiesced group it leads
// wakes, and elects another leader if it is gone.
type PeerSuspect struct {
	Peer uint64
}

// Alive reports whether peer's link heard from it lately.
func (r *RaftRouter) Alive(peer uint64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.alive[peer]
}

// OnAlive is a link's: its peer is heard from.
func (r *RaftRouter) OnAlive(peer uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alive[peer] = true
}

// OnSuspect is a link's: its peer went silent. Every group hears of it.
func (r *RaftRouter) OnSuspect(peer uint64) {
	r.mu.Lock()
	r.alive[peer] = false
	pids := make([]*actor.PID, 0, len(r.groups))
	for _, pid := range r.groups {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	for _, pid := range pids {
		r.root.Send(pid, &PeerSuspect{Peer: peer})
	}
}

// ShardInbound is a Shard frame a peer sent to a replicated shard.
type ShardInbound struct {
	From uint64
	Msg  peerwire.ShardMessage
}

// DeliverShard routes a Shard frame from peer from (a link's
// DeliverShard).
func (r *RaftRouter) DeliverShard(from uint64, m peerwire.ShardMessage) {
	if m.Page != nil && r.fetches.deliver(m.Page) {
		return
	}
	r.mu.RLock()
	pid := r.groups[m.Group()]
	r.mu.RUnlock()
	if pid == nil {
		r.undelivered.Add(1) // the fetcher asks another replica after its timeout
		return
	}
	r.root.Send(pid, &ShardInbound{From: from, Msg: m})
}

// Undelivered counts messages that arrived for no replica here.
func (r *RaftRouter) Undelivered() uint64 { return r.undelivered.Load() }
