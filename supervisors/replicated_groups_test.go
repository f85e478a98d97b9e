package supervisors

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/storage"
)

// groupLedger records what a cluster group test's consumers settled, and
// the committed cursors describe showed, so the test can check that every
// published record was settled at least once and no cursor went back.
type groupLedger struct {
	mu      sync.Mutex
	settled map[[2]uint64]int // (shard, offset) → times acked
	cursors map[uint32]uint64 // the highest committed cursor seen per shard
	back    []string          // cursors seen moving back
}

func newGroupLedger() *groupLedger {
	return &groupLedger{settled: map[[2]uint64]int{}, cursors: map[uint32]uint64{}}
}

func (l *groupLedger) acked(recs []client.GroupRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		l.settled[[2]uint64{uint64(r.Shard), r.Offset}]++
	}
}

// observe notes a describe's committed cursors.
func (l *groupLedger) observe(from string, info client.GroupInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range info.Shards {
		if prev := l.cursors[s.Shard]; s.Committed < prev {
			l.back = append(l.back, fmt.Sprintf("%s: shard %d committed %d after %d", from, s.Shard, s.Committed, prev))
		}
		l.cursors[s.Shard] = max(l.cursors[s.Shard], s.Committed)
	}
}

// missing lists the published records not settled yet.
func (l *groupLedger) missing(published map[[2]uint64]bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k := range published {
		if l.settled[k] == 0 {
			out = append(out, fmt.Sprintf("%d/%d", k[0], k[1]))
		}
	}
	slices.Sort(out)
	return out
}

// seedsFrom lists the cluster's client addresses and CA files starting at
// node first: a Client dialled with them connects there, and reconnects
// to the others.
func (tc *testCluster) seedsFrom(first uint64) (string, client.Option) {
	ids := []uint64{first}
	for id := uint64(1); id <= 3; id++ {
		if id != first {
			ids = append(ids, id)
		}
	}
	var addrs, cas []string
	for _, id := range ids {
		addrs, cas = append(addrs, tc.listen[id]), append(cas, tc.nodes[id].CAFile())
	}
	return strings.Join(addrs, ","), client.WithCAFile(strings.Join(cas, ","))
}

// A cluster stream's consumer group is coordinated by the leader of its
// shard 0, wherever its consumers are connected: two push members, each
// connected to a node that does not coordinate (their traffic relayed),
// and a pull consumer polling through the third, share the stream. When
// the coordinator's node stops, the leadership of shard 0 moves, the
// members join again through their own nodes and the poller's requests
// go to the new coordinator: every record published, before and after, is
// settled at least once, and the committed cursors never move back.
func TestReplicatedGroupSurvivesItsCoordinator(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "jobs", 2)
	coord := tc.leaderOf(name, 0)
	var others []uint64
	for id := uint64(1); id <= 3; id++ {
		if id != coord {
			others = append(others, id)
		}
	}

	ledger := newGroupLedger()
	published := map[[2]uint64]bool{}
	var pubMu sync.Mutex
	p := cc.NewProducer(name, 41)
	publish := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "job-%d", i)}, client.WithKey(fmt.Appendf(nil, "k%d", i)))
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
			pubMu.Lock()
			published[[2]uint64{uint64(ack.Shard), ack.Offset}] = true
			pubMu.Unlock()
		}
	}
	publish(0, 100)

	var wg sync.WaitGroup
	consumeCtx, stopConsumers := context.WithCancel(ctx)
	defer func() { stopConsumers(); wg.Wait() }()
	errs := make(chan error, 8)
	for i, id := range others {
		addrs, cas := tc.seedsFrom(id)
		c, err := client.Dial(ctx, addrs, cas)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m, err := c.Group(name, "workers").Subscribe(ctx, client.WithMember(fmt.Sprintf("m%d", i)),
			client.WithWindow(20), client.WithHeartbeat(200*time.Millisecond))
		if err != nil {
			t.Fatalf("member through node %d: %v", id, err)
		}
		defer m.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := m.Next(consumeCtx)
				if err != nil {
					if consumeCtx.Err() == nil {
						errs <- fmt.Errorf("member m%d: %w", i, err)
					}
					return
				}
				if err := m.Ack(consumeCtx, d); err != nil {
					continue // a rejoin made it stale, or its outcome is unknown: delivered again
				}
				ledger.acked(d.Records)
			}
		}()
	}
	// A poller through the first non-coordinating node, on shard 1.
	addrs, cas := tc.seedsFrom(others[0])
	pc, err := client.Dial(ctx, addrs, cas)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	g := pc.Group(name, "workers")
	wg.Add(1)
	go func() {
		defer wg.Done()
		for consumeCtx.Err() == nil {
			recs, err := g.Poll(consumeCtx, 1, 10, 100*time.Millisecond)
			if err != nil {
				continue // the coordinator moved mid-poll: its claims lapse and come again
			}
			if len(recs) == 0 {
				continue
			}
			if _, err := g.Ack(consumeCtx, recs...); err == nil {
				ledger.acked(recs)
			}
		}
	}()
	// A watcher describes the group through every node, recording the
	// committed cursors.
	wg.Add(1)
	go func() {
		defer wg.Done()
		addrs, cas := tc.seedsFrom(others[1])
		dc, err := client.Dial(ctx, addrs, cas)
		if err != nil {
			errs <- err
			return
		}
		defer dc.Close()
		for consumeCtx.Err() == nil {
			if info, err := dc.Group(name, "workers").Describe(consumeCtx); err == nil {
				ledger.observe("describe", info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	waitSettled := func(what string) {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for {
			pubMu.Lock()
			missing := ledger.missing(published)
			pubMu.Unlock()
			if len(missing) == 0 {
				return
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d records never settled: %v", what, len(missing), missing[:min(len(missing), 20)])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitSettled("before the failover")
	// The three consumers shared the group: nothing was settled twice, and
	// the coordinator knows both members, whichever node describes it.
	ledger.mu.Lock()
	for k, n := range ledger.settled {
		if n > 1 {
			ledger.mu.Unlock()
			t.Fatalf("record %d/%d settled %d times before any failover: the consumers do not share one group", k[0], k[1], n)
		}
	}
	ledger.mu.Unlock()
	for id := uint64(1); id <= 3; id++ {
		info, err := tc.dial(id).Group(name, "workers").Describe(ctx)
		if err != nil || len(info.Members) != 2 {
			t.Fatalf("describe through node %d: %d members, want 2 (%+v, %v)", id, len(info.Members), info.Members, err)
		}
	}

	start := time.Now()
	tc.stop(coord)
	publish(100, 100)
	waitSettled("after the coordinator's node stopped")
	t.Logf("the 100 records published after node %d (the coordinator) stopped were all settled %s after the stop", coord, time.Since(start).Round(time.Millisecond))
	newCoord := tc.leaderOf(name, 0)
	if newCoord == coord {
		t.Fatalf("shard 0 still led by stopped node %d", coord)
	}

	// Every record settled, and the group's committed cursors say so on
	// the new coordinator: each shard's cursor is its tail.
	c := tc.dial(newCoord)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Group(name, "workers").Describe(ctx)
		if err == nil {
			ledger.observe("final", info)
			done := len(info.Shards) == 2
			for _, s := range info.Shards {
				done = done && s.Committed == s.Tail && s.Tail > 0
			}
			if done {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cursors did not reach the tails: %+v, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ledger.mu.Lock()
	back, dup, settled := slices.Clone(ledger.back), 0, len(ledger.settled)
	for _, n := range ledger.settled {
		if n > 1 {
			dup++
		}
	}
	ledger.mu.Unlock()
	if len(back) > 0 {
		t.Fatalf("committed cursors moved back: %v", back)
	}
	t.Logf("%d records settled, %d of them more than once (at-least-once across the failover)", settled, dup)

	// The stopped node comes back and takes shard 0 back if it is its
	// preferred replica: the group's figures (herald_group_lag) are
	// reported by the coordinating node alone, the one it moved from
	// included.
	tc.start(coord)
	lead := tc.leaderOf(name, 0)
	deadline = time.Now().Add(20 * time.Second)
	for {
		var reporting []uint64
		for id, n := range tc.nodes {
			for series := range scrapeSeries(t, n) {
				if strings.HasPrefix(series, "herald_group_lag{") && strings.Contains(series, `group="workers"`) {
					reporting = append(reporting, id)
					break
				}
			}
		}
		if len(reporting) == 1 && reporting[0] == lead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald_group_lag of the group is reported by nodes %v; node %d coordinates it", reporting, lead)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// consumeGroup polls shard 0 of name for group and acks what it gets,
// until n records were settled.
func consumeGroup(t *testing.T, ctx context.Context, c *client.Client, name client.StreamName, group string, n int) {
	t.Helper()
	g := c.Group(name, group)
	for got := 0; got < n; {
		recs, err := g.Poll(ctx, 0, min(50, n-got), time.Second)
		if err != nil {
			t.Fatalf("poll %s: %v", group, err)
		}
		if _, err := g.Ack(ctx, recs...); err != nil {
			t.Fatalf("ack %s: %v", group, err)
		}
		got += len(recs)
	}
}

// groupState reads the group keys node stored for stream id, the node
// stopped.
func (tc *testCluster) groupState(node, id uint64) map[string]string {
	tc.t.Helper()
	log, err := storage.OpenBadger(storage.DefaultBadgerOptions(filepath.Join(tc.dirs[node], "badger")))
	if err != nil {
		tc.t.Fatal(err)
	}
	defer log.Close()
	out := map[string]string{}
	if err := log.ScanMeta(actors.GroupStreamPrefix(id), func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	}); err != nil {
		tc.t.Fatal(err)
	}
	return out
}

// A replica of shard 0 that was down while the group state changed and
// the raft log was compacted past it installs a snapshot, and fetches the
// group state with the records: it ends up holding what the other replicas
// hold, a group deleted meanwhile deleted with it (so it can coordinate
// the groups the moment it leads).
func TestReplicatedGroupStateComesWithASnapshot(t *testing.T) {
	tc := newTestClusterWith(t, func(c *Config) { c.RaftCompactEntries = 50 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "gsnap", 1)
	p := cc.NewProducer(name, 5)
	publishRecords(t, ctx, p, 0, 60)
	lead := tc.leaderOf(name, 0)
	down := lead%3 + 1
	c := tc.dial(lead)
	consumeGroup(t, ctx, c, name, "kept", 20)
	consumeGroup(t, ctx, c, name, "gone", 10)
	tc.stop(down)

	publishRecords(t, ctx, p, 60, 300)
	consumeGroup(t, ctx, c, name, "kept", 200)
	consumeGroup(t, ctx, c, name, "fresh", 30)
	if err := c.Group(name, "gone").Delete(ctx); err != nil {
		t.Fatal(err)
	}
	tc.describeAll(name, "raft logs compacted past the stopped replica", func(_ uint64, d StreamDescription) bool {
		return d.Shard[0].Tail == 360 && d.Shard[0].RaftFirst > 150
	})
	n := tc.start(down)
	tc.describeAll(name, "the restarted replica caught up", func(_ uint64, d StreamDescription) bool { return d.Shard[0].Tail == 360 })
	waitInstalled(t, n, down)
	consumeGroup(t, ctx, c, name, "kept", 10) // a group write after the install
	var applied uint64
	d := tc.describeAll(name, "every replica applied the same", func(_ uint64, d StreamDescription) bool {
		if applied == 0 || d.Shard[0].Applied > applied {
			applied = d.Shard[0].Applied
			return false
		}
		return d.Shard[0].Applied == applied
	})
	id := d[down].ID
	other := down%3 + 1
	tc.stop(down)
	tc.stop(other)
	got, want := tc.groupState(down, id), tc.groupState(other, id)
	if len(want) == 0 || !maps.Equal(got, want) {
		t.Fatalf("node %d stored %d group keys, node %d %d", down, len(got), other, len(want))
	}
	for k := range got {
		if strings.Contains(k, "gone") {
			t.Fatalf("node %d kept key %q of the deleted group", down, k)
		}
	}
}

// A group's coordinator runs on the leader of its stream's shard 0, which
// need not hold every shard (two replicas on three nodes): it learns the
// other shards' tails from their replicas and reads their records there,
// so a push member and a poller still get every record of every shard.
func TestReplicatedGroupReadsShardsItsCoordinatorDoesNotHold(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc := tc.dialCluster(ctx)
	const shards = 4
	var name client.StreamName
	var coord uint64
	var remote []uint32
	for i := 0; len(remote) == 0; i++ {
		if i == 6 {
			t.Fatal("six streams of two replicas each had every shard on shard 0's leader")
		}
		name = client.StreamName{Tenant: "default", Namespace: "default", Stream: fmt.Sprintf("spread-%d", i)}
		if _, err := cc.CreateStream(ctx, name, client.StreamConfig{Shards: shards, Durable: true, Replicas: 2}); err != nil {
			t.Fatal(err)
		}
		// Shard 0's leader, as its replicas see it once it is the
		// preferred one (the nodes without a replica know no leader).
		coord = 0
		d := tc.describeAll(name, "shard 0's preferred leader", func(id uint64, d StreamDescription) bool {
			s0 := d.Shard[0]
			if !slices.Contains(s0.Replicas, id) {
				return true
			}
			if s0.Leader == 0 || s0.Leader != s0.Preferred || (coord != 0 && coord != s0.Leader) {
				return false
			}
			coord = s0.Leader
			return true
		})[coord]
		for _, s := range d.Shard {
			if !slices.Contains(s.Replicas, coord) {
				remote = append(remote, s.Shard)
			}
		}
	}
	t.Logf("node %d coordinates %s and holds no replica of shards %v", coord, name, remote)
	p := cc.NewProducer(name, 8)
	published := map[[2]uint64]bool{}
	for i := range 200 {
		ack, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)}, client.WithKey(fmt.Appendf(nil, "k%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		published[[2]uint64{uint64(ack.Shard), ack.Offset}] = true
	}
	ledger := newGroupLedger()
	c := tc.dial(coord)
	m, err := c.Group(name, "all").Subscribe(ctx, client.WithMember("m"), client.WithWindow(30))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	done := make(chan error, 1)
	mctx, mcancel := context.WithTimeout(ctx, 30*time.Second)
	defer mcancel()
	go func() {
		for len(ledger.missing(published)) > 0 {
			d, err := m.Next(mctx)
			if err != nil {
				done <- err
				return
			}
			if err := m.Ack(ctx, d); err != nil {
				done <- err
				return
			}
			ledger.acked(d.Records)
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("member: %v (missing %v)", err, ledger.missing(published))
	}
	// The poller's group, on a shard held elsewhere, with a record
	// published after the poll began to wait (the stub's watch).
	g := c.Group(name, "pull")
	waited := make(chan []client.GroupRecord, 1)
	go func() {
		var got []client.GroupRecord
		for len(got) < len(published)/shards/4 && ctx.Err() == nil {
			recs, err := g.Poll(ctx, remote[0], 100, 2*time.Second)
			if err != nil {
				break
			}
			if _, err := g.Ack(ctx, recs...); err != nil {
				break
			}
			got = append(got, recs...)
		}
		waited <- got
	}()
	got := <-waited
	if len(got) == 0 {
		t.Fatalf("a poll of shard %d (held on other nodes) got nothing", remote[0])
	}
	info, err := c.Group(name, "all").Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Shards {
		if s.Committed != s.Tail || (slices.Contains(remote, s.Shard) && s.Tail == 0) {
			t.Fatalf("shard %d: committed %d of tail %d", s.Shard, s.Committed, s.Tail)
		}
	}
}

// slowCommits makes every commit of the shard log take a while, as a busy
// disk would, so that what applies meanwhile goes into the next commit
// together; after each commit it checks that every replicated shard the
// commit appended to stored its applied index with its log's tail.
type slowCommits struct {
	storage.Log
	bad *atomic.Int64
}

func (l slowCommits) Commit(a []storage.Append, m []storage.MetaPut) error {
	time.Sleep(15 * time.Millisecond)
	if err := l.Log.Commit(a, m); err != nil {
		return err
	}
	for _, ap := range a {
		v, err := l.GetMeta(actors.ShardAppliedKey(ap.Shard))
		if err != nil || len(v) != 16 {
			continue // not a replicated shard's, or none applied yet
		}
		if tail, err := l.Tail(ap.Shard); err == nil && binary.BigEndian.Uint64(v[8:]) != tail {
			l.bad.Add(1)
		}
	}
	return nil
}

// Group writes and publishes that apply side by side on shard 0 leave
// every replica able to start again: a group-state entry's write is not
// the shard's applied index (stored with the batches alone), or one
// committed beside a later publish could be stored over that publish's
// (a commit writes its appends before its metadata), and the restarted
// replica would refuse to start on a log longer than its applied index
// says. Slow commits make the two share commits.
func TestReplicatedGroupWritesBesidePublishesSurviveRestarts(t *testing.T) {
	slow := map[uint64]func(storage.Log) storage.Log{}
	var bad atomic.Int64
	for id := uint64(1); id <= 3; id++ {
		slow[id] = func(l storage.Log) storage.Log { return slowCommits{Log: l, bad: &bad} }
	}
	tc := newTestCluster(t, slow)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "mixed", 1)
	lead := tc.leaderOf(name, 0)
	const producers, each = 4, 60
	var wg sync.WaitGroup
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := cc.NewProducer(name, uint64(20+i))
			for j := range each {
				if _, err := p.Publish(ctx, [][]byte{fmt.Appendf(nil, "p%d-%d", i, j)}); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		}()
	}
	c := tc.dial(lead)
	for _, group := range []string{"g1", "g2", "g3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := c.Group(name, group)
			for n := 0; n < producers*each && ctx.Err() == nil; {
				recs, err := g.Poll(ctx, 0, 3, 20*time.Millisecond)
				if err != nil || len(recs) == 0 {
					continue
				}
				if _, err := g.Ack(ctx, recs...); err == nil {
					n += len(recs)
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d commits stored a shard's applied index with a tail other than its log's", n)
	}
	for id := uint64(1); id <= 3; id++ {
		tc.stop(id)
		tc.start(id)
		tc.describeAll(name, fmt.Sprintf("node %d's replica running again", id), func(_ uint64, d StreamDescription) bool {
			return d.Shard[0].Tail == producers*each && d.Shard[0].Leader != 0 && d.Shard[0].Applied > 0
		})
	}
	info, err := tc.dial(tc.leaderOf(name, 0)).Group(name, "g1").Describe(ctx)
	if err != nil || info.Shards[0].Committed != producers*each {
		t.Fatalf("after the restarts the group committed %+v (%v), want %d", info.Shards, err, producers*each)
	}
}

// A traced publish to a replicated shard shows the raft proposal, the
// replication round (with the entry's index) and the apply on the shard's
// leader, between the publish's arrival and the storage commit, in the
// publisher's trace.
func TestTraceOfAReplicatedPublish(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tc := newTestClusterOf(t, nil, func(o *Options) { o.TracerProvider = tp })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, name := tc.replicatedStream(ctx, "traced", 1)
	lead := tc.leaderOf(name, 0)
	c, err := client.Dial(ctx, tc.nodes[lead].Addr(), client.WithCAFile(tc.nodes[lead].CAFile()), client.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mem.Reset()
	if _, err := c.Publish(ctx, name, []byte("traced")); err != nil {
		t.Fatal(err)
	}
	wants := []struct{ name, parent string }{
		{"herald.publish.receive", "publish default/default/traced"},
		{"actor PublishRequest", "herald.publish.receive"},
		{"herald.raft.propose", "actor PublishRequest"},
		{"herald.raft.replicate", "actor PublishRequest"},
		{"herald.raft.apply", "actor PublishRequest"},
		{"herald.storage.commit", "actor AppendRequest"},
		{"actor AppendRequest", "herald.raft.apply"},
	}
	var spans tracetest.SpanStubs
	byName := map[string]tracetest.SpanStub{}
	for deadline := time.Now().Add(10 * time.Second); ; {
		spans = mem.GetSpans()
		clear(byName)
		for _, s := range spans {
			byName[s.Name] = s
		}
		done := true
		for _, w := range wants {
			_, ok := byName[w.name]
			done = done && ok
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans after 10 s: %v", slices.Collect(maps.Keys(byName)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	ids := map[string]string{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID().String()] = s.Name
	}
	for _, w := range wants {
		s := byName[w.name]
		if got := ids[s.Parent.SpanID().String()]; got != w.parent {
			t.Errorf("%q has parent %q, want %q", w.name, got, w.parent)
		}
		if s.SpanContext.TraceID() != byName["herald.publish.receive"].SpanContext.TraceID() {
			t.Errorf("%q is in another trace", w.name)
		}
	}
	// The replication round ends before the apply starts, and carries the
	// entry's raft index, which the apply names too.
	rep, app := byName["herald.raft.replicate"], byName["herald.raft.apply"]
	if rep.EndTime.After(app.StartTime) {
		t.Errorf("the replication round ended at %v, after the apply started at %v", rep.EndTime, app.StartTime)
	}
	index := func(s tracetest.SpanStub) int64 {
		for _, a := range s.Attributes {
			if a.Key == "herald.raft.index" {
				return a.Value.AsInt64()
			}
		}
		return 0
	}
	if index(rep) == 0 || index(rep) != index(app) {
		t.Errorf("raft index %d on the replication round, %d on the apply", index(rep), index(app))
	}
}

// A cluster group deleted right after an ack leaves no key behind: the
// delete lists the group's keys only once the coordinator's last write,
// which may still be on its way through raft when the coordinator stops,
// has applied (a barrier through shard 0); keys that write makes would
// otherwise survive, and a group made later under the name would start
// from them (records settled before it never delivered to it).
func TestReplicatedGroupDeleteLeavesNoKeys(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "gdel", 1)
	p := cc.NewProducer(name, 5)
	publishRecords(t, ctx, p, 0, 20)
	lead := tc.leaderOf(name, 0)
	acker, deleter := tc.dial(lead), tc.dial(lead)
	const rounds = 10
	deleted := map[string]bool{}
	for i := range rounds {
		group := fmt.Sprintf("del-%02d-x", i)
		g := acker.Group(name, group)
		recs, err := g.Poll(ctx, 0, 3, time.Second)
		if err != nil || len(recs) != 3 {
			t.Fatalf("poll %s: %d records, %v", group, len(recs), err)
		}
		acked := make(chan error, 1)
		// An out-of-order ack: its flush puts settled markers ('k') that
		// do not exist yet.
		go func() { _, err := g.Ack(ctx, recs[1], recs[2]); acked <- err }()
		time.Sleep(2 * time.Millisecond) // the ack reaches the coordinator first
		if err := deleter.Group(name, group).Delete(ctx); err != nil {
			t.Logf("delete %s: %v", group, err)
		} else {
			deleted[group] = true
		}
		<-acked
	}
	var applied uint64
	d := tc.describeAll(name, "every replica applied the same", func(_ uint64, d StreamDescription) bool {
		if applied == 0 || d.Shard[0].Applied > applied {
			applied = d.Shard[0].Applied
			return false
		}
		return d.Shard[0].Applied == applied
	})
	id := d[lead].ID
	for _, n := range []uint64{1, 2, 3} {
		tc.stop(n)
	}
	state := tc.groupState(lead, id)
	var left []string
	for group := range deleted {
		marker := string([]byte{byte(len(group))}) + group
		for k := range state {
			if strings.Contains(k, marker) {
				left = append(left, fmt.Sprintf("%s: key %x", group, k))
			}
		}
	}
	if len(left) > 0 {
		t.Fatalf("%d groups deleted OK; keys of them left on node %d: %v", len(deleted), lead, left)
	}
}

// Four nodes, a stream of three replicas: the node that holds no replica
// of shard 0 knows only where its replicas are, and sends the stream's
// group traffic to its preferred one. When that one stops, the node passes
// it over once its relay fails to dial, asks another replica, which names
// the new leader, and sends the group traffic there from then on: its
// clients' group calls are served again.
func TestReplicatedGroupsThroughANodeWithoutShard0WhenItsLeaderStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	addrs, listen := map[uint64]string{}, map[uint64]string{}
	var peers []string
	for id := uint64(1); id <= 4; id++ {
		addrs[id], listen[id] = freeUDP(t), freeUDP(t)
		peers = append(peers, fmt.Sprintf("%d=%s", id, addrs[id]))
	}
	nodes := map[uint64]*Node{}
	for id := uint64(1); id <= 4; id++ {
		nodes[id] = testNode(t, t.TempDir(), func(c *Config, _ *Options) {
			c.NodeID, c.Peers, c.ClusterListen, c.Listen = id, strings.Join(peers, ","), addrs[id], listen[id]
			c.RaftElectionTimeoutMillis = 300
			c.ReplicationTimeoutMillis = 3000
		})
	}
	admin := dialTestClient(t, nodes[1])
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "four"}
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := admin.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true, Replicas: 3})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Wait for shard 0's preferred replica to lead, as its replicas see it.
	var lead, outside uint64
	for deadline := time.Now().Add(30 * time.Second); ; {
		lead, outside = 0, 0
		ok := true
		for id, n := range nodes {
			d, err := n.DescribeStream(ctx, name)
			if err != nil || len(d.Shard) == 0 {
				ok = false
				break
			}
			s0 := d.Shard[0]
			if !slices.Contains(s0.Replicas, id) {
				outside = id
				continue
			}
			if s0.Leader == 0 || s0.Leader != s0.Preferred || (lead != 0 && lead != s0.Leader) {
				ok = false
				break
			}
			lead = s0.Leader
		}
		if ok && lead != 0 && outside != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no preferred leader of shard 0")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("node %d leads shard 0; node %d holds no replica of it", lead, outside)
	if _, err := dialTestClient(t, nodes[lead]).PublishBatch(ctx, name, [][]byte{[]byte("a"), []byte("b"), []byte("c")}); err != nil {
		t.Fatal("publish:", err)
	}
	c := dialTestClient(t, nodes[outside])
	g := c.Group(name, "g")
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	if _, err := g.Poll(pctx, 0, 1, time.Second); err != nil {
		t.Fatalf("poll through node %d before the failover: %v", outside, err)
	}
	pcancel()
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	if err := nodes[lead].Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	delete(nodes, lead)
	start := time.Now()
	var replica uint64
	for id := range nodes {
		if id != outside {
			replica = id
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	if _, err := dialTestClient(t, nodes[replica]).Group(name, "g").Poll(rctx, 0, 1, time.Second); err != nil {
		t.Fatalf("poll through node %d (a replica of shard 0) after the failover: %v", replica, err)
	}
	rcancel()
	t.Logf("a poll through node %d (a replica) was answered %s after the failover", replica, time.Since(start).Round(time.Millisecond))
	pctx, pcancel = context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if _, err := g.Poll(pctx, 0, 1, time.Second); err != nil {
		t.Fatalf("poll through node %d after node %d (shard 0's preferred replica) stopped: %v after %s", outside, lead, err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("poll answered %s after the failover", time.Since(start).Round(time.Millisecond))
}
