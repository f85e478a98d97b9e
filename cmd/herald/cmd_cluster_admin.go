package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
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

// postClusterChange asks the node at httpAddr to drain or undrain (op)
// node.
func postClusterChange(ctx context.Context, httpAddr, op, token string, node uint64) (supervisors.ClusterChangeResult, error) {
	return postClusterChangeOf(ctx, httpAddr, op, token, supervisors.ClusterChange{Node: node})
}

// postClusterChangeOf asks the node at httpAddr for a cluster change: op
// is drain, undrain, add or remove. A change is the same asked twice, so
// one the node could not get committed yet (not_leader,
// replication_timeout: a metadata leader being elected) is asked again
// until ctx ends.
func postClusterChangeOf(ctx context.Context, httpAddr, op, token string, ch supervisors.ClusterChange) (supervisors.ClusterChangeResult, error) {
	for {
		res, retry, err := postClusterChangeOnce(ctx, httpAddr, op, token, ch)
		if !retry {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// postClusterChangeOnce asks once; retry says whether asking again may
// succeed.
func postClusterChangeOnce(ctx context.Context, httpAddr, op, token string, ch supervisors.ClusterChange) (res supervisors.ClusterChangeResult, retry bool, err error) {
	res, err = postClusterChangeBody(ctx, httpAddr, op, token, ch)
	var ce *clusterChangeError
	if errors.As(err, &ce) && (ce.Code == "not_leader" || ce.Code == "replication_timeout") {
		return res, true, err
	}
	return res, false, err
}

// clusterChangeError is a node's refusal of a cluster change.
type clusterChangeError struct{ supervisors.ClusterChangeError }

func (e *clusterChangeError) Error() string { return e.Code + ": " + e.Message }

// postClusterChangeBody posts ch to the node at httpAddr.
func postClusterChangeBody(ctx context.Context, httpAddr, op, token string, ch supervisors.ClusterChange) (supervisors.ClusterChangeResult, error) {
	var res supervisors.ClusterChangeResult
	body, _ := json.Marshal(ch)
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
			return res, &clusterChangeError{e}
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

// memberArg parses an ID=ADDR argument.
func memberArg(args []string) (uint64, string, error) {
	if len(args) != 1 {
		return 0, "", usageErrorf("want exactly one ID=ADDR (the new node's id and the address its peers reach it at), got %d arguments", len(args))
	}
	idText, addr, ok := strings.Cut(args[0], "=")
	id, err := strconv.ParseUint(idText, 10, 64)
	if !ok || err != nil || id == 0 || addr == "" {
		return 0, "", usageErrorf("%q: want ID=ADDR, e.g. 4=10.0.0.4:7402 (a positive node id, and the host:port of its --cluster-listen)", args[0])
	}
	return id, addr, nil
}

func newClusterAddCmd(env *cliEnv) *cobra.Command {
	var f clusterAdminFlags
	var wait bool
	c := &cobra.Command{
		Use:   "add ID=ADDR",
		Short: "Add a node to a running cluster",
		Long: `Add node ID, whose peers reach it at ADDR (its --cluster-listen), to the cluster: the
metadata group records it a member, every node links to it, and placement places replicas
over it too, so the shards it now outweighs get a replica there (a learner first, promoted
once caught up; the replica it displaces is removed after). The metadata group adds it as a
learner, then a voter. Start the node with --join, and --peers listing every member with
itself: with nothing stored it then takes the cluster's state from the metadata group
instead of starting a cluster of its own. The order does not matter: a node started first
waits to be added.

An id is never reused: a node that was removed keeps its id for good.
The command returns once the change is committed and applied by the node at --http, and
prints how to start the node; with --wait it waits until the node is a voter of the
metadata group (it has joined). With auth_tokens_file set, the request needs a token
holding the cluster permission.`,
		Example: `  herald cluster add 4=10.0.0.4:7402 --http 10.0.0.1:7401
  herald node --node-id 4 --cluster-listen 10.0.0.4:7402 --join \
      --peers 1=10.0.0.1:7402,2=10.0.0.2:7402,3=10.0.0.3:7402,4=10.0.0.4:7402 ...
  herald cluster add 4=10.0.0.4:7402 --wait --timeout 5m`,
		RunE: func(c *cobra.Command, args []string) error {
			node, addr, err := memberArg(args)
			if err != nil {
				return err
			}
			of, err := f.out.resolve(c)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			res, err := postClusterChangeOf(ctx, f.http, "add", cmp.Or(f.token, env.getenv("HERALD_TOKEN")), supervisors.ClusterChange{Node: node, Addr: addr})
			if err != nil {
				return err
			}
			var peers []string
			if st, err := fetchClusterStatus(ctx, f.http); err == nil {
				peers = append(peers, fmt.Sprintf("%d=%s", st.NodeID, st.ClusterListen))
				for _, p := range st.Peers {
					if p.NodeID != node {
						peers = append(peers, fmt.Sprintf("%d=%s", p.NodeID, p.Addr))
					}
				}
				peers = append(peers, fmt.Sprintf("%d=%s", node, addr))
			}
			if wait {
				if err := waitMember(ctx, f.http, node, true); err != nil {
					return err
				}
			}
			if of.structured() {
				return writeValue(env.stdout, of, res)
			}
			fmt.Fprintf(env.stdout, "node %d added at %s (members: %s)\n", node, addr, idList(res.Members))
			if wait {
				fmt.Fprintf(env.stdout, "node %d has joined: it is a voter of the metadata group\n", node)
			} else if len(peers) > 0 {
				fmt.Fprintf(env.stdout, "start it with: herald node --node-id %d --cluster-listen %s --join --peers %s ...\n", node, addr, strings.Join(peers, ","))
			}
			return nil
		},
	}
	f.register(c, "an object with members, leaving and drained (the cluster's nodes after the change)")
	c.Flags().DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the change (and, with --wait, for the node to join)")
	c.Flags().BoolVar(&wait, "wait", false, "wait until the node has joined (a voter of the metadata group): start it first, or from another shell")
	return c
}

func newClusterRemoveCmd(env *cliEnv) *cobra.Command {
	var f clusterAdminFlags
	var noWait, force bool
	c := &cobra.Command{
		Use:   "remove NODE",
		Short: "Remove a node from the cluster, moving its replicas off it first",
		Long: `Remove node NODE (its --node-id) from the cluster. It is leaving at once: placement
places its replicas on the other nodes (each shard's leader adds the new replica as a
learner, promotes it once caught up, and only then removes NODE's), and it leads nothing,
as a drained node. Once it holds no replica it leaves: the metadata group removes it, and
every node drops its link to it. Stop it then; its id is never used again. Nothing is lost:
a replica leaves a group only while the others can commit without it.

Refused when the nodes left could not hold a stream's replicas (add a node first, or lower
the stream's replicas), or only drained nodes would be left.
A node that is gone for good (its machine lost) cannot move anything: remove it with --force,
which drops it at once (refused while its link is up). Its shards' other replicas go on, and
each shard's leader places a new replica elsewhere; a shard whose only replica it held is lost.

The command waits, unless --no-wait, until the node at --http sees NODE gone.
With auth_tokens_file set, the request needs a token holding the cluster permission.`,
		Example: `  herald cluster remove 3 --http 10.0.0.1:7401
  herald cluster remove 3 --no-wait
  herald cluster remove 3 --force   # node 3's machine is gone`,
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
			res, err := postClusterChangeOf(ctx, f.http, "remove", cmp.Or(f.token, env.getenv("HERALD_TOKEN")), supervisors.ClusterChange{Node: node, Force: force})
			if err != nil {
				return err
			}
			if !noWait {
				if err := waitMember(ctx, f.http, node, false); err != nil {
					return err
				}
				if st, err := fetchClusterStatus(ctx, f.http); err == nil {
					res.Members, res.Drained = nil, st.Drained
					res.Leaving = []uint64{}
					for _, m := range st.Members {
						res.Members = append(res.Members, m.NodeID)
						if m.State == "leaving" {
							res.Leaving = append(res.Leaving, m.NodeID)
						}
					}
				}
			}
			if of.structured() {
				return writeValue(env.stdout, of, res)
			}
			if noWait {
				fmt.Fprintf(env.stdout, "node %d is leaving: its replicas move off it, then it leaves (members: %s)\n", node, idList(res.Members))
				return nil
			}
			fmt.Fprintf(env.stdout, "node %d left the cluster in %v (members: %s); stop it\n", node, time.Since(start).Round(time.Millisecond), idList(res.Members))
			return nil
		},
	}
	f.register(c, "an object with members, leaving and drained (the cluster's nodes after the change)")
	c.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long to wait for the change and for the node to leave (its replicas copied elsewhere first)")
	c.Flags().BoolVar(&noWait, "no-wait", false, "return once the removal is committed, while the node's replicas move off it")
	c.Flags().BoolVar(&force, "force", false, "drop a node that is gone for good at once, without moving anything off it (refused while it is up)")
	return c
}

// waitMember polls the node at httpAddr until node has joined (a voter of
// the metadata group), or, with joined false, until it is no member and
// no member of the metadata group.
func waitMember(ctx context.Context, httpAddr string, node uint64, joined bool) error {
	var last string
	for {
		st, err := fetchClusterStatus(ctx, httpAddr)
		if err == nil {
			member := false
			for _, m := range st.Members {
				member = member || m.NodeID == node
			}
			inMeta := slices.Contains(st.Meta.Voters, node) || slices.Contains(st.Meta.Learners, node)
			switch {
			case joined && member && slices.Contains(st.Meta.Voters, node):
				return nil
			case !joined && !member && !inMeta:
				return nil
			}
			last = fmt.Sprintf("members %v, metadata group voters %v learners %v", st.Members, st.Meta.Voters, st.Meta.Learners)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			if joined {
				return fmt.Errorf("node %d is added, but has not joined yet (is it started, with --join?): %s", node, last)
			}
			return fmt.Errorf("node %d is leaving, but has not left yet (its replicas may still be moving: herald cluster status on it): %s", node, last)
		case <-time.After(200 * time.Millisecond): // polling the node's state
		}
	}
}
