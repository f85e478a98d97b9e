package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

// runCluster creates or describes the stream through the cluster that
// --server names: a create goes to any node (the metadata group commits
// it), and a describe shows each shard as its leader sees it.
func (cmd *streamCmd) runCluster(ctx context.Context, env *cliEnv) error {
	cc, err := cmd.conn.dialCluster(ctx)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
	defer cancel()
	var info client.StreamInfo
	switch cmd.op {
	case "create":
		info, err = cc.CreateStream(ctx, cmd.name, cmd.config)
	case "edit":
		if info, err = cc.SetReplicas(ctx, cmd.name, cmd.config.Replicas); err == nil {
			info, err = cc.DescribeStream(ctx, cmd.name) // each shard as its leader sees it
		}
	default:
		info, err = cc.DescribeStream(ctx, cmd.name)
	}
	if err != nil {
		return err
	}
	if f := format(cmd.json, cmd.yaml); f.structured() {
		return writeValue(env.stdout, f, streamInfoJSONOf(info))
	}
	return writeStreamInfo(env.stdout, info)
}

// shardReplicationJSON is one replicated shard in a description.
type shardReplicationJSON struct {
	Shard    int           `json:"shard"`
	Leader   uint64        `json:"leader"`
	Term     uint64        `json:"term"`
	Commit   uint64        `json:"commit"`
	Tail     uint64        `json:"tail"`
	Replicas []replicaJSON `json:"replicas"`
}

// replicaJSON is one replica; Lag (in raft entries), LagRecords and
// LagBytes (what the replica lacks of the shard log) are null where the
// answering node does not know them (it does not lead the shard, or is of
// a version that does not tell records and bytes).
type replicaJSON struct {
	Node       uint64  `json:"node"`
	Lag        *uint64 `json:"lag"`
	LagRecords *uint64 `json:"lag_records"`
	LagBytes   *uint64 `json:"lag_bytes"`
}

// known is v, or nil when it is client.LagUnknown.
func known(v uint64) *uint64 {
	if v == client.LagUnknown {
		return nil
	}
	return &v
}

// replicaLagText is a replica's lag as describe prints it: "?" where
// unknown, "0", or "5 entries, 320 records, 40960 bytes".
func replicaLagText(r client.ShardReplication, rs client.ReplicaState) string {
	switch {
	case rs.Lag == client.LagUnknown:
		return "?"
	case !r.LagDetail || rs.LagRecords == client.LagUnknown:
		return strconv.FormatUint(rs.Lag, 10)
	case rs.Lag == 0 && rs.LagRecords == 0:
		return "0"
	}
	return fmt.Sprintf("%d entries, %d records, %d bytes", rs.Lag, rs.LagRecords, rs.LagBytes)
}

func replicationJSONOf(info client.StreamInfo) []shardReplicationJSON {
	var out []shardReplicationJSON
	for i, r := range info.Replication {
		s := shardReplicationJSON{Shard: i, Leader: r.Leader, Term: r.Term, Commit: r.Commit, Replicas: []replicaJSON{}}
		if i < len(info.Tails) {
			s.Tail = info.Tails[i]
		}
		for _, rs := range r.Replicas {
			rj := replicaJSON{Node: rs.Node, Lag: known(rs.Lag)}
			if r.LagDetail {
				rj.LagRecords, rj.LagBytes = known(rs.LagRecords), known(rs.LagBytes)
			}
			s.Replicas = append(s.Replicas, rj)
		}
		out = append(out, s)
	}
	return out
}

// writeReplicatedShards prints a replicated stream's shards: tail, leader,
// term and each replica with its lag ("?" where unknown).
func writeReplicatedShards(w io.Writer, info client.StreamInfo) error {
	t := newTable("SHARD", "TAIL", "LEADER", "TERM", "REPLICAS (LAG)")
	for i, r := range info.Replication {
		var reps []string
		for _, rs := range r.Replicas {
			reps = append(reps, fmt.Sprintf("%d (%s)", rs.Node, replicaLagText(r, rs)))
		}
		lead := "none"
		if r.Leader != 0 {
			lead = strconv.FormatUint(r.Leader, 10)
		}
		var tail uint64
		if i < len(info.Tails) {
			tail = info.Tails[i]
		}
		appendRow(t, strconv.Itoa(i), strconv.FormatUint(tail, 10), lead, strconv.FormatUint(r.Term, 10), strings.Join(reps, " "))
	}
	fmt.Fprintln(w)
	return writeTable(w, t)
}

// groupLagText is one replica's lag in `herald cluster status`'s LAG
// column: "id:entries", and the records and bytes it lacks when the node
// gave them ("2:5/320r/40960B": entries, records, bytes).
func groupLagText(g supervisors.GroupStatus, id uint64) string {
	rec, ok := g.LagRecords[id]
	if !ok || (g.Lag[id] == 0 && rec == 0) {
		return fmt.Sprintf("%d:%d", id, g.Lag[id])
	}
	return fmt.Sprintf("%d:%d/%dr/%dB", id, g.Lag[id], rec, g.LagBytes[id])
}
