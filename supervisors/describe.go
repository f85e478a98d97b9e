package supervisors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/wire"
)

// StreamDescription is what `herald stream describe` shows: a stream's
// config and, per shard, its log and (for a replicated stream) its raft
// group as this node sees it.
type StreamDescription struct {
	Name     string             `json:"name"`
	ID       uint64             `json:"id"`
	Shards   int                `json:"shards"`
	Durable  bool               `json:"durable"`
	Replicas int                `json:"replicas"`
	Created  time.Time          `json:"created"`
	Node     uint64             `json:"node_id,omitempty"`
	Shard    []ShardDescription `json:"shard"`
}

// ShardDescription is one shard of a StreamDescription.
type ShardDescription struct {
	Shard uint32 `json:"shard"`
	// First is the first retained offset, Tail the committed tail here.
	First uint64 `json:"first"`
	Tail  uint64 `json:"tail"`
	// Replicas are the node ids holding the shard; Leader the one this
	// node knows leads it (0: none known, or not replicated).
	Replicas []uint64 `json:"replicas,omitempty"`
	Leader   uint64   `json:"leader,omitempty"`
	// Preferred is the replica that leads the shard whenever it is up
	// and caught up (leaders spread over the nodes).
	Preferred uint64 `json:"preferred_leader,omitempty"`
	Term      uint64 `json:"term,omitempty"`
	// Commit and Applied are this replica's raft indexes; RaftFirst the
	// first entry its raft log holds (those before were compacted).
	Commit    uint64 `json:"commit,omitempty"`
	Applied   uint64 `json:"applied,omitempty"`
	RaftFirst uint64 `json:"raft_first,omitempty"`
	// Lag is, on the leader, how many raft entries each replica's log is
	// behind the leader's commit index (0: caught up).
	Lag map[uint64]uint64 `json:"lag,omitempty"`
	// LagRecords and LagBytes are, on the leader, how many records and
	// records bytes of the shard log each replica lacks (what the leader
	// applied above the entries the replica's raft log holds).
	LagRecords map[uint64]uint64 `json:"lag_records,omitempty"`
	LagBytes   map[uint64]uint64 `json:"lag_bytes,omitempty"`
	// Quiesced is set while this replica's group is idle and quiet (no
	// ticks, no heartbeats; docs/architecture.md).
	Quiesced bool `json:"quiesced,omitempty"`
	// Voters and Learners are the group's raft configuration as this
	// replica applied it. Replicas is where the stream's replica count
	// places the shard; while the count changes, the leader adds the new
	// replicas as learners, promotes them once caught up, and removes
	// the ones no longer placed, until the voters are the replicas.
	Voters   []uint64 `json:"voters,omitempty"`
	Learners []uint64 `json:"learners,omitempty"`
}

// DescribeStream describes name as this node sees it.
func (n *Node) DescribeStream(ctx context.Context, name wire.StreamName) (StreamDescription, error) {
	wait := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(min(wait, time.Until(dl)), time.Millisecond)
	}
	res, err := n.sys.Root.RequestFuture(n.children.Catalog, &actors.LookupStreamRequest{Name: name}, wait).Result()
	if err != nil {
		return StreamDescription{}, fmt.Errorf("describe: %w", err)
	}
	lr := res.(*actors.LookupStreamResponse)
	if lr.Err != nil {
		return StreamDescription{}, lr.Err
	}
	h := lr.Stream
	out := StreamDescription{Name: h.Name.String(), ID: h.ID, Shards: int(h.Config.Shards), Durable: h.Config.Durable,
		Replicas: max(int(h.Config.Replicas), 1), Created: time.Unix(0, h.CreatedUnixNano).UTC()}
	if n.cluster != nil {
		out.Node = n.cluster.self
	}
	infos, errs := n.shardInfos(h, wait)
	for i, si := range infos {
		if errs[i] != nil {
			return StreamDescription{}, fmt.Errorf("describe: shard %d: %w", i, errs[i])
		}
		sd := ShardDescription{Shard: uint32(i), First: si.First, Tail: si.Tail, Replicas: si.Replicas, Leader: si.Leader,
			Term: si.Term, Commit: si.RaftCommit, Applied: si.RaftApplied, RaftFirst: si.RaftFirst, Preferred: si.Preferred,
			Quiesced: si.Quiesced, Voters: si.Voters, Learners: si.Learners}
		sd.Lag, sd.LagRecords, sd.LagBytes = si.Lags(), si.LagRecords(), si.LagBytes()
		out.Shard = append(out.Shard, sd)
	}
	return out, nil
}

// shardInfos asks every shard of h for its info at once and waits for the
// answers (errs[i] is shard i's failure).
func (n *Node) shardInfos(h *actors.StreamHandle, wait time.Duration) ([]*actors.ShardInfoResponse, []error) {
	futures := make([]*actor.Future, len(h.Shards))
	for i, pid := range h.Shards {
		futures[i] = n.sys.Root.RequestFuture(pid, &actors.ShardInfoRequest{}, wait)
	}
	infos, errs := make([]*actors.ShardInfoResponse, len(h.Shards)), make([]error, len(h.Shards))
	for i, f := range futures {
		r, err := f.Result()
		if err == nil {
			infos[i], _ = r.(*actors.ShardInfoResponse)
		}
		if infos[i] == nil && err == nil {
			err = fmt.Errorf("shard answered %T", r)
		}
		errs[i] = err
	}
	return infos, errs
}

// serveDescribe answers GET /streams/describe?stream=tenant/ns/name with
// the StreamDescription as JSON.
func (n *Node) serveDescribe(w http.ResponseWriter, r *http.Request) {
	name, err := wire.ParseStreamName(r.URL.Query().Get("stream"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d, err := n.DescribeStream(r.Context(), name)
	var werr *wire.Error
	switch {
	case errors.As(err, &werr) && werr.Code == wire.CodeStreamNotFound:
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	}
}
