package supervisors

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/wire"
)

// The dashboard's detail endpoints ask actors, each with a fan-out bounded
// by what the page shows: one stream's shards, one page of a shard's
// subscriptions, one group's coordinator, one page of replicated shards.

// pathStream reads the stream named by r's path and checks that p may see
// it, by name, before anything is looked up (a refusal says nothing of
// whether another tenant's stream exists).
func pathStream(r *http.Request, p actors.Principal, perm actors.Permission) (wire.StreamName, *apiError) {
	name := wire.StreamName{Tenant: r.PathValue("tenant"), Namespace: r.PathValue("namespace"), Stream: r.PathValue("stream")}
	if err := name.Validate(); err != nil {
		if werr, ok := err.(*wire.Error); ok {
			return name, fromWire(werr)
		}
		return name, badRequest("%v", err)
	}
	if werr := p.Allow(perm, name); werr != nil {
		return name, fromWire(werr)
	}
	return name, nil
}

// lookup finds a stream's handle.
func (d *dashboard) lookup(name wire.StreamName) (*actors.StreamHandle, *apiError) {
	res, err := d.n.sys.Root.RequestFuture(d.n.children.Catalog, &actors.LookupStreamRequest{Name: name}, apiAskTimeout).Result()
	if err != nil {
		return nil, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, message: "the catalog did not answer: " + err.Error()}
	}
	lr := res.(*actors.LookupStreamResponse)
	if lr.Err != nil {
		return nil, fromWire(lr.Err)
	}
	return lr.Stream, nil
}

// askAll sends msg to every pid at once and waits for the answers (nil
// where one did not answer in time).
func (d *dashboard) askAll(pids []*actor.PID, msg func(i int) any) []any {
	futures := make([]*actor.Future, len(pids))
	for i, pid := range pids {
		futures[i] = d.n.sys.Root.RequestFuture(pid, msg(i), apiAskTimeout)
	}
	out := make([]any, len(pids))
	for i, f := range futures {
		if r, err := f.Result(); err == nil {
			out[i] = r
		}
	}
	return out
}

// dropsView is a shard's overflow counts by cause.
type dropsView struct {
	CountBound uint64 `json:"count_bound"`
	ByteBound  uint64 `json:"byte_bound"`
	TotalBound uint64 `json:"total_bound"`
	Evicted    uint64 `json:"drop_old_eviction"`
	Lagged     uint64 `json:"lagged"`
	Overloaded uint64 `json:"overloaded"`
}

// replicaLagView is one replica's lag behind a shard's leader.
type replicaLagView struct {
	Node    uint64 `json:"node"`
	Entries uint64 `json:"entries"`
	Records uint64 `json:"records"`
	Bytes   uint64 `json:"bytes"`
}

// raftView is a replicated shard's raft group as this node sees it.
type raftView struct {
	Leader    uint64           `json:"leader"`
	Preferred uint64           `json:"preferred_leader,omitempty"`
	Replicas  []uint64         `json:"replicas"`
	Voters    []uint64         `json:"voters,omitempty"`
	Learners  []uint64         `json:"learners,omitempty"`
	Term      uint64           `json:"term"`
	Commit    uint64           `json:"commit"`
	Applied   uint64           `json:"applied"`
	Quiesced  bool             `json:"quiesced,omitempty"`
	Lag       []replicaLagView `json:"lag,omitempty"`
}

func raftOf(si *actors.ShardInfoResponse) *raftView {
	if si == nil || len(si.Replicas) == 0 {
		return nil
	}
	v := &raftView{Leader: si.Leader, Preferred: si.Preferred, Replicas: si.Replicas, Voters: si.Voters, Learners: si.Learners,
		Term: si.Term, Commit: si.RaftCommit, Applied: si.RaftApplied, Quiesced: si.Quiesced}
	for id, l := range si.LagDetail {
		v.Lag = append(v.Lag, replicaLagView{Node: id, Entries: l.Entries, Records: l.Records, Bytes: l.Bytes})
	}
	slices.SortFunc(v.Lag, func(a, b replicaLagView) int { return cmp.Compare(a.Node, b.Node) })
	return v
}

// shardView is one shard in a stream's detail.
type shardView struct {
	Shard uint32 `json:"shard"`
	// Answered is false when the shard did not answer in time; Ready
	// false while it starts.
	Answered bool `json:"answered"`
	Ready    bool `json:"ready"`
	// First is the retention floor, Tail the committed tail, NextOffset
	// the next offset assigned (above Tail while Pending batches wait for
	// storage); Held counts publishes waiting for admission.
	First      uint64 `json:"first"`
	Tail       uint64 `json:"tail"`
	NextOffset uint64 `json:"next_offset"`
	Pending    int    `json:"pending"`
	Held       int    `json:"held"`
	Blocked    bool   `json:"blocked"`
	// Ring* are the replay ring's contents.
	RingBatches int   `json:"ring_batches"`
	RingRecords int   `json:"ring_records"`
	RingBytes   int64 `json:"ring_bytes"`
	// Subscriptions, Live and Reading count its subscriptions.
	Subscriptions int       `json:"subscriptions"`
	Live          int       `json:"live"`
	Reading       int       `json:"reading"`
	Drops         dropsView `json:"drops"`
	Raft          *raftView `json:"raft,omitempty"`
}

// streamView is GET /api/v1/streams/{tenant}/{namespace}/{stream}.
type streamView struct {
	Name    string    `json:"name"`
	ID      uint64    `json:"id"`
	Created time.Time `json:"created"`
	// Config is the stream's configuration.
	Config streamConfigView `json:"config"`
	// Row is its line of the streams list (rates, totals), when the last
	// tick saw it.
	Row    *streamRow  `json:"row,omitempty"`
	Shards []shardView `json:"shards"`
	// Groups are its consumer groups coordinated here (omitted for
	// credentials without consume or manage).
	Groups []groupRow `json:"groups,omitempty"`
}

// streamConfigView is a stream's configuration.
type streamConfigView struct {
	Shards             uint32 `json:"shards"`
	Durable            bool   `json:"durable"`
	Replicas           int    `json:"replicas"`
	Routing            string `json:"routing"`
	Overflow           string `json:"overflow"`
	QueueCapacity      uint32 `json:"queue_capacity,omitempty"`
	QueueMaxBytes      uint64 `json:"queue_max_bytes,omitempty"`
	RetentionAgeMillis uint64 `json:"retention_age_ms,omitempty"`
	RetentionBytes     uint64 `json:"retention_bytes,omitempty"`
}

// serveStream answers GET /api/v1/streams/{tenant}/{namespace}/{stream}:
// the stream's configuration, each shard's figures (one ShardStatsRequest
// per shard) and its groups.
func (d *dashboard) serveStream(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	name, aerr := pathStream(r, p, actors.PermAll)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	h, aerr := d.lookup(name)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	c := h.Config
	v := streamView{Name: h.Name.String(), ID: h.ID, Created: time.Unix(0, h.CreatedUnixNano).UTC(),
		Config: streamConfigView{Shards: c.Shards, Durable: c.Durable, Replicas: max(int(c.Replicas), 1), Routing: c.Routing.String(),
			Overflow: c.Overflow.String(), QueueCapacity: c.QueueCapacity, QueueMaxBytes: c.QueueMaxBytes,
			RetentionAgeMillis: c.RetentionAgeMillis, RetentionBytes: c.RetentionBytes}}
	snap := d.snap.Load()
	if i, ok := slices.BinarySearchFunc(snap.streams, v.Name, func(s streamRow, n string) int { return cmp.Compare(s.Name, n) }); ok {
		row := snap.streams[i]
		hideGroups(p, &row)
		v.Row = &row
	}
	if groupsAllowed(p) == nil {
		for _, g := range snap.groups {
			if g.Stream == v.Name {
				v.Groups = append(v.Groups, g)
			}
		}
	}
	answers := d.askAll(h.Shards, func(int) any { return &actors.ShardStatsRequest{} })
	for i, a := range answers {
		sv := shardView{Shard: uint32(i)}
		if st, ok := a.(*actors.ShardStatsResponse); ok {
			sv.Answered, sv.Ready = true, st.Ready
			sv.NextOffset, sv.Pending = st.NextOffset, st.Pending
			sv.RingBatches, sv.RingRecords, sv.RingBytes = st.RingBatches, st.RingRecords, st.RingBytes
			sv.Subscriptions, sv.Live, sv.Reading = st.Subscriptions, st.Live, st.Reading
			if si := st.Info; si != nil {
				sv.First, sv.Tail, sv.Held, sv.Blocked = si.First, si.Tail, si.Held, si.Blocked
				sv.Drops = dropsView{CountBound: si.Drops.CountBound, ByteBound: si.Drops.ByteBound, TotalBound: si.Drops.TotalBound,
					Evicted: si.Drops.Evicted, Lagged: si.Drops.Lagged, Overloaded: si.Drops.Overloaded}
				sv.Raft = raftOf(si)
			}
		}
		v.Shards = append(v.Shards, sv)
	}
	writeJSON(w, http.StatusOK, v)
}

// subscriptionView is one subscription of a shard: the shard's account of
// its credit, and its own queue and lane.
type subscriptionView struct {
	ID        string    `json:"id"`
	Client    string    `json:"client,omitempty"`
	Principal string    `json:"principal,omitempty"`
	Started   time.Time `json:"started,omitzero"`
	// Answered is false when the subscription did not answer (it just
	// ended): only the shard's account is shown.
	Answered bool   `json:"answered"`
	Next     uint64 `json:"next"`
	Live     bool   `json:"live"`
	Reading  bool   `json:"reading"`
	Replica  string `json:"replica,omitempty"`
	// Capacity and MaxBytes are the queue's bounds (max_bytes 0: none);
	// InEntries and InBytes what the shard pushed that has not come back
	// as credit, Fill the fuller of the two against its bound (0 to 1).
	Capacity  int     `json:"capacity"`
	MaxBytes  int64   `json:"max_bytes"`
	InEntries int     `json:"in_entries"`
	InBytes   int64   `json:"in_bytes"`
	Fill      float64 `json:"fill"`
	// QueuedEntries and QueuedBytes are in the subscription's queue now;
	// LaneEntries and LaneBytes handed to its writer lane and not yet
	// written, against LaneShare (its part of the connection's egress
	// bound; 0: none or a shared pool).
	QueuedEntries int   `json:"queued_entries"`
	QueuedBytes   int64 `json:"queued_bytes"`
	LaneEntries   int   `json:"lane_entries"`
	LaneBytes     int64 `json:"lane_bytes"`
	LaneShare     int64 `json:"lane_share"`
	// DeliveredBatches and DeliveredBytes are what its lane wrote;
	// Evicted counts batches drop_old evicted from its queue, Skipped the
	// batches an ephemeral stream's overflow skipped for it.
	DeliveredBatches uint64 `json:"delivered_batches"`
	DeliveredBytes   uint64 `json:"delivered_bytes"`
	Evicted          uint64 `json:"evicted"`
	Skipped          int    `json:"skipped"`
}

// subscriptionsPage is GET .../shards/{shard}/subscriptions.
type subscriptionsPage struct {
	Stream string `json:"stream"`
	Shard  uint32 `json:"shard"`
	// Total, Live and Reading count the shard's subscriptions.
	Total   int                `json:"total"`
	Live    int                `json:"live"`
	Reading int                `json:"reading"`
	Sort    string             `json:"sort"`
	Offset  int                `json:"offset"`
	Limit   int                `json:"limit"`
	Rows    []subscriptionView `json:"rows"`
}

// serveSubscriptions answers GET
// /api/v1/streams/{tenant}/{namespace}/{stream}/shards/{shard}/subscriptions
// ?sort=fill|id&offset=N&limit=N: one page of the shard's subscriptions
// (the shard picks it), each then asked for its queue and lane.
func (d *dashboard) serveSubscriptions(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	name, aerr := pathStream(r, p, actors.PermAll)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	shard, err := strconv.ParseUint(r.PathValue("shard"), 10, 32)
	if err != nil {
		writeError(w, badRequest("shard must be a number, got %q", r.PathValue("shard")))
		return
	}
	q, aerr := parsePage(r, []string{"fill", "id"}, maxSubscriptionPage)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	order := actors.SubscriptionsByFill
	if q.Sort == "id" {
		order = actors.SubscriptionsByID
	}
	if q.Offset+q.Limit > actors.MaxShardStatsPage {
		writeError(w, badRequest("offset+limit must be at most %d", actors.MaxShardStatsPage))
		return
	}
	h, aerr := d.lookup(name)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if shard >= uint64(len(h.Shards)) {
		writeError(w, fromWire(wire.ShardOutOfRange(h.Name, shard, len(h.Shards))))
		return
	}
	res, err := d.n.sys.Root.RequestFuture(h.Shards[shard], &actors.ShardStatsRequest{Offset: q.Offset, Limit: q.Limit, Order: order}, apiAskTimeout).Result()
	st, ok := res.(*actors.ShardStatsResponse)
	if err != nil || !ok {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, message: fmt.Sprintf("shard %d did not answer", shard)})
		return
	}
	out := subscriptionsPage{Stream: h.Name.String(), Shard: uint32(shard), Total: st.Subscriptions, Live: st.Live, Reading: st.Reading,
		Sort: q.Sort, Offset: q.Offset, Limit: q.Limit, Rows: []subscriptionView{}}
	pids := make([]*actor.PID, len(st.Page))
	for i := range st.Page {
		pids[i] = st.Page[i].PID
	}
	answers := d.askAll(pids, func(int) any { return &actors.SubscriptionStatsRequest{} })
	for i, a := range st.Page {
		v := subscriptionView{ID: a.PID.Id, Next: a.Next, Live: a.Live, Reading: a.Reading, Capacity: a.Capacity, MaxBytes: a.MaxBytes,
			InEntries: a.InEntries, InBytes: a.InBytes, Fill: a.Fill(), Skipped: a.Skipped}
		if a.Replica != 0 {
			v.Replica = a.Replica.String()
		}
		if s, ok := answers[i].(*actors.SubscriptionStatsResponse); ok {
			v.Answered = true
			v.Client, v.Principal, v.Started = s.Client, s.Principal, s.Started.UTC()
			v.QueuedEntries, v.QueuedBytes, v.LaneEntries, v.LaneBytes, v.LaneShare = s.QueuedEntries, s.QueuedBytes, s.LaneEntries, s.LaneBytes, s.LaneShare
			v.DeliveredBatches, v.DeliveredBytes, v.Evicted = s.DeliveredBatches, s.DeliveredBytes, s.Evicted
			if s.MaxBytes > 0 {
				v.MaxBytes = s.MaxBytes
			}
		}
		out.Rows = append(out.Rows, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// groupView is GET /api/v1/groups/{tenant}/{namespace}/{stream}/{group}:
// the coordinator's own description, with each shard's lag.
type groupView struct {
	Stream           string `json:"stream"`
	Group            string `json:"group"`
	Generation       uint64 `json:"generation"`
	VisibilityMillis uint32 `json:"visibility_ms"`
	SessionMillis    uint32 `json:"session_ms"`
	MaxAttempts      uint32 `json:"max_attempts"`
	// Lag and Claims sum the shards'; Row is the group's line of the
	// groups list (redeliveries, dead-lettered), when the last tick saw it.
	Lag     uint64           `json:"lag"`
	Claims  uint64           `json:"claims"`
	Row     *groupRow        `json:"row,omitempty"`
	Shards  []groupShardView `json:"shards"`
	Members []memberView     `json:"members"`
}

// groupShardView is one shard of a group: its committed cursor, the
// offset delivered up to, the shard's tail, the lag (tail − committed),
// claims in flight, records owed a redelivery, dead letters held.
type groupShardView struct {
	Shard       uint32 `json:"shard"`
	Committed   uint64 `json:"committed"`
	Delivered   uint64 `json:"delivered"`
	Tail        uint64 `json:"tail"`
	Lag         uint64 `json:"lag"`
	Claims      uint32 `json:"claims"`
	Owed        uint32 `json:"owed"`
	DeadLetters uint32 `json:"dead_letters"`
}

// memberView is one push member: its shards, window and in-flight records,
// and the time since it was last heard (an ack is a heartbeat).
type memberView struct {
	ID             string   `json:"id"`
	Shards         []uint32 `json:"shards"`
	Window         uint32   `json:"window"`
	InFlight       uint32   `json:"in_flight"`
	IdleSeconds    float64  `json:"idle_seconds"`
	SessionSeconds float64  `json:"session_seconds"`
}

// serveGroup answers a group's detail: its coordinator describes it (as
// `herald group describe` does). In a cluster, a group coordinated by
// another node (the leader of its stream's shard 0) is refused with
// not_leader naming that node.
func (d *dashboard) serveGroup(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	if aerr := groupsAllowed(p); aerr != nil {
		writeError(w, aerr)
		return
	}
	name, aerr := pathStream(r, p, actors.PermConsume|actors.PermManage)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	group := r.PathValue("group")
	if group == "" || len(group) > wire.MaxNamePart {
		writeError(w, badRequest("group name must be 1-%d bytes", wire.MaxNamePart))
		return
	}
	h, aerr := d.lookup(name)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// The coordinator answers a control-stream request by sending its
	// frame to ReplyTo: a future stands in for the lane.
	f := actor.NewFuture(d.n.sys, apiAskTimeout)
	d.n.sys.Root.Send(d.n.children.Groups, &actors.GroupDescribeRequest{GroupTarget: actors.GroupTarget{Stream: h, Group: group, ReplyTo: f.PID(), ReqID: 1}})
	res, err := f.Result()
	wf, ok := res.(*actors.WriteFrame)
	if err != nil || !ok {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, message: "the group's coordinator did not answer"})
		return
	}
	frame, err := wire.ReadFrame(bytes.NewReader(wf.Frame), uint32(len(wf.Frame)))
	if err != nil {
		writeError(w, &apiError{status: http.StatusInternalServerError, code: wire.CodeInternal.String(), message: err.Error()})
		return
	}
	if frame.Header.Type == wire.TypeError {
		werr, err := wire.DecodeError(frame.Body)
		if err != nil {
			werr = wire.Errorf(wire.CodeInternal, "%v", err)
		}
		writeError(w, fromWire(werr))
		return
	}
	info, err := wire.DecodeGroupInfo(frame.Body)
	if err != nil {
		writeError(w, &apiError{status: http.StatusInternalServerError, code: wire.CodeInternal.String(), message: err.Error()})
		return
	}
	v := groupView{Stream: h.Name.String(), Group: info.Group, Generation: info.Generation, VisibilityMillis: info.VisibilityMillis,
		SessionMillis: info.SessionMillis, MaxAttempts: info.MaxAttempts, Shards: []groupShardView{}, Members: []memberView{}}
	for _, s := range info.Shards {
		gs := groupShardView{Shard: s.Shard, Committed: s.Committed, Delivered: s.Delivered, Tail: s.Tail, Claims: s.Claims, Owed: s.Owed, DeadLetters: s.DeadLetters}
		if s.Tail > s.Committed {
			gs.Lag = s.Tail - s.Committed
		}
		v.Lag += gs.Lag
		v.Claims += uint64(s.Claims)
		v.Shards = append(v.Shards, gs)
	}
	for _, m := range info.Members {
		v.Members = append(v.Members, memberView{ID: m.ID, Shards: m.Shards, Window: m.Window, InFlight: m.InFlight,
			IdleSeconds: float64(m.IdleMillis) / 1000, SessionSeconds: float64(info.SessionMillis) / 1000})
	}
	for _, g := range d.snap.Load().groups {
		if g.Stream == v.Stream && g.Group == v.Group {
			row := g
			v.Row = &row
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// clusterView is GET /api/v1/cluster.
type clusterView struct {
	// Enabled is false on a single node (the rest is then empty).
	Enabled bool   `json:"enabled"`
	NodeID  uint64 `json:"node_id,omitempty"`
	// Nodes are the cluster's nodes as this one sees them; Leading how
	// many of the listed shards each leads.
	Nodes []clusterNodeView `json:"nodes"`
	// Shards is a page of the replicated shards p sees, each with its
	// leader, replicas and their lag.
	Shards listPage[clusterShardView] `json:"shards"`
}

// clusterNodeView is one node of the cluster.
type clusterNodeView struct {
	ID   uint64 `json:"id"`
	Self bool   `json:"self,omitempty"`
	// Addr, Up, Since and LastError are its peer link's, as this node sees
	// it (node scope only).
	Addr      string    `json:"addr,omitempty"`
	Up        *bool     `json:"up,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	Leading   int       `json:"leading"`
}

// clusterShardView is one replicated shard.
type clusterShardView struct {
	Stream   string    `json:"stream"`
	Shard    uint32    `json:"shard"`
	Answered bool      `json:"answered"`
	Tail     uint64    `json:"tail"`
	Raft     *raftView `json:"raft,omitempty"`
	// HeldHere is set when this node holds a replica (the leader's lag
	// figures are known only on the leader).
	HeldHere bool `json:"held_here"`
}

// serveCluster answers GET /api/v1/cluster?offset=N&limit=N: the nodes,
// and one page of the replicated shards p sees (one ShardInfoRequest per
// row).
func (d *dashboard) serveCluster(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	c := d.n.cluster
	if c == nil || c.pid == nil {
		writeJSON(w, http.StatusOK, clusterView{Nodes: []clusterNodeView{}})
		return
	}
	q, aerr := parsePage(r, []string{"name"}, maxClusterPage)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	v := clusterView{Enabled: true, NodeID: c.self}
	// Every replicated shard p sees, by stream then shard.
	type ref struct {
		h     *actors.StreamHandle
		shard int
	}
	var refs []ref
	snap := d.snap.Load()
	for _, row := range snap.streams {
		if row.Replicas > 1 && p.Sees(row.name) && (q.Q == "" || bytes.Contains(bytes.ToLower([]byte(row.Name)), []byte(q.Q))) {
			if h := snap.handles[row.ID]; h != nil {
				for i := range h.Shards {
					refs = append(refs, ref{h, i})
				}
			}
		}
	}
	total := len(refs)
	refs = refs[min(q.Offset, total):min(q.Offset+q.Limit, total)]
	pids := make([]*actor.PID, len(refs))
	for i, rf := range refs {
		pids[i] = rf.h.Shards[rf.shard]
	}
	answers := d.askAll(pids, func(int) any { return &actors.ShardInfoRequest{} })
	rows := make([]clusterShardView, len(refs))
	leading := map[uint64]int{}
	for i, rf := range refs {
		rows[i] = clusterShardView{Stream: rf.h.Name.String(), Shard: uint32(rf.shard)}
		if si, ok := answers[i].(*actors.ShardInfoResponse); ok {
			rows[i].Answered, rows[i].Tail, rows[i].Raft = true, si.Tail, raftOf(si)
			rows[i].HeldHere = slices.Contains(si.Voters, c.self) || slices.Contains(si.Learners, c.self)
			if si.Leader != 0 {
				leading[si.Leader]++
			}
		}
	}
	v.Shards = newListPage(q, snap.at, rows, total)
	// The nodes: every peer's link, for the node scope; ids alone for a
	// tenant (a peer's address and link are the operator's business).
	links := map[uint64]*actor.PID{}
	if p.Any {
		if res, err := d.n.sys.Root.RequestFuture(c.pid, &actors.PeerLinksRequest{}, apiAskTimeout).Result(); err == nil {
			links = res.(*actors.PeerLinks).Links
		}
	}
	members := c.nodes()
	ids := make([]uint64, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	linkPIDs := make([]*actor.PID, 0, len(ids))
	for _, id := range ids {
		if pid := links[id]; pid != nil && id != c.self {
			linkPIDs = append(linkPIDs, pid)
		}
	}
	status := d.askAll(linkPIDs, func(int) any { return &actors.PeerStatusRequest{} })
	k := 0
	for _, id := range ids {
		nv := clusterNodeView{ID: id, Self: id == c.self, Leading: leading[id]}
		up := id == c.self
		if id != c.self && p.Any {
			nv.Addr = members[id]
			if links[id] == nil {
				nv.LastError = "no link"
			} else {
				if ps, ok := status[k].(actors.PeerStatus); ok {
					up, nv.Since, nv.LastError = ps.Up, ps.Since, ps.LastError
				} else {
					nv.LastError = "no answer"
				}
				k++
			}
		}
		if p.Any || id == c.self {
			nv.Up = &up
		}
		v.Nodes = append(v.Nodes, nv)
	}
	writeJSON(w, http.StatusOK, v)
}
