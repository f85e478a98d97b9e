package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/cmd/herald/internal/history"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/supervisors"
)

var clusterKillRounds = flag.Int("cluster-kill-rounds", 3, "rounds of TestClusterSurvivesLeaderKills: each kills a shard's leader with SIGKILL and restarts it")

// devCluster is three `herald node` processes started with the dev cluster
// flags of docs/operations.md.
type devCluster struct {
	nodes   []*clusterNodeProcess
	servers string // every node's client address, comma-separated
	cas     string // every node's generated CA, comma-separated
}

func startDevCluster(t *testing.T) *devCluster {
	t.Helper()
	dc := &devCluster{nodes: make([]*clusterNodeProcess, 3)}
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
	for _, n := range dc.nodes {
		n.peers = strings.Join(peers, ",")
		n.start(t)
	}
	return dc
}

// cli runs the CLI against the whole cluster.
func (dc *devCluster) cli(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, append(args, "--server", dc.servers, "--ca", dc.cas)...)
	if code != 0 {
		t.Fatalf("herald %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// describe is `herald stream describe STREAM --output json` over the
// cluster: each shard as its leader sees it.
func (dc *devCluster) describe(t *testing.T, stream string) streamInfoJSON {
	t.Helper()
	var info streamInfoJSON
	if err := json.Unmarshal([]byte(dc.cli(t, "stream", "describe", stream, "--output", "json")), &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// kill sends SIGKILL to node id and waits for it to exit.
func (dc *devCluster) kill(t *testing.T, id uint64) {
	t.Helper()
	n := dc.nodes[id-1]
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n.done
}

// pubProcess is a `herald pub` process publishing the lines written to its
// standard input to the cluster, keyed by key.
type pubProcess struct {
	name  string
	shard uint32
	cmd   *exec.Cmd
	in    io.WriteCloser
	// done closes when its output is read; fed when its feeder stopped.
	done, fed chan struct{}
	stop      atomic.Bool
}

// TestClusterSurvivesLeaderKills is the cluster's acceptance run, with
// real processes: three `herald node` processes with the dev cluster flags,
// a stream of three shards with three replicas created with `herald stream
// create`, and while two `herald pub` processes and a Go ClusterProducer
// publish, the leader of a shard (found with `herald stream describe
// --output json`) is killed with SIGKILL, restarted, and another leader
// killed, for -cluster-kill-rounds rounds (each a different node from the
// last). Every publish goes into a history; after healing, each shard is
// read back from every node, and the checker verifies that every
// acknowledged record is there exactly once at its acknowledged offset, that
// no record is there twice, that the replicas' logs are equal, and that
// `herald cluster status` shows every node up. Each round's failover time
// (from the kill to the first acknowledged publish to the killed leader's
// shard) is logged.
func TestClusterSurvivesLeaderKills(t *testing.T) {
	dc := startDevCluster(t)
	dc.cli(t, "stream", "create", "orders", "--shards", "3", "--replicas", "3")
	name := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "orders"}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cc, err := client.DialCluster(ctx, dc.servers, client.WithCAFile(dc.cas))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rec := history.New()

	// Two herald pub processes, one per key.
	var pubs []*pubProcess
	for _, key := range []string{"a", "b"} {
		p := &pubProcess{name: "pub-" + key, shard: wire.ShardFor([]byte(key), 3, wire.RoutingHash), done: make(chan struct{}), fed: make(chan struct{})}
		p.cmd = exec.Command(heraldBinary(t), "pub", "orders", "--key", key, "--server", dc.servers, "--ca", dc.cas, "--timeout", "30s")
		if p.in, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb strings.Builder
		p.cmd.Stderr = &errb
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sent := make(chan string, 1<<16)
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				id := <-sent
				var shard uint32
				var off uint64
				if _, err := fmt.Sscanf(sc.Text(), "%d %d", &shard, &off); err != nil {
					rec.Unknown(id, fmt.Errorf("unparsed ack line %q", sc.Text()))
					continue
				}
				rec.Ack(id, shard, off)
			}
			<-p.fed
			for len(sent) > 0 {
				rec.Unknown(<-sent, fmt.Errorf("herald pub ended before acking it: %s", errb.String()))
			}
		}()
		t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
		go func() {
			defer close(p.fed)
			for i := 0; ctx.Err() == nil && !p.stop.Load(); i++ {
				id := fmt.Sprintf("%s-%d", p.name, i)
				rec.Invoke(id, p.shard)
				sent <- id
				if _, err := fmt.Fprintln(p.in, id); err != nil {
					return
				}
				time.Sleep(5 * time.Millisecond) // a steady trickle, not a flood
			}
		}()
		pubs = append(pubs, p)
	}
	// A Go ClusterProducer over every shard.
	var goWG sync.WaitGroup
	stopGo := make(chan struct{})
	goWG.Add(1)
	go func() {
		defer goWG.Done()
		p := cc.NewProducer(name, 77)
		for i := 0; ; i++ {
			select {
			case <-stopGo:
				return
			default:
			}
			id := fmt.Sprintf("go-%d", i)
			key := []byte(strconv.Itoa(i % 7))
			rec.Invoke(id, wire.ShardFor(key, 3, wire.RoutingHash))
			ack, err := p.Publish(ctx, [][]byte{[]byte(id)}, client.WithKey(key))
			if err != nil {
				rec.Unknown(id, err)
				continue
			}
			rec.Ack(id, ack.Shard, ack.Offset)
		}
	}()

	// The kills.
	var last uint64
	var failovers []time.Duration
	for round := 0; round < *clusterKillRounds; round++ {
		time.Sleep(500 * time.Millisecond) // publishing goes on between kills
		var shard int
		var lead uint64
		for wait := time.Now().Add(30 * time.Second); lead == 0; time.Sleep(100 * time.Millisecond) {
			info := dc.describe(t, "orders")
			for _, r := range info.Replication {
				if r.Leader != 0 && r.Leader != last {
					shard, lead = r.Shard, r.Leader
					break
				}
			}
			if lead == 0 && time.Now().After(wait) {
				t.Fatalf("round %d: no shard led by a node other than %d: %+v", round, last, info.Replication)
			}
		}
		dc.kill(t, lead)
		killed := time.Now()
		elected := dc.watchElection(lead, shard)
		// The failover: how long until the killed leader's shard takes a
		// publish again.
		probe := cc.NewProducer(name, uint64(1000+round))
		key := keyFor(uint32(shard))
		id := fmt.Sprintf("probe-%d", round)
		rec.Invoke(id, uint32(shard))
		ack, err := probe.Publish(ctx, [][]byte{[]byte(id)}, client.WithKey(key))
		if err != nil {
			t.Fatalf("round %d: shard %d takes no publish after its leader %d was killed: %v", round, shard, lead, err)
		}
		rec.Ack(id, ack.Shard, ack.Offset)
		failovers = append(failovers, time.Since(killed))
		t.Logf("round %d: killed node %d, leader of shard %d; a survivor saw a new leader after %v, which acknowledged a publish %v after the kill",
			round, lead, shard, (<-elected).Sub(killed).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
		dc.nodes[lead-1].start(t)
		last = lead
	}

	// Stop publishing; wait for the acks.
	close(stopGo)
	goWG.Wait()
	for _, p := range pubs {
		p.stop.Store(true)
		<-p.fed
		_ = p.in.Close()
		<-p.done
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}

	// Heal: every node up, every replica caught up with its leader.
	for _, n := range dc.nodes {
		all := map[uint64]bool{}
		for _, o := range dc.nodes {
			if o.id != n.id {
				all[o.id] = true
			}
		}
		n.waitUp(t, all)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := dc.describe(t, "orders")
		caught := len(info.Replication) == 3
		for _, r := range info.Replication {
			for _, rep := range r.Replicas {
				caught = caught && rep.Lag != nil && *rep.Lag == 0
			}
		}
		if caught {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas did not catch up: %+v", info.Replication)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Read every shard back from every node.
	finals := map[string]history.Final{}
	for _, n := range dc.nodes {
		c, err := client.Dial(ctx, n.listen, client.WithCAFile(filepath.Join(n.dir, "tls", "ca.pem")))
		if err != nil {
			t.Fatal(err)
		}
		final := history.Final{}
		for shard := uint32(0); shard < 3; shard++ {
			var ids []string
			for next := uint64(0); ; {
				page, err := c.Read(ctx, name, shard, next, client.ReadToTail)
				if err != nil {
					t.Fatalf("read node %d shard %d from %d: %v", n.id, shard, next, err)
				}
				for _, r := range page.Records {
					ids = append(ids, string(r.Payload))
				}
				if page.Next == next || page.Next >= page.Tail {
					break
				}
				next = page.Next
			}
			final[shard] = history.LogOf(0, ids...)
		}
		_ = c.Close()
		finals[fmt.Sprintf("node-%d", n.id)] = final
	}
	// `herald cluster status` on every node: every peer up (waitUp above),
	// the three groups held, each at the tail of the final log.
	for _, n := range dc.nodes {
		st := n.status(t)
		if len(st.Groups) != 3 {
			t.Fatalf("node %d's status holds groups %+v", n.id, st.Groups)
		}
		for _, g := range st.Groups {
			if want := uint64(len(finals["node-1"][g.Shard].Entries)); g.Tail != want || g.Leader == 0 {
				t.Errorf("node %d's status of shard %d: %+v, want tail %d and a leader", n.id, g.Shard, g, want)
			}
		}
	}
	h := rec.History()
	for _, v := range history.Check(h, finals["node-1"]) {
		t.Errorf("history: %v", v)
	}
	for _, v := range history.CompareReplicas(finals) {
		t.Errorf("replicas: %v", v)
	}
	sum := history.Summarize(h, finals["node-1"])
	t.Logf("history: %v; failovers %v", sum, failovers)
	if sum.Acked == 0 || sum.Lost != 0 || sum.Duplicated != 0 {
		t.Fatalf("acked %d, lost %d, duplicated %d", sum.Acked, sum.Lost, sum.Duplicated)
	}
}

// watchElection polls the other nodes' GET /streams/describe until one
// names a leader of shard other than the killed node, and sends the time.
func (dc *devCluster) watchElection(killed uint64, shard int) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, n := range dc.nodes {
				if n.id == killed {
					continue
				}
				resp, err := http.Get("http://" + n.http + "/streams/describe?stream=default/default/orders")
				if err != nil {
					continue
				}
				var d supervisors.StreamDescription
				err = json.NewDecoder(resp.Body).Decode(&d)
				resp.Body.Close()
				if err == nil && shard < len(d.Shard) && d.Shard[shard].Leader != 0 && d.Shard[shard].Leader != killed {
					out <- time.Now()
					return
				}
			}
			time.Sleep(20 * time.Millisecond) // polling other processes' state
		}
		out <- time.Time{}
	}()
	return out
}

// keyFor is a key that routes to shard of a three-shard hash-routed stream.
func keyFor(shard uint32) []byte {
	for i := 0; ; i++ {
		k := []byte("probe-" + strconv.Itoa(i))
		if wire.ShardFor(k, 3, wire.RoutingHash) == shard {
			return k
		}
	}
}
