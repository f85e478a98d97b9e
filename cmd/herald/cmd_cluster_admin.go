package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/supervisors"
)

// `herald cluster drain|undrain NODE`: the cluster changes an operator
// makes, through a node's HTTP listener (supervisors/cluster_admin.go).

// clusterAdminFlags are the flags of the commands that change the cluster.
type clusterAdminFlags struct {
	http    string
	token   string
	timeout time.Duration
	out     outputFlags
}

func (f *clusterAdminFlags) register(c *cobra.Command, jsonHelp string) {
	c.Flags().StringVar(&f.http, "http", defaultClusterHTTP, "a node's HTTP listener `address` (its --http): any node of the cluster")
	c.Flags().StringVar(&f.token, "token", "", "a `token` holding the cluster permission, for a node with auth_tokens_file (default $HERALD_TOKEN)")
	addOutputFlags(c, &f.out, jsonHelp)
}

// nodeArg parses a NODE argument: a node id.
func nodeArg(args []string) (uint64, error) {
	if len(args) != 1 {
		return 0, usageErrorf("want exactly one NODE (a node id), got %d arguments", len(args))
	}
	id, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || id == 0 {
		return 0, usageErrorf("NODE %q: want a node id (a positive integer, its --node-id)", args[0])
	}
	return id, nil
}

func newClusterDrainCmd(env *cliEnv) *cobra.Command {
	var f clusterAdminFlags
	var noWait bool
	c := &cobra.Command{
		Use:   "drain NODE",
		Short: "Move every leadership off a node, so it can be stopped or restarted without failing a publish",
		Long: `Drain node NODE (its --node-id): the cluster's metadata group records it drained, and
then every raft group it leads, the metadata group's too, hands its leadership to another
replica, and it takes none back (an election it wins is handed away at once) until
"herald cluster undrain NODE". Its replicas stay and keep replicating: stopping it,
restarting it or killing it then costs no publish an election. A shard whose only replica
is on the node (a stream of one replica) cannot move: give its stream more replicas first
(herald stream edit --replicas).

The command asks the node at --http (any node of the cluster) and, unless --no-wait,
waits until that node sees NODE lead nothing another replica could lead. Ask NODE itself
to wait for every group it leads (another node sees only the groups it holds).
With auth_tokens_file set, the request needs a token holding the cluster permission.`,
		Example: `  herald cluster drain 2 --http 127.0.0.1:7411
  herald cluster drain 2 --http 127.0.0.1:7411 --timeout 2m -o json
  herald cluster undrain 2`,
		RunE: func(c *cobra.Command, args []string) error {
			node, err := nodeArg(args)
			if err != nil {
				return err
			}
			of, err := f.out.resolve(c)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			start := time.Now()
			res, err := postClusterChange(ctx, f.http, "drain", cmp.Or(f.token, env.getenv("HERALD_TOKEN")), node)
			if err != nil {
				return err
			}
			out := drainResult{Node: node, Drained: res.Drained, Kept: []keptLeader{}}
			if !noWait {
				kept, err := waitDrained(ctx, f.http, node)
				if err != nil {
					return err
				}
				out.Kept = append(out.Kept, kept...)
				out.Done = true
			}
			out.TookMillis = time.Since(start).Milliseconds()
			if of.structured() {
				return writeValue(env.stdout, of, out)
			}
			if noWait {
				fmt.Fprintf(env.stdout, "node %d drained (drained nodes: %s); its leaderships are moving away\n", node, idList(res.Drained))
				return nil
			}
			fmt.Fprintf(env.stdout, "node %d drained in %v: it leads nothing another replica can lead\n", node, time.Since(start).Round(time.Millisecond))
			for _, k := range out.Kept {
				fmt.Fprintf(env.stdout, "  it still leads %s shard %d: no other replica (give the stream more replicas to move it)\n", k.Stream, k.Shard)
			}
			return nil
		},
	}
	f.register(c, "an object with node, drained (every drained node), done, took_ms and kept (shards still led there: no other replica)")
	c.Flags().DurationVar(&f.timeout, "timeout", time.Minute, "how long to wait for the change and for the node's leaderships to move")
	c.Flags().BoolVar(&noWait, "no-wait", false, "return once the drain is committed, without waiting for the leaderships to move")
	return c
}

func newClusterUndrainCmd(env *cliEnv) *cobra.Command {
	var f clusterAdminFlags
	c := &cobra.Command{
		Use:   "undrain NODE",
		Short: "End a node's drain: it may lead again, and takes back the shards it is the preferred leader of",
		Long: `End the drain of node NODE (its --node-id). Placement may prefer it again as a shard's
leader, and each shard whose preferred leader it is hands it the leadership back once it is
up and caught up: within the nodes' leader_balance_interval_ms (2 s by default) of that
(docs/operations.md, "Leader balance"). The command returns once the change is committed and
applied by the node at --http.
With auth_tokens_file set, the request needs a token holding the cluster permission.`,
		Example: `  herald cluster undrain 2 --http 127.0.0.1:7411`,
		RunE: func(c *cobra.Command, args []string) error {
			node, err := nodeArg(args)
			if err != nil {
				return err
			}
			of, err := f.out.resolve(c)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			res, err := postClusterChange(ctx, f.http, "undrain", cmp.Or(f.token, env.getenv("HERALD_TOKEN")), node)
			if err != nil {
				return err
			}
			if of.structured() {
				return writeValue(env.stdout, of, res)
			}
			fmt.Fprintf(env.stdout, "node %d undrained (drained nodes: %s)\n", node, idList(res.Drained))
			return nil
		},
	}
	f.register(c, "an object with drained (the nodes still drained)")
	c.Flags().DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the change")
	return c
}

// drainResult is what `herald cluster drain -o json` prints.
type drainResult struct {
	Node    uint64   `json:"node"`
	Drained []uint64 `json:"drained"`
	// Done is set once the node was seen to lead nothing another replica
	// could lead (not with --no-wait).
	Done       bool         `json:"done"`
	TookMillis int64        `json:"took_ms"`
	Kept       []keptLeader `json:"kept"`
}

// keptLeader is a shard a drained node still leads: it has no other
// replica.
type keptLeader struct {
	Stream string `json:"stream"`
	Shard  uint32 `json:"shard"`
}

// idList is ids for a message: "2, 3", or "none".
func idList(ids []uint64) string {
	if len(ids) == 0 {
		return "none"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ", ")
}

// clusterURL is the URL of path on the node whose HTTP listener is
// httpAddr.
func clusterURL(httpAddr, path string) string {
	if strings.Contains(httpAddr, "://") {
		return strings.TrimSuffix(httpAddr, "/") + path
	}
	return "http://" + httpAddr + path
}

// postClusterChange asks the node at httpAddr for a cluster change (op is
// "drain" or "undrain").
func postClusterChange(ctx context.Context, httpAddr, op, token string, node uint64) (supervisors.ClusterChangeResult, error) {
	var res supervisors.ClusterChangeResult
	body, _ := json.Marshal(supervisors.ClusterChange{Node: node})
	url := clusterURL(httpAddr, "/cluster/"+op)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return res, usageErrorf("--http %q: %v", httpAddr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, fmt.Errorf("asking %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e supervisors.ClusterChangeError
		if json.Unmarshal(b, &e) == nil && e.Code != "" {
			if resp.StatusCode == http.StatusNotFound {
				return res, errNotCluster
			}
			return res, fmt.Errorf("%s: %s", e.Code, e.Message)
		}
		if resp.StatusCode == http.StatusNotFound {
			return res, fmt.Errorf("%s: %s (a node older than cluster %s?)", url, resp.Status, op)
		}
		return res, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("%s: %w", url, err)
	}
	return res, nil
}

// waitDrained polls the node at httpAddr until it sees node lead no group
// another voter could lead (the metadata group included); it returns the
// shards node still leads because it is their only voter.
func waitDrained(ctx context.Context, httpAddr string, node uint64) ([]keptLeader, error) {
	var last string
	for {
		st, err := fetchClusterStatus(ctx, httpAddr)
		if err == nil {
			var kept []keptLeader
			moving := 0
			for _, g := range st.Groups {
				if g.Leader != node {
					continue
				}
				if len(g.Voters) <= 1 {
					kept = append(kept, keptLeader{Stream: g.Stream, Shard: g.Shard})
				} else {
					moving++
				}
			}
			metaMoving := st.Meta.Leader == node && len(st.Meta.Voters) > 1
			if moving == 0 && !metaMoving {
				return kept, nil
			}
			last = fmt.Sprintf("node %d still leads %d shards", node, moving)
			if metaMoving {
				last += " and the metadata group"
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node %d is drained, but its leaderships did not all move in time: %s", node, last)
		case <-time.After(200 * time.Millisecond): // polling the node's state
		}
	}
}
