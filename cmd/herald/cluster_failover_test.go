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
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/cmd/herald/internal/history"
	"github.com/heraldmq/herald/cmd/herald/internal/udpproxy"
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
	// proxies are, by node, the proxies its peer links go through (a
	// proxied cluster only).
	proxies map[uint64][]*udpproxy.Proxy
}

func startDevCluster(t *testing.T, env ...string) *devCluster {
	t.Helper()
	return startDevClusterOf(t, 3, env...)
}

// startProxiedDevCluster is startDevCluster with each pair of nodes' peer
// link through a UDP proxy: the lower id (which dials) has the other at the
// proxy's address in its --peers. proxies[id] are the proxies of id's links.
func startProxiedDevCluster(t *testing.T) *devCluster {
	t.Helper()
	dc := &devCluster{nodes: make([]*clusterNodeProcess, 3), proxies: map[uint64][]*udpproxy.Proxy{}}
	var servers, cas []string
	for i := range dc.nodes {
		listen, httpAddr := freePorts(t)
		clusterListen, _ := freePorts(t)
		dir := t.TempDir()
		dc.nodes[i] = &clusterNodeProcess{id: uint64(i + 1), dir: dir, listen: listen, http: httpAddr, clusterListen: clusterListen}
		servers = append(servers, listen)
		cas = append(cas, filepath.Join(dir, "tls", "ca.pem"))
	}
	dc.servers, dc.cas = strings.Join(servers, ","), strings.Join(cas, ",")
	for _, n := range dc.nodes {
		var peers []string
		for _, o := range dc.nodes {
			addr := o.clusterListen
			if n.id < o.id {
				p, err := udpproxy.New("127.0.0.1:0", o.clusterListen)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Close() })
				dc.proxies[n.id] = append(dc.proxies[n.id], p)
				dc.proxies[o.id] = append(dc.proxies[o.id], p)
				addr = p.Addr().String()
			}
			peers = append(peers, fmt.Sprintf("%d=%s", o.id, addr))
		}
		n.peers = strings.Join(peers, ",")
	}
	for _, n := range dc.nodes {
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

// waitCaughtUp waits until every replica of every shard of stream is at
// its leader's commit index, as each shard's leader describes it.
func (dc *devCluster) waitCaughtUp(t *testing.T, stream string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := dc.describe(t, stream)
		caught := len(info.Replication) == info.Shards
		for _, r := range info.Replication {
			for _, rep := range r.Replicas {
				caught = caught && rep.Lag != nil && *rep.Lag == 0
			}
		}
		if caught {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: replicas did not catch up: %+v", stream, info.Replication)
		}
		time.Sleep(100 * time.Millisecond) // polling other processes' state
	}
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

// clusterWorkload is what publishes and reads during a fault run: two
// `herald pub` processes (one key each), a Go ClusterProducer over every
// shard of "orders" (three shards, three replicas), a reader of every
// shard, and two conditional writers racing on "ledger" (one shard), each
// stream with its own history.
type clusterWorkload struct {
	t        *testing.T
	dc       *devCluster
	cc       *client.ClusterClient
	ctx      context.Context
	orders   wire.StreamName
	ledger   wire.StreamName
	rec      *history.Recorder // orders
	ledRec   *history.Recorder // ledger
	producer *client.ClusterProducer
	probes   uint64
	pubs     []*pubProcess
	stopGo   chan struct{}
	goWG     sync.WaitGroup
	started  time.Time
}

func startWorkload(t *testing.T, ctx context.Context, dc *devCluster) *clusterWorkload {
	t.Helper()
	dc.cli(t, "stream", "create", "orders", "--shards", "3", "--replicas", "3")
	dc.cli(t, "stream", "create", "ledger", "--shards", "1", "--replicas", "3")
	w := &clusterWorkload{t: t, dc: dc, ctx: ctx, rec: history.New(), ledRec: history.New(), stopGo: make(chan struct{}), started: time.Now(),
		orders: wire.StreamName{Tenant: "default", Namespace: "default", Stream: "orders"},
		ledger: wire.StreamName{Tenant: "default", Namespace: "default", Stream: "ledger"}}
	var err error
	if w.cc, err = client.DialCluster(ctx, dc.servers, client.WithCAFile(dc.cas)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cc.Close() })
	w.producer = w.cc.NewProducer(w.orders, 77)
	rec := w.rec
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
		// At most 64 lines ahead of herald pub's acks: the feeder waits
		// for room, so a run's backlog stays bounded through its faults.
		sent := make(chan string, 64)
		scanned := make(chan struct{})
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
			close(scanned)
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
				select {
				case sent <- id:
				case <-scanned: // herald pub ended
					return
				}
				rec.Invoke(id, p.shard)
				if _, err := fmt.Fprintln(p.in, id); err != nil {
					return // its id is in sent: the reader records it unknown
				}
				time.Sleep(5 * time.Millisecond) // a steady trickle, not a flood
			}
		}()
		w.pubs = append(w.pubs, p)
	}
	w.loop(func(i int) { // the Go ClusterProducer
		p := w.producer
		id := fmt.Sprintf("go-%d", i)
		key := []byte(strconv.Itoa(i % 7))
		rec.Invoke(id, wire.ShardFor(key, 3, wire.RoutingHash))
		ack, err := p.Publish(ctx, [][]byte{[]byte(id)}, client.WithKey(key))
		if err != nil {
			rec.Unknown(id, err)
			return
		}
		rec.Ack(id, ack.Shard, ack.Offset)
	})
	w.loop(func(i int) { // the reader: a page of each shard from its leader
		shard := uint32(i % 3)
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		page, err := w.cc.Read(pctx, w.orders, shard, 0, client.ReadToTail)
		if err == nil {
			var ids []string
			for _, r := range page.Records {
				ids = append(ids, string(r.Payload))
			}
			rec.Read(shard, 0, ids)
		}
		time.Sleep(50 * time.Millisecond)
	})
	for _, writer := range []string{"cw-x", "cw-y"} { // conditional writers racing on ledger
		var expected uint64
		w.loop(func(i int) {
			id := fmt.Sprintf("%s-%d", writer, i)
			w.ledRec.InvokeIf(id, 0, expected)
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			res, err := w.cc.PublishIf(pctx, w.ledger, [][]byte{[]byte(id)}, expected)
			switch {
			case err != nil:
				w.ledRec.Unknown(id, err)
				time.Sleep(50 * time.Millisecond)
			case res.Written:
				w.ledRec.Ack(id, res.Shard, res.Offset)
				expected = res.Offset + 1
			default:
				w.ledRec.Fail(id, fmt.Errorf("condition failed: the tail is %d", res.Tail))
				expected = res.Tail
			}
		})
	}
	return w
}

// loop runs step(0), step(1), ... on a goroutine until the workload stops.
func (w *clusterWorkload) loop(step func(i int)) {
	w.goWG.Add(1)
	go func() {
		defer w.goWG.Done()
		for i := 0; ; i++ {
			select {
			case <-w.stopGo:
				return
			default:
			}
			step(i)
		}
	}()
}

// leaderOtherThan waits for a shard of orders led by a node other than not
// and returns it with its leader.
func (w *clusterWorkload) leaderOtherThan(not uint64) (int, uint64) {
	w.t.Helper()
	for wait := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info := w.dc.describe(w.t, "orders")
		for _, r := range info.Replication {
			if r.Leader != 0 && r.Leader != not {
				return r.Shard, r.Leader
			}
		}
		if time.Now().After(wait) {
			w.t.Fatalf("no shard led by a node other than %d: %+v", not, info.Replication)
		}
	}
}

// probe publishes to shard through a fresh ClusterProducer and returns how
// long after since it was acknowledged.
func (w *clusterWorkload) probe(id string, shard int, since time.Time) time.Duration {
	w.t.Helper()
	w.probes++
	p := w.cc.NewProducer(w.orders, 1000+w.probes)
	w.rec.Invoke(id, uint32(shard))
	ack, err := p.Publish(w.ctx, [][]byte{[]byte(id)}, client.WithKey(keyFor(uint32(shard))))
	if err != nil {
		w.t.Fatalf("%s: shard %d takes no publish: %v", id, shard, err)
	}
	w.rec.Ack(id, ack.Shard, ack.Offset)
	return time.Since(since)
}

// finish keeps the workload going until it has run for at least d, then
// stops it, heals the cluster, reads every shard of both streams back from
// every node and checks the histories and the replicas.
func (w *clusterWorkload) finish(d time.Duration) {
	t, dc := w.t, w.dc
	t.Helper()
	if rest := d - time.Since(w.started); rest > 0 {
		time.Sleep(rest) // the history's length: publishing goes on meanwhile
	}
	close(w.stopGo)
	w.goWG.Wait()
	for _, p := range w.pubs {
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
	for _, stream := range []string{"orders", "ledger"} {
		dc.waitCaughtUp(t, stream)
	}
	// Read every shard back from every node.
	read := func(name wire.StreamName, shards uint32) map[string]history.Final {
		finals := map[string]history.Final{}
		for _, n := range dc.nodes {
			c, err := client.Dial(w.ctx, n.listen, client.WithCAFile(filepath.Join(n.dir, "tls", "ca.pem")))
			if err != nil {
				t.Fatal(err)
			}
			final := history.Final{}
			for shard := uint32(0); shard < shards; shard++ {
				var ids []string
				for next := uint64(0); ; {
					page, err := c.Read(w.ctx, name, shard, next, client.ReadToTail)
					if err != nil {
						t.Fatalf("read %s from node %d shard %d from %d: %v", name, n.id, shard, next, err)
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
		return finals
	}
	orders, ledger := read(w.orders, 3), read(w.ledger, 1)
	ref := fmt.Sprintf("node-%d", dc.nodes[0].id) // the final log the others are compared with
	// `herald cluster status` on every node: every peer up (waitUp above),
	// the four groups held, each at the tail of the final log.
	for _, n := range dc.nodes {
		st := n.status(t)
		if len(st.Groups) != 4 {
			t.Fatalf("node %d's status holds groups %+v", n.id, st.Groups)
		}
		for _, g := range st.Groups {
			final := orders[ref]
			if g.Stream == "default/default/ledger" {
				final = ledger[ref]
			}
			if want := uint64(len(final[g.Shard].Entries)); g.Tail != want || g.Leader == 0 {
				t.Errorf("node %d's status of %s shard %d: %+v, want tail %d and a leader", n.id, g.Stream, g.Shard, g, want)
			}
		}
	}
	for _, c := range []struct {
		name   string
		rec    *history.Recorder
		finals map[string]history.Final
	}{{"orders", w.rec, orders}, {"ledger", w.ledRec, ledger}} {
		h := c.rec.History()
		for _, v := range history.Check(h, c.finals[ref]) {
			t.Errorf("%s history: %v", c.name, v)
		}
		for _, v := range history.CompareReplicas(c.finals) {
			t.Errorf("%s replicas: %v", c.name, v)
		}
		sum := history.Summarize(h, c.finals[ref])
		t.Logf("%s history over %v: %v", c.name, time.Since(w.started).Round(time.Second), sum)
		if sum.Acked == 0 || sum.Lost != 0 || sum.Duplicated != 0 {
			t.Errorf("%s: acked %d, lost %d, duplicated %d", c.name, sum.Acked, sum.Lost, sum.Duplicated)
		}
	}
}

var clusterHistoryDuration = flag.Duration("cluster-history", 0, "how long each cluster fault run's history lasts at least (0: as long as its faults take)")

// TestClusterSurvivesLeaderKills is the cluster's acceptance run, with
// real processes: three `herald node` processes with the dev cluster flags,
// streams created with `herald stream create --replicas 3`, and while two
// `herald pub` processes, a Go ClusterProducer, a reader and two racing
// conditional writers run, the leader of a shard (found with `herald
// stream describe --output json`) is killed with SIGKILL, restarted, and
// another leader killed, for -cluster-kill-rounds rounds (each a different
// node from the last). Every publish and read goes into a history; after
// healing, each shard is read back from every node, and the checker
// verifies that every acknowledged record is there exactly once at its
// acknowledged offset, that no record is there twice, that failed ones are
// not there, that reads were prefixes of the final log, that each
// conditional tail had at most one winner, that the replicas' logs are
// equal, and that `herald cluster status` shows every node up. Each round's
// failover time (from the kill to the first acknowledged publish to the
// killed leader's shard) is logged.
func TestClusterSurvivesLeaderKills(t *testing.T) {
	dc := startDevCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := startWorkload(t, ctx, dc)
	var last uint64
	var failovers []time.Duration
	for round := 0; round < *clusterKillRounds; round++ {
		time.Sleep(500 * time.Millisecond) // publishing goes on between kills
		shard, lead := w.leaderOtherThan(last)
		dc.kill(t, lead)
		killed := time.Now()
		elected := dc.watchElection(lead, shard)
		took := w.probe(fmt.Sprintf("probe-%d", round), shard, killed)
		failovers = append(failovers, took)
		t.Logf("round %d: killed node %d, leader of shard %d; a survivor saw a new leader after %v, which acknowledged a publish %v after the kill",
			round, lead, shard, (<-elected).Sub(killed).Round(time.Millisecond), took.Round(time.Millisecond))
		dc.nodes[lead-1].start(t)
		last = lead
	}
	w.finish(*clusterHistoryDuration)
	t.Logf("failovers %v", failovers)
}

// TestClusterSurvivesPausesAndPartitions runs the same workload through a
// leader stopped with SIGSTOP for three election timeouts and then
// continued (it must step down, acknowledge nothing it could not commit,
// and catch up), and then a leader cut off from both other nodes by the
// UDP proxies its peer links go through (the isolated leader acknowledges
// nothing; the majority elects and serves); after healing nothing
// acknowledged is lost and the logs agree. With the default -cluster-history
// of 0 in this test, its history runs for at least 60 s.
func TestClusterSurvivesPausesAndPartitions(t *testing.T) {
	dc := startProxiedDevCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := startWorkload(t, ctx, dc)

	time.Sleep(time.Second)
	shard, lead := w.leaderOtherThan(0)
	n := dc.nodes[lead-1]
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	took := w.probe("probe-sigstop", shard, stopped)
	t.Logf("SIGSTOP of node %d, leader of shard %d: a new leader acknowledged a publish %v later", lead, shard, took.Round(time.Millisecond))
	if rest := 3*time.Second - time.Since(stopped); rest > 0 {
		time.Sleep(rest)
	}
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	time.Sleep(2 * time.Second)
	shard, lead = w.leaderOtherThan(0)
	for _, p := range dc.proxies[lead] {
		p.Cut(true)
	}
	cut := time.Now()
	took = w.probe("probe-partition", shard, cut)
	t.Logf("partition of node %d, leader of shard %d: the majority acknowledged a publish %v later", lead, shard, took.Round(time.Millisecond))
	time.Sleep(3 * time.Second) // the isolated leader steps down; its clients go to the majority
	for _, p := range dc.proxies[lead] {
		p.Heal()
	}
	w.finish(max(*clusterHistoryDuration, 60*time.Second))
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

// TestClusterRollingRestart stops each node in turn with SIGTERM and
// starts it again, under the same workload as the kill runs: a node that
// stops gracefully hands its leaderships over first, so publishers are
// redirected rather than wait out an election. After healing the checker
// runs as after the kills; no idempotent publish may have failed or be
// unknown, and no acknowledged record may be lost or duplicated. The
// slowest probe publish per round is logged.
func TestClusterRollingRestart(t *testing.T) {
	dc := startDevCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := startWorkload(t, ctx, dc)
	for _, n := range dc.nodes {
		time.Sleep(500 * time.Millisecond) // publishing goes on between restarts
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("node %d did not exit after SIGTERM", n.id)
		}
		if code := n.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("node %d exited %d after SIGTERM", n.id, code)
		}
		t.Logf("node %d stopped with SIGTERM in %v", n.id, time.Since(stopped).Round(time.Millisecond))
		shard, _ := w.leaderOtherThan(n.id)
		took := w.probe(fmt.Sprintf("probe-%d", n.id), shard, stopped)
		t.Logf("a fresh producer's publish to shard %d was acknowledged %v after the SIGTERM (the node's exit, a stream describe and a dial included)", shard, took.Round(time.Millisecond))
		n.start(t)
		dc.waitCaughtUp(t, "orders") // back and caught up before the next one stops
	}
	w.finish(*clusterHistoryDuration)
	sum := history.Summarize(w.rec.History(), nil)
	if sum.Failed != 0 || sum.Unknown != 0 {
		t.Errorf("orders: %d publishes failed and %d are unknown across a rolling restart", sum.Failed, sum.Unknown)
	}
}
