package supervisors

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// cluster is a node's side of its cluster (cfg.Peers set): the UDP socket
// peers reach it on, its QUIC transport and listener, the accept loop,
// the peers actor that owns one link per peer, and the router that joins
// the links to the node's raft replicas (the metadata group in the
// catalog, and every replicated shard hosted here).
type cluster struct {
	self uint64
	// peers are the nodes of --peers with their addresses: the first
	// peers, and where this node reaches a peer that --peers names.
	peers map[uint64]string
	tls   transport.PeerTLS
	udp   *net.UDPConn
	tr    *quic.Transport
	ln    *quic.Listener
	pid   *actor.PID
	// router routes raft messages between the links and the replicas.
	router *actors.RaftRouter
	// view is the cluster's state as the catalog applied it (drained
	// nodes).
	view *actors.ClusterView
	// advertise is the client address this node advertises (set before the
	// links start, never changed).
	advertise string
	// mu guards current, gen and pid's hand-over to setPeers.
	mu sync.Mutex
	// current are the peers now, by id with the address this node reaches
	// them at (the catalog's OnPeers; --peers until it first says);
	// gen counts the sets.
	current map[uint64]string
	gen     uint64
	// resetKey is the peer transport's stateless reset key.
	resetKey quic.StatelessResetKey
	wg       sync.WaitGroup
}

// clusterCatalog makes the router and the catalog's side of the cluster
// (nil for a single node).
func (n *Node) clusterCatalog() *actors.CatalogCluster {
	c := n.cluster
	if c == nil {
		return nil
	}
	ids := make([]uint64, 0, len(c.peers))
	for id := range c.peers {
		ids = append(ids, id)
	}
	c.router = actors.NewRaftRouter(n.sys.Root, c.self, ids)
	c.view = &actors.ClusterView{}
	n.stats.InCluster.Store(true)
	c.current = map[uint64]string{}
	for id, addr := range c.peers {
		if id != c.self {
			c.current[id] = addr
		}
	}
	election := time.Duration(n.cfg.RaftElectionTimeoutMillis) * time.Millisecond
	tick := election / 10
	balance := -1 // off
	if n.cfg.LeaderBalanceIntervalMillis > 0 {
		balance = max(1, int(time.Duration(n.cfg.LeaderBalanceIntervalMillis)*time.Millisecond/tick))
	}
	return &actors.CatalogCluster{Self: c.self, Router: c.router, Tick: tick, ElectionTicks: 10, HeartbeatTicks: 1,
		ProposalTimeout: time.Duration(n.cfg.ReplicationTimeoutMillis) * time.Millisecond, CompactEntries: uint64(n.cfg.RaftCompactEntries),
		View: c.view, BalanceTicks: balance, Join: n.cfg.ClusterJoin, OnPeers: func(p map[uint64]string) { n.setPeers(p) },
		FollowerMaxLag: uint64(n.cfg.FollowerMaxLagEntries)}
}

// peerQUIC is the QUIC configuration of peer connections: keep-alives so
// an idle pair notices a dead peer, and a short idle timeout so a link is
// seen down (and raft told) within seconds.
func peerQUIC() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout: 5 * time.Second,
		MaxIdleTimeout:       5 * time.Second,
		KeepAlivePeriod:      time.Second,
		// A peer link opens one stream; a group relay one per push
		// member it relays (and its control stream).
		MaxIncomingStreams:    4096,
		MaxIncomingUniStreams: -1,
	}
}

// relayQUIC is the QUIC configuration of the group relays this node
// dials: a coordinating node that dies is noticed within two election
// timeouts (its members join again through the next leader).
func relayQUIC(election time.Duration) *quic.Config {
	idle := max(2*election, time.Second)
	return &quic.Config{
		HandshakeIdleTimeout:  idle,
		MaxIdleTimeout:        idle,
		KeepAlivePeriod:       idle / 4,
		MaxIncomingStreams:    -1,
		MaxIncomingUniStreams: -1,
	}
}

// advertise is the client address this node advertises to its peers:
// advertise when set, else the address its client socket is bound to when
// listen names a host, else none (a wildcard address reaches no one).
func (n *Node) advertise() string {
	if n.cfg.Advertise != "" {
		return n.cfg.Advertise
	}
	host, _, err := net.SplitHostPort(n.cfg.Listen)
	if err != nil || host == "" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil {
		// A host name: advertised as given, with the port bound.
		if _, port, err := net.SplitHostPort(n.Addr()); err == nil {
			return net.JoinHostPort(host, port)
		}
		return n.cfg.Listen
	}
	return n.Addr()
}

// clusterNodesFunc is clusterNodes, nil for a single node.
func (n *Node) clusterNodesFunc() func() []wire.ClusterNode {
	if n.cluster == nil {
		return nil
	}
	return n.clusterNodes
}

// clusterNodes answers a client's ClusterNodes: this node and its peers,
// by id, with the client address each advertised (or "").
func (n *Node) clusterNodes() []wire.ClusterNode {
	c := n.cluster
	c.mu.Lock()
	ids := []uint64{c.self}
	for id := range c.current {
		if id != c.self {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	slices.Sort(ids)
	out := make([]wire.ClusterNode, len(ids))
	for i, id := range ids {
		out[i] = wire.ClusterNode{ID: id, Addr: c.router.ClientAddr(id)}
	}
	return out
}

// remoteShards reads, for the group coordinators, the shards this node
// holds no replica of (nil for a single node).
func (n *Node) remoteShards() *actors.RemoteShards {
	if n.cluster == nil {
		return nil
	}
	return &actors.RemoteShards{Router: n.cluster.router}
}

// groupRelay is the dialler of this node's group relays (nil for a
// single node): the relays reach a peer's cluster listener, under the peer
// TLS, with peerwire.RelayALPN.
func (n *Node) groupRelay() *actors.GroupRelay {
	c := n.cluster
	if c == nil {
		return nil
	}
	election := time.Duration(n.cfg.RaftElectionTimeoutMillis) * time.Millisecond
	// A dead coordinator is passed over once its relay's dial gives up:
	// as soon as a live peer would have answered a few times over.
	return &actors.GroupRelay{Self: c.self, Timeout: max(2*election, time.Second),
		Dial: func(ctx context.Context, node uint64) (*quic.Conn, error) {
			c.mu.Lock()
			addr, ok := c.current[node]
			c.mu.Unlock()
			if !ok || node == c.self {
				return nil, fmt.Errorf("node %d is not a peer", node)
			}
			ua, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, fmt.Errorf("peer address %q: %w", addr, err)
			}
			return c.tr.Dial(ctx, ua, c.tls.RelayClient(), relayQUIC(election))
		}}
}

// bindCluster opens the peer socket (before anything else starts, like
// the client one, so a busy address fails the start at once).
func (n *Node) bindCluster() error {
	if n.cfg.Peers == "" {
		return nil
	}
	peers, err := ParsePeers(n.cfg.Peers)
	if err != nil {
		return fmt.Errorf("node: peers: %w", err)
	}
	ua, err := net.ResolveUDPAddr("udp", n.cfg.ClusterListen)
	if err != nil {
		return fmt.Errorf("node: cluster listen address %q: %w", n.cfg.ClusterListen, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return fmt.Errorf("node: cluster listen %s: %w", n.cfg.ClusterListen, err)
	}
	n.cluster = &cluster{self: n.cfg.NodeID, peers: peers, udp: udp}
	return nil
}

// startCluster starts the peer listener and the links.
func (n *Node) startCluster() error {
	c := n.cluster
	if c == nil {
		return nil
	}
	var err error
	if n.cfg.ClusterCA != "" {
		c.tls, err = transport.ClusterTLS(n.cfg.ClusterCA, n.cfg.ClusterCert, n.cfg.ClusterKey)
	} else {
		c.tls, err = transport.DevPeerTLS()
	}
	if err != nil {
		return fmt.Errorf("node: cluster TLS: %w", err)
	}
	if !c.tls.Authenticated {
		n.logger.Warn("cluster: peer traffic is encrypted but NOT authenticated (no --cluster-ca): whoever answers at a peer's address is taken for that peer; development only")
	}
	c.tr = &quic.Transport{Conn: c.udp, StatelessResetKey: &c.resetKey}
	if c.ln, err = c.tr.Listen(c.tls.Server, peerQUIC()); err != nil {
		return fmt.Errorf("node: cluster listen: %w", err)
	}
	election := time.Duration(n.cfg.RaftElectionTimeoutMillis) * time.Millisecond
	var links []actors.PeerLinkConfig
	dial := actors.PeerDialer(c.tr, c.tls.Client, peerQUIC())
	c.advertise = n.advertise()
	c.router.SetClientAddr(c.self, c.advertise)
	template := actors.PeerLinkConfig{Self: c.self, Dial: dial, CheckIdentity: c.tls.CheckPeerIdentity,
		Deliver: c.router.Deliver, DeliverShard: c.router.DeliverShard, Goroutines: n.goroutines,
		BeatEvery: election / 10, SuspectAfter: election / 2, OnSuspect: c.router.OnSuspect, OnAlive: c.router.OnAlive,
		Advertise: c.advertise, OnAdvertised: c.router.SetClientAddr}
	c.mu.Lock()
	for id, addr := range c.current {
		lc := template
		lc.Peer, lc.Addr = id, addr
		links = append(links, lc)
	}
	c.mu.Unlock()
	slices.SortFunc(links, func(a, b actors.PeerLinkConfig) int { return cmp.Compare(a.Peer, b.Peer) })
	pid, err := n.sys.Root.SpawnNamed(actors.NewPeersProps(actors.PeersConfig{Links: links, Template: template, OnLinks: c.router.SetLinks}), "peers")
	if err != nil {
		return fmt.Errorf("node: spawn peers: %w", err)
	}
	res, err := n.sys.Root.RequestFuture(pid, &actors.PeerLinksRequest{}, 10*time.Second).Result()
	if err != nil {
		return fmt.Errorf("node: peer links: %w", err)
	}
	c.router.SetLinks(res.(*actors.PeerLinks).Links)
	// The catalog may have said who the peers are meanwhile.
	c.mu.Lock()
	c.pid = pid
	set := &actors.PeersSet{Gen: c.gen, Addrs: maps.Clone(c.current)}
	c.mu.Unlock()
	if set.Gen > 0 {
		n.sys.Root.Send(pid, set)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		n.acceptPeers()
	}()
	n.logger.Info("cluster: listening for peers", slog.Uint64("node_id", c.self), slog.String("cluster_listen", c.udp.LocalAddr().String()),
		slog.Int("peers", len(links)), slog.Bool("authenticated", c.tls.Authenticated))
	return nil
}

// acceptPeers accepts peer connections until the listener closes; each
// one's Hello is read on a goroutine of its own, bounded by the handshake
// timeout, and the connection handed to its link.
func (n *Node) acceptPeers() {
	c := n.cluster
	for {
		conn, err := c.ln.Accept(context.Background())
		if err != nil {
			return
		}
		if conn.ConnectionState().TLS.NegotiatedProtocol == peerwire.RelayALPN {
			// Another node relays its client's group traffic: served as a
			// client connection acting for that client.
			ra := &actors.RelayAccept{Self: c.self, Known: c.isPeer}
			if c.tls.Authenticated {
				ra.CheckIdentity = c.tls.CheckPeerIdentity
			}
			n.sys.Root.Send(n.children.Listener, &actors.ConnectionAccepted{Conn: conn, Relay: ra})
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HandshakeTimeout)
			defer cancel()
			from, addr, stream, err := actors.AcceptPeer(ctx, conn, c.self, c.advertise, c.isPeer, c.tls.CheckPeerIdentity)
			if err != nil {
				n.logger.Warn("cluster: refused a peer connection", slog.String("remote", conn.RemoteAddr().String()), slog.Any("error", err))
				_ = conn.CloseWithError(1, err.Error())
				return
			}
			c.router.SetClientAddr(from, addr)
			n.sys.Root.Send(c.pid, &actors.PeerAcceptedFrom{From: from, PeerAccepted: actors.PeerAccepted{Conn: conn, Stream: stream}})
		}()
	}
}

// stopCluster stops the links and closes the peer socket; the links'
// goroutines are the node's, waited for with the others.
func (n *Node) stopCluster() {
	c := n.cluster
	if c == nil {
		return
	}
	if c.pid != nil {
		_ = n.sys.Root.StopFuture(c.pid).Wait()
	}
	if c.ln != nil {
		_ = c.ln.Close()
	}
	if c.tr != nil {
		_ = c.tr.Close()
	}
	_ = c.udp.Close()
	c.wg.Wait()
}

// ClusterStatus is what `herald cluster status` shows: this node and its
// links to the others.
type ClusterStatus struct {
	NodeID        uint64 `json:"node_id"`
	ClusterListen string `json:"cluster_listen"`
	Authenticated bool   `json:"authenticated"`
	// Peers are the other nodes, by id.
	Peers []PeerStatus `json:"peers"`
	// Undelivered counts raft messages that came for no group on this node.
	Undelivered uint64 `json:"undelivered_messages"`
	// Groups are the raft groups of the replicated shards this node
	// holds, as it sees them; Leaders counts, per node id, the groups
	// this node knows it leads.
	Groups  []GroupStatus  `json:"groups"`
	Leaders map[uint64]int `json:"leaders"`
	// Drained are the drained nodes (cluster drain), as this node applied
	// the metadata group.
	Drained []uint64 `json:"drained"`
	// Meta is the metadata group as this node's replica sees it.
	Meta MetaStatus `json:"metadata"`
	// Members are the cluster's nodes as this node applied the metadata
	// group (none on a node that has not joined yet); Left is set on a
	// node that left the cluster (it should be stopped).
	Members []MemberStatus `json:"members"`
	Left    bool           `json:"left,omitempty"`
}

// MemberStatus is one node of the cluster as ClusterStatus shows it.
type MemberStatus struct {
	NodeID uint64 `json:"node_id"`
	// Addr is the address cluster add gave ("" for a node of --peers).
	Addr string `json:"addr,omitempty"`
	// State is active, drained or leaving (being removed: its replicas
	// move off it, then it leaves).
	State string `json:"state"`
	// Metadata is its place in the metadata group: voter, learner
	// (joining), or none.
	Metadata string `json:"metadata"`
}

// MetaStatus is the cluster's metadata group as ClusterStatus shows it.
type MetaStatus struct {
	Leader   uint64   `json:"leader"`
	Term     uint64   `json:"term"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
}

// GroupStatus is one replicated shard's raft group as ClusterStatus shows
// it: its leader and term, this replica's commit and applied indexes, its
// committed tail, and, where this node leads, each replica's lag in
// entries.
type GroupStatus struct {
	Stream  string            `json:"stream"`
	Shard   uint32            `json:"shard"`
	Leader  uint64            `json:"leader"`
	Term    uint64            `json:"term"`
	Commit  uint64            `json:"commit"`
	Applied uint64            `json:"applied"`
	Tail    uint64            `json:"tail"`
	Lag     map[uint64]uint64 `json:"lag,omitempty"`
	// LagRecords and LagBytes are, where this node leads, the records and
	// records bytes of the shard log each replica lacks.
	LagRecords map[uint64]uint64 `json:"lag_records,omitempty"`
	LagBytes   map[uint64]uint64 `json:"lag_bytes,omitempty"`
	// Quiesced is set while the group is idle and quiet here.
	Quiesced bool `json:"quiesced,omitempty"`
	// Voters and Learners are the group's configuration as this replica
	// applied it (learners: replicas being added).
	Voters   []uint64 `json:"voters,omitempty"`
	Learners []uint64 `json:"learners,omitempty"`
}

// PeerStatus is one link as ClusterStatus shows it.
type PeerStatus struct {
	NodeID    uint64    `json:"node_id"`
	Addr      string    `json:"addr"`
	Up        bool      `json:"up"`
	Since     time.Time `json:"since"`
	LastError string    `json:"last_error,omitempty"`
	Frames    uint64    `json:"frames_sent"`
	Messages  uint64    `json:"messages_sent"`
	Dropped   uint64    `json:"messages_dropped"`
	Received  uint64    `json:"messages_received"`
}

// ClusterStatus returns the node's view of its cluster; ok is false for
// a single node.
func (n *Node) ClusterStatus(ctx context.Context) (ClusterStatus, bool, error) {
	c := n.cluster
	if c == nil || c.pid == nil {
		return ClusterStatus{}, false, nil
	}
	out := ClusterStatus{NodeID: c.self, ClusterListen: c.udp.LocalAddr().String(), Authenticated: c.tls.Authenticated, Undelivered: c.router.Undelivered()}
	wait := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(min(wait, time.Until(dl)), time.Millisecond)
	}
	v, err := n.sys.Root.RequestFuture(c.pid, &actors.PeerLinksRequest{}, wait).Result()
	if err != nil {
		return ClusterStatus{}, true, fmt.Errorf("cluster: %w", err)
	}
	links := v.(*actors.PeerLinks).Links
	futures := map[uint64]*actor.Future{}
	for id, pid := range links {
		futures[id] = n.sys.Root.RequestFuture(pid, &actors.PeerStatusRequest{}, wait)
	}
	c.mu.Lock()
	current := maps.Clone(c.current)
	c.mu.Unlock()
	for id, addr := range current {
		ps := PeerStatus{NodeID: id, Addr: addr}
		if f := futures[id]; f == nil {
			ps.LastError = "no link"
		} else if r, err := f.Result(); err != nil {
			ps.LastError = "no answer: " + err.Error()
		} else {
			st := r.(actors.PeerStatus)
			ps.Up, ps.Since, ps.LastError = st.Up, st.Since, st.LastError
			ps.Frames, ps.Messages, ps.Dropped, ps.Received = st.Frames, st.Messages, st.Dropped, st.Received
		}
		out.Peers = append(out.Peers, ps)
	}
	slices.SortFunc(out.Peers, func(a, b PeerStatus) int { return cmp.Compare(a.NodeID, b.NodeID) })
	out.Groups, out.Leaders = n.groupStatus(wait)
	state := c.view.Load()
	out.Drained = nonNil(state.Drained)
	if r, err := n.sys.Root.RequestFuture(n.children.Catalog, &actors.MetaStatusRequest{}, wait).Result(); err == nil {
		if m, ok := r.(*actors.MetaStatusResponse); ok {
			out.Meta = MetaStatus{Leader: m.Leader, Term: m.Term, Voters: nonNil(m.Voters), Learners: m.Learners}
		}
	}
	out.Members = []MemberStatus{}
	out.Left = slices.Contains(state.Removed, c.self)
	for _, mb := range state.Members {
		ms := MemberStatus{NodeID: mb.ID, Addr: mb.Addr, State: "active", Metadata: "none"}
		switch {
		case mb.Leaving:
			ms.State = "leaving"
		case state.IsDrained(mb.ID):
			ms.State = "drained"
		}
		switch {
		case slices.Contains(out.Meta.Voters, mb.ID):
			ms.Metadata = "voter"
		case slices.Contains(out.Meta.Learners, mb.ID):
			ms.Metadata = "learner"
		}
		out.Members = append(out.Members, ms)
	}
	return out, true, nil
}

// groupStatus describes every replicated shard this node holds.
func (n *Node) groupStatus(wait time.Duration) ([]GroupStatus, map[uint64]int) {
	groups, leaders := []GroupStatus{}, map[uint64]int{}
	res, err := n.sys.Root.RequestFuture(n.children.Catalog, &actors.AllStreamsRequest{}, wait).Result()
	if err != nil {
		return groups, leaders
	}
	for _, h := range res.(*actors.AllStreamsResponse).Streams {
		if h.Config.Replicas < 1 {
			continue
		}
		infos, errs := n.shardInfos(h, wait)
		for i, si := range infos {
			if errs[i] != nil {
				continue
			}
			self := n.cluster.self
			if !slices.Contains(si.Replicas, self) && !slices.Contains(si.Voters, self) && !slices.Contains(si.Learners, self) {
				continue // not held here
			}
			g := GroupStatus{Stream: h.Name.String(), Shard: uint32(i), Leader: si.Leader, Term: si.Term,
				Commit: si.RaftCommit, Applied: si.RaftApplied, Tail: si.Tail, Lag: si.Lags(), LagRecords: si.LagRecords(), LagBytes: si.LagBytes(), Quiesced: si.Quiesced,
				Voters: si.Voters, Learners: si.Learners}
			if si.Leader != 0 {
				leaders[si.Leader]++
			}
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b GroupStatus) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Shard, b.Shard))
	})
	return groups, leaders
}

// serveCluster answers GET /cluster with the ClusterStatus as JSON (404
// on a single node).
func (n *Node) serveCluster(w http.ResponseWriter, r *http.Request) {
	st, ok, err := n.ClusterStatus(r.Context())
	switch {
	case !ok:
		http.Error(w, "not a cluster: this node runs without peers", http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}
}

// clusterNodeIDKey is the metadata key of the node id a data directory
// belongs to, once it has run in a cluster.
var clusterNodeIDKey = []byte("node/cluster_node_id")

// claimClusterNodeID records id as the data directory's node id on its
// first start in a cluster, and refuses a start under another id: raft's
// votes and logs on disk are a node's, and the same data under a second id
// (or a second directory under one id) could vote twice in a term. A node
// that ran without peers may join a cluster later.
func claimClusterNodeID(log storage.Log, id uint64) error {
	v, err := log.GetMeta(clusterNodeIDKey)
	switch {
	case err == nil && len(v) == 8:
		if was := binary.BigEndian.Uint64(v); was != id {
			return fmt.Errorf("node: this data directory belongs to cluster node %d, not %d (--node-id); an id is never reused for other data", was, id)
		}
		return nil
	case err == nil:
		return fmt.Errorf("node: the stored cluster node id is %d bytes, want 8", len(v))
	case !errors.Is(err, storage.ErrNotFound):
		return fmt.Errorf("node: cluster node id: %w", err)
	}
	if err := log.Commit(nil, []storage.MetaPut{{Key: clusterNodeIDKey, Value: binary.BigEndian.AppendUint64(nil, id)}}); err != nil {
		return fmt.Errorf("node: cluster node id: %w", err)
	}
	return nil
}

// handOffLeadership asks every replicated shard this node leads, and its
// metadata replica, to hand leadership to another replica before the node
// stops (actors/shard_handoff.go), and waits until it leads nothing, for
// at most three election timeouts (or ctx): publishers are then
// redirected instead of waiting out an election. A shard with no live
// replica to take over leads on until the node stops.
func (n *Node) handOffLeadership(ctx context.Context) {
	if n.cluster == nil || n.sys == nil || n.children.Catalog == nil {
		return
	}
	election := time.Duration(n.cfg.RaftElectionTimeoutMillis) * time.Millisecond
	deadline := time.Now().Add(3 * election)
	if dl, ok := ctx.Deadline(); ok && time.Now().Add(time.Until(dl)/2).Before(deadline) {
		deadline = time.Now().Add(time.Until(dl) / 2) // the other half is the drain's
	}
	root := n.sys.Root
	wait := max(time.Until(deadline), time.Millisecond)
	res, err := root.RequestFuture(n.children.Catalog, &actors.AllShardsRequest{}, wait).Result()
	if err != nil {
		return
	}
	shards := res.(*actors.AllShardsResponse).Shards
	start, leading := time.Now(), n.stats.RaftLeading.Load()
	// ask asks every group led here to hand over (again: raft abandons a
	// transfer that does not complete), and reports whether one is still
	// handing over, or the metadata group is still led here.
	stuck := 0 // shards leading with no live replica to hand over to
	ask := func() (handing, metaLeads bool) {
		stuck = 0
		wait := max(min(time.Until(deadline), drainStepTimeout), time.Millisecond)
		futures := make([]*actor.Future, 0, len(shards)+1)
		for _, pid := range shards {
			futures = append(futures, root.RequestFuture(pid, &actors.ShardHandOff{}, wait))
		}
		futures = append(futures, root.RequestFuture(n.children.Catalog, &actors.MetaHandOff{}, wait))
		for i, f := range futures {
			if r, err := f.Result(); err == nil {
				if m, ok := r.(*actors.ShardHandOffResponse); ok {
					handing = handing || m.Handing
					metaLeads = metaLeads || (i == len(futures)-1 && m.Leading)
					if i < len(futures)-1 && m.Leading && !m.Handing {
						stuck++
					}
				}
			}
		}
		return handing, metaLeads
	}
	defer func() { n.leadingAtStop.Store(n.stats.RaftLeading.Load()) }()
	handing, metaAtStart := ask()
	if leading == 0 && !metaAtStart {
		return
	}
	metaLeads := metaAtStart
	for handing && time.Now().Before(deadline) {
		time.Sleep(election / 10) // polling the handovers: the node is stopping, nothing else waits on this goroutine
		handing, metaLeads = ask()
	}
	left := n.stats.RaftLeading.Load()
	switch {
	case left > int64(stuck):
		n.logger.Warn("cluster: some leaderships were not handed over in time; their shards elect new leaders",
			slog.Int64("leading", left), slog.Int64("was", leading), slog.Bool("metadata", metaLeads), slog.Duration("took", time.Since(start)))
	case left > 0:
		// Nobody to hand over to: the last node of a cluster, or streams
		// of one replica.
		n.logger.Info("cluster: leaderships handed over before stopping, but for shards no live replica could take",
			slog.Int64("shards", leading-left), slog.Int64("kept", left), slog.Bool("metadata", metaLeads), slog.Duration("took", time.Since(start)))
	default:
		n.logger.Info("cluster: leaderships handed over before stopping", slog.Int64("shards", leading), slog.Bool("metadata_led", metaAtStart),
			slog.Bool("metadata_kept", metaLeads), slog.Duration("took", time.Since(start)))
	}
}

// isPeer reports whether node id is a peer of this node now (a member of
// the cluster, or of its metadata group, other than this node).
func (c *cluster) isPeer(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.current[id]
	return ok && id != c.self
}

// nodes returns the cluster's nodes now (after adds and removes): every
// peer with the address this node reaches it at, and this node ("").
func (c *cluster) nodes() map[uint64]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[uint64]string, len(c.current)+1)
	for id, addr := range c.current {
		m[id] = addr
	}
	m[c.self] = ""
	return m
}

// setPeers takes the catalog's word on who the peers are now (ids with
// the address cluster add gave; "" for a node of --peers) and hands it to
// the peer links. A peer's address is what --peers says when it names the
// peer (so that a node may reach another through a proxy), else the one
// cluster add gave.
func (n *Node) setPeers(peers map[uint64]string) {
	c := n.cluster
	addrs := make(map[uint64]string, len(peers))
	for id, addr := range peers {
		if a, ok := c.peers[id]; ok {
			addr = a
		}
		if addr == "" {
			n.logger.Error("cluster: a peer has no address: it is not in --peers, and was not added with one; this node cannot reach it", slog.Uint64("peer", id))
			continue
		}
		addrs[id] = addr
	}
	c.mu.Lock()
	c.current = addrs
	c.gen++
	set := &actors.PeersSet{Gen: c.gen, Addrs: maps.Clone(addrs)}
	pid := c.pid
	c.mu.Unlock()
	if pid != nil {
		n.sys.Root.Send(pid, set)
	}
}
