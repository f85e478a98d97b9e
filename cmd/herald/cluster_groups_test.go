package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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
)

// nodeSeeds lists the cluster's client addresses and CAs starting at node
// first: a client given them connects there, and reconnects to the others.
func (dc *devCluster) nodeSeeds(first uint64) (string, string) {
	var addrs, cas []string
	for _, n := range append([]*clusterNodeProcess{dc.nodes[first-1]}, dc.nodes...) {
		if len(addrs) > 0 && n.id == first {
			continue
		}
		addrs = append(addrs, n.listen)
		cas = append(cas, filepath.Join(n.dir, "tls", "ca.pem"))
	}
	return strings.Join(addrs, ","), strings.Join(cas, ",")
}

// groupWatch describes a group every few milliseconds through a client
// and remembers the committed cursors it saw, to tell whether one went
// back.
type groupWatch struct {
	mu      sync.Mutex
	cursors map[uint32]uint64
	back    []string
	// moved is when the describe that last saw a committed cursor move
	// forward was sent.
	moved time.Time
}

func (w *groupWatch) observe(info client.GroupInfo, sent time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range info.Shards {
		prev, seen := w.cursors[s.Shard]
		switch {
		case s.Committed < prev:
			w.back = append(w.back, fmt.Sprintf("shard %d committed %d after %d", s.Shard, s.Committed, prev))
		case s.Committed > prev || !seen:
			w.cursors[s.Shard] = s.Committed
			w.moved = sent
		}
	}
}

// A consumer group on a cluster stream keeps consuming through a SIGKILL
// of the node that coordinates it (the leader of the stream's shard 0),
// with real processes: three `herald node` processes, a Go producer
// publishing all along, two Go push members (one connected to the
// coordinator's node, one to another), a `herald sub --group` process
// connected to the third node and a Go poller. The coordinator's node is
// killed with SIGKILL mid-stream and started again later. Every delivery is
// recorded in the publishes' history (as a read of its record), and
// checked with it: no delivered record is one the final log lacks. At the
// end every acknowledged publish is in the log once, the group's committed
// cursor of each shard is its tail (every record settled at least once),
// and no committed cursor was ever seen to move back.
//
// It runs with three nodes and with four (a stream of six shards of three
// replicas; the log says which shards, if any, the coordinator holds no
// replica of: TestReplicatedGroupReadsShardsItsCoordinatorDoesNotHold
// makes sure of that case in process).
func TestClusterGroupSurvivesCoordinatorKill(t *testing.T) {
	for _, nodes := range []int{3, 4} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) { clusterGroupCoordinatorKill(t, nodes) })
	}
}

func clusterGroupCoordinatorKill(t *testing.T, nodes int) {
	dc := startDevClusterOf(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Two shards on three nodes; six on four.
	shards := uint32(2)
	if nodes > 3 {
		shards = 6
	}
	dc.cli(t, "stream", "create", "work", "--shards", fmt.Sprint(shards), "--replicas", "3")
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "work"}
	// The coordinator is shard 0's leader once leaderships have spread
	// (a shard's preferred replica takes it over 2 s after an election):
	// the same leader seen twice 2.5 s apart.
	leader0 := func() uint64 {
		if info := dc.describe(t, "work"); len(info.Replication) == int(shards) {
			return info.Replication[0].Leader
		}
		return 0
	}
	var coord uint64
	for {
		l := leader0()
		time.Sleep(2500 * time.Millisecond) // polling other processes' state
		if l != 0 && leader0() == l {
			coord = l
			break
		}
	}
	n := uint64(nodes)
	other, third := coord%n+1, (coord+1)%n+1
	var elsewhere []int
	for _, r := range dc.describe(t, "work").Replication {
		held := false
		for _, rep := range r.Replicas {
			held = held || rep.Node == coord
		}
		if !held {
			elsewhere = append(elsewhere, r.Shard)
		}
	}
	t.Logf("node %d coordinates the group; it holds no replica of shards %v", coord, elsewhere)

	rec := history.New()
	cc, err := client.DialCluster(ctx, dc.servers, client.WithCAFile(dc.cas))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	producer := cc.NewProducer(name, 77)
	var published atomic.Int64
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; ; i++ {
			select {
			case <-stopPub:
				return
			default:
			}
			id := fmt.Sprintf("w-%d", i)
			shard := uint32(i) % shards
			rec.Invoke(id, shard)
			pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
			ack, err := producer.Publish(pctx, [][]byte{[]byte(id)}, client.WithKey(keyOf(shard, shards)))
			pcancel()
			switch {
			case err == nil:
				rec.Ack(id, ack.Shard, ack.Offset)
				published.Add(1)
			case errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded):
				rec.Unknown(id, err)
			default:
				rec.Fail(id, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	consumeCtx, stopConsumers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopConsumers(); wg.Wait() }()
	var settled atomic.Int64
	deliveries := func(recs []client.GroupRecord) {
		for _, r := range recs {
			rec.Read(r.Shard, r.Offset, []string{string(r.Payload)})
		}
	}
	for _, at := range []uint64{coord, other} {
		addrs, cas := dc.nodeSeeds(at)
		c, err := client.Dial(ctx, addrs, client.WithCAFile(cas))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m, err := c.Group(name, "workers").Subscribe(ctx, client.WithMember(fmt.Sprintf("go-%d", at)),
			client.WithWindow(50), client.WithHeartbeat(500*time.Millisecond))
		if err != nil {
			t.Fatalf("member through node %d: %v", at, err)
		}
		defer m.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := m.Next(consumeCtx)
				if err != nil {
					return
				}
				deliveries(d.Records)
				if m.Ack(consumeCtx, d) == nil {
					settled.Add(int64(len(d.Records)))
				}
			}
		}()
	}
	// A poller through the third node.
	addrs, cas := dc.nodeSeeds(third)
	pc, err := client.Dial(ctx, addrs, client.WithCAFile(cas))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		g := pc.Group(name, "workers")
		for shard := uint32(0); consumeCtx.Err() == nil; shard = (shard + 1) % shards {
			recs, err := g.Poll(consumeCtx, shard, 20, 200*time.Millisecond)
			if err != nil || len(recs) == 0 {
				continue
			}
			deliveries(recs)
			if _, err := g.Ack(consumeCtx, recs...); err == nil {
				settled.Add(int64(len(recs)))
			}
		}
	}()
	// A `herald sub --group` process through the third node.
	sub := exec.Command(heraldBinary(t), "sub", "work", "--group", "workers", "--member", "cli", "--window", "20", "--server", addrs, "--ca", cas)
	subOut, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var subErr strings.Builder
	sub.Stderr = &subErr
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	subDone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(subDone)
		sc := bufio.NewScanner(subOut)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				continue
			}
			shard, _ := strconv.ParseUint(f[0], 10, 32)
			off, _ := strconv.ParseUint(f[1], 10, 64)
			rec.Read(uint32(shard), off, []string{f[2]})
		}
		_ = sub.Wait()
	}()
	t.Cleanup(func() {
		_ = sub.Process.Kill()
		<-subDone
		if t.Failed() {
			t.Logf("herald sub --group: %v, stderr %q", sub.ProcessState, subErr.String())
		}
	})
	// The watcher, through the third node.
	watch := &groupWatch{cursors: map[uint32]uint64{}}
	wc, err := client.Dial(ctx, addrs, client.WithCAFile(cas))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for consumeCtx.Err() == nil {
			dctx, dcancel := context.WithTimeout(consumeCtx, 2*time.Second)
			sent := time.Now()
			if info, err := wc.Group(name, "workers").Describe(dctx); err == nil {
				watch.observe(info, sent)
			}
			dcancel()
			time.Sleep(20 * time.Millisecond) // sampling the cursors
		}
	}()

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond) // polling the consumers' progress
		}
	}
	waitFor("300 records settled before the kill", func() bool { return settled.Load() >= 300 })
	// One group, wherever its consumers are connected: the three push
	// members are its members, as the node the watcher uses sees it.
	waitFor("the three push members in one group", func() bool {
		info, err := wc.Group(name, "workers").Describe(ctx)
		return err == nil && len(info.Members) == 3
	})
	if l := leader0(); l != coord {
		t.Fatalf("shard 0's leader moved from node %d to node %d before the kill", coord, l)
	}
	dc.kill(t, coord)
	killed := time.Now() // the process has exited
	before := settled.Load()
	waitFor("a committed cursor moving after the kill", func() bool {
		watch.mu.Lock()
		defer watch.mu.Unlock()
		return watch.moved.After(killed)
	})
	watch.mu.Lock()
	resumed := watch.moved.Sub(killed)
	watch.mu.Unlock()
	waitFor("consumption going on after the kill", func() bool { return settled.Load() >= before+300 })
	t.Logf("node %d (the coordinator) killed: a describe sent %s after the kill saw a committed cursor move; 300 more records settled after %s",
		coord, resumed.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	dc.nodes[coord-1].start(t)
	after := settled.Load()
	waitFor("consumption going on with the node back", func() bool { return settled.Load() >= after+200 })
	close(stopPub)
	<-pubDone

	// Every record settled: the committed cursor of each shard reaches
	// its tail.
	var tails []uint64
	waitFor("the group settled every record", func() bool {
		sent := time.Now()
		info, err := wc.Group(name, "workers").Describe(ctx)
		if err != nil {
			return false
		}
		watch.observe(info, sent)
		tails = tails[:0]
		for _, s := range info.Shards {
			if s.Committed != s.Tail {
				return false
			}
			tails = append(tails, s.Tail)
		}
		return len(info.Shards) == int(shards)
	})
	stopConsumers()
	_ = sub.Process.Kill()
	wg.Wait()
	dc.waitCaughtUp(t, "work")

	final := history.Final{}
	for shard := uint32(0); shard < shards; shard++ {
		var ids []string
		for next := uint64(0); ; {
			page, err := wc.Read(ctx, name, shard, next, client.ReadToTail)
			if err != nil {
				t.Fatal(err)
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
	h := rec.History()
	for _, v := range history.Check(h, final) {
		t.Errorf("history: %v", v)
	}
	sum := history.Summarize(h, final)
	t.Logf("history: %v; group cursors at the tails %v; %d settles counted by the Go consumers", sum, tails, settled.Load())
	if sum.Acked == 0 || sum.Lost != 0 || sum.Duplicated != 0 {
		t.Errorf("acked %d, lost %d, duplicated %d", sum.Acked, sum.Lost, sum.Duplicated)
	}
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if len(watch.back) > 0 {
		t.Errorf("committed cursors moved back: %v", watch.back)
	}
}

// keyOf is a key of shard of a stream of shards shards.
func keyOf(shard, shards uint32) []byte {
	for i := 0; ; i++ {
		k := []byte("key-" + strconv.Itoa(i))
		if wire.ShardFor(k, shards, wire.RoutingHash) == shard {
			return k
		}
	}
}
