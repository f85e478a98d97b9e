package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/supervisors"
)

// defaultClusterHTTP is where `herald cluster status` asks unless told:
// the HTTP listener of `herald node`'s defaults.
const defaultClusterHTTP = "127.0.0.1:7401"

func newClusterCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("cluster", "Inspect and operate a cluster of nodes",
		`Inspect a cluster of nodes (started with --node-id, --cluster-listen and --peers), drain
a node before stopping it, and add or remove nodes.`,
		`  herald cluster status
  herald cluster status --http 127.0.0.1:7411 -o json
  herald cluster drain 2 --http 127.0.0.1:7411
  herald cluster undrain 2
  herald cluster add 4=127.0.0.1:7432
  herald cluster remove 3`)
	c.AddCommand(newClusterStatusCmd(env), newClusterDrainCmd(env), newClusterUndrainCmd(env), newClusterAddCmd(env), newClusterRemoveCmd(env))
	return c
}

func newClusterStatusCmd(env *cliEnv) *cobra.Command {
	var out outputFlags
	var httpAddr string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "status",
		Short: "Show a node's view of its cluster: its peers, up or down, and their links",
		Long: `Show one node's view of its cluster, from the node's HTTP listener (GET /cluster):
the members (drained, leaving, or joining: not a voter of the metadata group yet) and the
metadata group's leader and voters; each peer, whether the link
to it is up and since when, why it last went down, and
what went over it; then the raft group of each replicated shard the node holds: its
leader, term, commit and applied indexes and tail, and on the leader each replica's lag
(in entries, then the records and bytes it lacks: 2:8/24r/1536B); and how many groups
each node leads. Each node shows its own view: ask
every node to see the whole.
A node without peers answers that it is not a cluster (exit status 1).`,
		Example: `  herald cluster status
  herald cluster status --http 127.0.0.1:7411
  herald cluster status -o json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f, err := out.resolve(c)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			st, err := fetchClusterStatus(ctx, httpAddr)
			if err != nil {
				return err
			}
			if f.structured() {
				return writeValue(env.stdout, f, st)
			}
			auth := "mutual TLS under the cluster CA"
			if !st.Authenticated {
				auth = "encrypted, NOT authenticated (development mode)"
			}
			fmt.Fprintf(env.stdout, "node %d, listening for peers at %s, %s\n", st.NodeID, st.ClusterListen, auth)
			if st.Left {
				fmt.Fprintf(env.stdout, "this node left the cluster: stop it (members: %s)\n", idList(memberIDs(st.Members)))
			} else {
				fmt.Fprintf(env.stdout, "members: %s; metadata group: leader %d, term %d, voters %s\n",
					memberList(st.Members), st.Meta.Leader, st.Meta.Term, idList(st.Meta.Voters))
			}
			t := newTable("PEER", "ADDRESS", "LINK", "SINCE", "SENT", "RECEIVED", "DROPPED", "LAST ERROR")
			for _, p := range st.Peers {
				state := "down"
				if p.Up {
					state = "up"
				}
				since := "-"
				if !p.Since.IsZero() {
					since = time.Since(p.Since).Truncate(time.Second).String() + " ago"
				}
				t.AppendRow([]any{p.NodeID, p.Addr, state, since, p.Messages, p.Received, p.Dropped, p.LastError})
			}
			if err := writeTable(env.stdout, t); err != nil {
				return err
			}
			if len(st.Groups) == 0 {
				return nil
			}
			var leads []string
			for _, id := range slices.Sorted(maps.Keys(st.Leaders)) {
				leads = append(leads, fmt.Sprintf("node %d leads %d", id, st.Leaders[id]))
			}
			fmt.Fprintf(env.stdout, "\nraft groups held here (%s):\n", strings.Join(leads, ", "))
			t = newTable("STREAM", "SHARD", "LEADER", "TERM", "COMMIT", "APPLIED", "TAIL", "LAG", "QUIET")
			for _, g := range st.Groups {
				lag := "-" // known on the leader only
				if len(g.Lag) > 0 {
					var parts []string
					for _, id := range slices.Sorted(maps.Keys(g.Lag)) {
						parts = append(parts, groupLagText(g, id))
					}
					lag = strings.Join(parts, " ")
				}
				quiet := "no"
				if g.Quiesced {
					quiet = "yes"
				}
				t.AppendRow([]any{g.Stream, g.Shard, g.Leader, g.Term, g.Commit, g.Applied, g.Tail, lag, quiet})
			}
			return writeTable(env.stdout, t)
		},
	}
	c.Flags().StringVar(&httpAddr, "http", defaultClusterHTTP, "the node's HTTP listener `address` (its --http)")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the node")
	addOutputFlags(c, &out, "an object with node_id, cluster_listen, authenticated, peers, groups (each replicated shard held here: stream, shard, leader, term, commit, applied, tail, lag, lag_records and lag_bytes on its leader, quiesced, voters, learners), leaders (groups led, per node id), drained (the drained nodes), metadata (the metadata group's leader, term, voters, learners) members (node_id, addr, state: active, drained or leaving, metadata: voter, learner or none) and left (set on a node that left the cluster)")
	return c
}

// memberList is the members for the status line: "1, 2 (drained), 3
// (leaving), 4 (joining)"; "none yet" on a node that has not joined.
func memberList(ms []supervisors.MemberStatus) string {
	if len(ms) == 0 {
		return "none yet (this node has not joined)"
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		var notes []string
		if m.State != "active" {
			notes = append(notes, m.State)
		}
		if m.Metadata != "voter" && m.State != "leaving" {
			notes = append(notes, "joining")
		}
		parts[i] = fmt.Sprint(m.NodeID)
		if len(notes) > 0 {
			parts[i] += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// memberIDs are the members' ids.
func memberIDs(ms []supervisors.MemberStatus) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.NodeID
	}
	return out
}

// errNotCluster is a node that runs without peers.
var errNotCluster = errors.New("the node is not part of a cluster (it runs without --peers)")

// fetchClusterStatus asks the node at httpAddr for its cluster status.
func fetchClusterStatus(ctx context.Context, httpAddr string) (supervisors.ClusterStatus, error) {
	url := "http://" + httpAddr + "/cluster"
	if strings.Contains(httpAddr, "://") {
		url = strings.TrimSuffix(httpAddr, "/") + "/cluster"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return supervisors.ClusterStatus{}, usageErrorf("--http %q: %v", httpAddr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return supervisors.ClusterStatus{}, fmt.Errorf("asking %s: %w", url, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return supervisors.ClusterStatus{}, errNotCluster
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return supervisors.ClusterStatus{}, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var st supervisors.ClusterStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return supervisors.ClusterStatus{}, fmt.Errorf("%s: %w", url, err)
	}
	return st, nil
}
