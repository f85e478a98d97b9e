package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/supervisors"
)

// startDevClusterOf is startDevCluster with n node processes.
func startDevClusterOf(t *testing.T, n int, env ...string) *devCluster {
	t.Helper()
	dc := &devCluster{nodes: make([]*clusterNodeProcess, n)}
	var peers, servers, cas []string
	for i := range dc.nodes {
		listen, httpAddr := freePorts(t)
		clusterListen, _ := freePorts(t)
		dir := t.TempDir()
		dc.nodes[i] = &clusterNodeProcess{id: uint64(i + 1), dir: dir, listen: listen, http: httpAddr, clusterListen: clusterListen}
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, clusterListen))
		servers = append(servers, listen)
		cas = append(cas, filepath.Join(dir, "tls", "ca.pem"))
	}
	dc.servers, dc.cas = strings.Join(servers, ","), strings.Join(cas, ",")
	for _, p := range dc.nodes {
		p.peers, p.env = strings.Join(peers, ","), env
		p.start(t)
	}
	return dc
}

// addrs is the client addresses of nodes ids, in that order.
func (dc *devCluster) addrs(ids ...uint64) string {
	var out []string
	for _, id := range ids {
		out = append(out, dc.nodes[id-1].listen)
	}
	return strings.Join(out, ",")
}

// startSub starts `herald sub feed args...` against the nodes servers
// names (trusting every node's CA).
func (dc *devCluster) startSub(t *testing.T, what, servers string, args ...string) *cliProcess {
	t.Helper()
	args = append([]string{"sub", "feed"}, args...)
	args = append(args, "--server", servers, "--ca", dc.cas)
	p := &cliProcess{what: what, out: newLineCollector(), errOut: newLineCollector(), done: make(chan struct{})}
	p.cmd = exec.Command(heraldBinary(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s (herald %s): %v; stderr:\n%s", p.what, strings.Join(args, " "), p.cmd.ProcessState, p.stderr())
		}
	})
	return p
}

// signal sends sig to node id.
func (dc *devCluster) signal(t *testing.T, id uint64, sig syscall.Signal) {
	t.Helper()
	if err := dc.nodes[id-1].cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// checkFeed checks that p printed exactly "0 i ri" for every i below n:
// every record once, in order.
func checkFeed(t *testing.T, p *cliProcess, n int) {
	t.Helper()
	lines := p.out.lines()
	if len(lines) != n {
		t.Fatalf("%s printed %d lines, want %d", p.what, len(lines), n)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("0 %d r%d", i, i); l != want {
			t.Fatalf("%s: line %d is %q, want %q (a gap or a duplicate)", p.what, i, l, want)
		}
	}
}

// Follower reads on real node processes, three and then four of them
// (the fourth holds no replica of the stream, so it redirects): herald sub
// processes read a three-replica stream from a follower, from a node
// without a replica (through the cluster), and from the leader
// (--replica leader), and keep up with a publisher. The follower, cut off
// from the other two replicas (SIGSTOP), says it is behind rather than
// serve its tail; the subscriber that has only its address resumes there
// once they are back. Killed with SIGKILL, the node serving a cluster
// subscription, and then the leader, are left for other replicas. Every
// subscriber prints every record once, in order.
func TestClusterFollowerReads(t *testing.T) {
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) { testClusterFollowerReads(t, n) })
	}
}

func testClusterFollowerReads(t *testing.T, nodes int) {
	dc := startDevClusterOf(t, nodes, "HERALD_RAFT_ELECTION_TIMEOUT_MS=500")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dc.cli(t, "stream", "create", "feed", "--shards", "1", "--replicas", "3")
	cc, err := client.DialCluster(ctx, dc.servers, client.WithCAFile(dc.cas))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "feed"}
	d := dc.waitLeader(t, "feed")
	lead := d.Leader
	var followers []uint64
	var outside uint64 // a node without a replica (four nodes)
	for _, n := range dc.nodes {
		switch {
		case n.id == lead:
		case slices.Contains(d.Replicas, n.id):
			followers = append(followers, n.id)
		default:
			outside = n.id
		}
	}
	f, g := followers[0], followers[1]
	t.Logf("replicas %v, leader %d, follower %d, no replica on %d (0: none)", d.Replicas, lead, f, outside)

	next := 0
	publish := sequentialPublisher(t, ctx, cc.NewProducer(name, 1), &next)
	subF := dc.startSub(t, "the subscriber at the follower", dc.addrs(f))
	subNear := dc.startSub(t, "the cluster subscriber, follower first", dc.addrs(f, lead, g))
	subLead := dc.startSub(t, "the cluster subscriber of the leader", dc.servers, "--replica", "leader")
	subs := []*cliProcess{subF, subNear, subLead}
	// A Go ClusterSubscription beside them says which node serves it.
	ncc, err := client.DialCluster(ctx, dc.addrs(f, lead, g), client.WithCAFile(dc.cas))
	if err != nil {
		t.Fatal(err)
	}
	defer ncc.Close()
	goSub, err := ncc.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer goSub.Close()
	got := 0
	receive := func(n int) {
		t.Helper()
		for ; got < n; got++ {
			ev, err := goSub.Next(ctx)
			if err != nil || ev.Offset != uint64(got) || string(ev.Payload) != fmt.Sprintf("r%d", got) {
				t.Fatalf("the Go cluster subscriber's record %d: offset %d %q, %v", got, ev.Offset, ev.Payload, err)
			}
		}
	}
	if outside != 0 {
		subs = append(subs, dc.startSub(t, "the cluster subscriber at the node without a replica", dc.addrs(outside, f, g, lead)))
		// A lone subscriber there is told where the replicas are.
		code, _, errOut := runCLI(t, "sub", "feed", "--count", "1", "--server", dc.addrs(outside), "--ca", dc.cas)
		if code != 1 || !strings.Contains(errOut, "not_leader") || !strings.Contains(errOut, "not hosted on this node") {
			t.Fatalf("herald sub at the node without a replica: exit %d: %s", code, errOut)
		}
	}
	all := func(n int) func() bool { return func() bool { return allOf(subs, n) } }
	publish(300)
	waitRunning(ctx, t, "every subscriber keeping up with 300 records", subs, all(300))
	receive(300)
	if by := goSub.ServedBy()[0]; by != f {
		t.Fatalf("the Go cluster subscriber is served by node %d, want the follower %d (its first address)", by, f)
	}
	for _, p := range subs {
		checkFeed(t, p, 300)
	}
	// A read at the follower holds every record; asked for the leader, the
	// follower names it.
	if out := dc.read(t, dc.addrs(f), "--limit", "300"); strings.Count(out, "\n") != 300 {
		t.Fatalf("herald read at the follower: %d lines", strings.Count(out, "\n"))
	}
	code, _, errOut := runCLI(t, "read", "feed", "--shard", "0", "--from", "0", "--replica", "leader", "--server", dc.addrs(f), "--ca", dc.cas)
	if code != 1 || !strings.Contains(errOut, "not_leader") || !strings.Contains(errOut, fmt.Sprintf("node %d leads", lead)) {
		t.Fatalf("herald read --replica leader at the follower: exit %d: %s", code, errOut)
	}
	if out := dc.read(t, dc.addrs(f, g, lead), "--replica", "leader", "--limit", "10"); strings.Count(out, "\n") != 10 {
		t.Fatalf("herald read --replica leader through the cluster: %q", out)
	}

	// Cut off: the follower's two peers in the group are paused.
	dc.signal(t, lead, syscall.SIGSTOP)
	dc.signal(t, g, syscall.SIGSTOP)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut := runCLI(t, "read", "feed", "--shard", "0", "--from", "0", "--server", dc.addrs(f), "--ca", dc.cas, "--timeout", "5s")
		if code == 0 {
			t.Fatalf("a read at the cut-off follower answered: %d lines", strings.Count(out, "\n"))
		}
		if strings.Contains(errOut, "replica_behind") {
			t.Logf("the cut-off follower: %s", strings.TrimSpace(errOut))
			break
		}
		if !strings.Contains(errOut, "replication_timeout") && !strings.Contains(errOut, "deadline") {
			t.Fatalf("a read at the cut-off follower: exit %d: %s", code, errOut)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cut-off follower never said it is behind: %s", errOut)
		}
	}
	if v := metric(t, dc.nodes[f-1], "herald_raft_group_behind"); v != 1 {
		t.Fatalf("the cut-off follower's herald_raft_group_behind is %v", v)
	}
	dc.signal(t, lead, syscall.SIGCONT)
	dc.signal(t, g, syscall.SIGCONT)
	publish(100)
	waitRunning(ctx, t, "every subscriber after the cut", subs, all(400))
	receive(400)
	for _, p := range subs {
		checkFeed(t, p, 400)
	}
	if v := metric(t, dc.nodes[f-1], "herald_raft_subscriptions_ended_total"); v < 1 {
		t.Fatalf("the follower ended %v subscriptions as behind", v)
	}

	// SIGKILL the node serving the Go cluster subscriber (and likely the
	// CLI one with the same addresses): they move on. (The subscriber with
	// only the follower's address waits for it if it is the one.)
	serving := goSub.ServedBy()[0]
	for ; serving == 0; serving = goSub.ServedBy()[0] {
		time.Sleep(20 * time.Millisecond) // it is between two replicas
	}
	moves := goSub.Moves()
	dc.kill(t, serving)
	publish(100)
	receive(500)
	if goSub.Moves() == moves || goSub.ServedBy()[0] == serving {
		t.Fatalf("the Go cluster subscriber did not move off the killed node %d: %d moves, served by %v", serving, goSub.Moves(), goSub.ServedBy())
	}
	moved := []*cliProcess{subNear, subLead}
	if outside != 0 {
		moved = append(moved, subs[3])
	}
	if serving != f {
		moved = append(moved, subF)
	}
	waitRunning(ctx, t, "the cluster subscribers after the kill", moved, func() bool { return allOf(moved, 500) })
	dc.nodes[serving-1].start(t)
	// SIGKILL the leader: its subscriber moves to the next leader.
	lead = dc.waitLeader(t, "feed").Leader
	dc.kill(t, lead)
	publish(100)
	dc.nodes[lead-1].start(t)
	waitRunning(ctx, t, "every subscriber after the leader's kill", subs, all(600))
	receive(600)
	for _, p := range subs {
		checkFeed(t, p, 600)
	}
	dc.waitCaughtUp(t, "feed")
	info := dc.describe(t, "feed")
	for _, r := range info.Replication[0].Replicas {
		if r.LagRecords == nil || *r.LagRecords != 0 || r.LagBytes == nil || *r.LagBytes != 0 {
			t.Fatalf("replica %d caught up, yet lacks %v records, %v bytes", r.Node, r.LagRecords, r.LagBytes)
		}
	}
}

// waitLeader waits until every replica of shard 0 of stream (as node 1
// places it) knows the same leader, one of them and the shard's preferred
// one (every node is up: no handover is to come), and returns the
// leader's description.
func (dc *devCluster) waitLeader(t *testing.T, stream string) supervisors.ShardDescription {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var last error
		var lead supervisors.ShardDescription
		d, err := nodeDescribe(dc.nodes[0], stream)
		if err == nil && len(d.Shard) == 0 {
			err = fmt.Errorf("no shard")
		}
		if err != nil {
			last = err
		} else {
			for _, id := range d.Shard[0].Replicas {
				r, err := nodeDescribe(dc.nodes[id-1], stream)
				switch {
				case err != nil:
					last = err
				case r.Shard[0].Leader == 0 || !slices.Contains(r.Shard[0].Replicas, r.Shard[0].Leader):
					last = fmt.Errorf("node %d knows no leader", id)
				case r.Shard[0].Preferred != 0 && r.Shard[0].Leader != r.Shard[0].Preferred:
					last = fmt.Errorf("node %d's leader is %d, not the preferred %d (a handover is to come)", id, r.Shard[0].Leader, r.Shard[0].Preferred)
				case lead.Leader != 0 && r.Shard[0].Leader != lead.Leader:
					last = fmt.Errorf("nodes disagree on the leader")
				case r.Shard[0].Leader == id:
					lead = r.Shard[0]
				case lead.Leader == 0:
					lead.Leader = r.Shard[0].Leader
				}
			}
			if last == nil && len(lead.Replicas) > 0 {
				return lead
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s's leader: %v", stream, last)
		}
		time.Sleep(50 * time.Millisecond) // polling other processes' state
	}
}

// allOf reports whether every process in procs printed n lines.
func allOf(procs []*cliProcess, n int) bool {
	for _, p := range procs {
		if len(p.out.lines()) < n {
			return false
		}
	}
	return true
}

// read runs `herald read feed --shard 0 --from 0 args...` against servers
// and returns its output.
func (dc *devCluster) read(t *testing.T, servers string, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"read", "feed", "--shard", "0", "--from", "0", "--server", servers, "--ca", dc.cas}, args...)...)
	if code != 0 {
		t.Fatalf("herald read %v: exit %d: %s", args, code, errOut)
	}
	return out
}
