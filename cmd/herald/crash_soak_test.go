package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// The crash soak: a real `herald node` on one data dir and one address,
// killed with SIGKILL at random moments while publishers and a consumer
// group work on it through clients dialed once, which reconnect by
// themselves; checked after every restart against what the clients were
// told (the model: crash_soak_model_test.go).

const (
	// crashShards is the soak stream's shard count.
	crashShards = 3
	// crashGroup is the soak's consumer group.
	crashGroup = "soak"
	// crashDefaultKills is how many times the default run kills the node;
	// HERALD_CRASH_KILLS raises it.
	crashDefaultKills = 20
	// crashReadyBound is how long a restarted node may take to accept a
	// connection and answer a describe; longer fails the test as a hang.
	crashReadyBound = 30 * time.Second
	// crashSettleBound is how long, after a restart, the soak's clients may
	// take to reconnect and get an answer to everything they had in
	// flight; longer fails the test as a hang.
	crashSettleBound = time.Minute
	// crashKillDelayMin and crashKillDelayMax bound the random time the
	// node runs under load before it is killed.
	crashKillDelayMin = 30 * time.Millisecond
	crashKillDelayMax = 600 * time.Millisecond
	// crashIdempotentID is the idempotent producer's id.
	crashIdempotentID = 77
	// crashBudgetBase and crashBudgetPerKill make the soak's deadline: a
	// kill takes about 1.5 s, so the budget is generous, but it grows with
	// HERALD_CRASH_KILLS (go test's -timeout must too).
	crashBudgetBase    = 2 * time.Minute
	crashBudgetPerKill = 10 * time.Second
	// crashFullEvery is how often (in kills) the soak re-reads every
	// record it verified; it always does at the end.
	crashFullEvery = 100
	// crashIdleTimeout is the soak clients' WithIdleTimeout: they notice a
	// killed node within about two thirds of it (the minimum the client
	// allows), and then reconnect.
	crashIdleTimeout = time.Second
)

// crashEnv reads an integer from the environment variable name, or returns
// def when it is unset.
func crashEnv(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// crashNode is one run of `herald node` on a data dir that outlives it.
type crashNode struct {
	cmd     *exec.Cmd
	dataDir string
	addr    string
	http    string
	// started is when the process was started.
	started time.Time
	// done is closed once the process has exited.
	done chan struct{}
}

// crashHTTP polls /readyz; no keep-alive, so that a killed node leaves no
// connection goroutine behind.
var crashHTTP = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// startCrashNode starts `herald node` on dataDir, on addresses of its own,
// with its output appended to logFile and env added to its environment,
// and kills it at the end of the test. It does not wait for the node: see
// ready.
func startCrashNode(t *testing.T, dataDir string, logFile *os.File, env ...string) *crashNode {
	t.Helper()
	addr, httpAddr := freePorts(t)
	n := startCrashNodeAt(t, dataDir, addr, httpAddr, logFile, env...)
	t.Cleanup(n.kill)
	return n
}

// startCrashNodeAt starts `herald node` like startCrashNode, listening on
// addr (QUIC) and httpAddr, so that a restarted node is where its clients
// left it. The caller kills it.
func startCrashNodeAt(t *testing.T, dataDir, addr, httpAddr string, logFile *os.File, env ...string) *crashNode {
	t.Helper()
	n := &crashNode{dataDir: dataDir, addr: addr, http: httpAddr, done: make(chan struct{})}
	n.cmd = exec.Command(heraldBinary(t), "node", "--data-dir", dataDir, "--listen", addr, "--http", httpAddr, "--log-level", "warn")
	n.cmd.Env = append(os.Environ(), env...)
	n.cmd.Stdout, n.cmd.Stderr = logFile, logFile
	fmt.Fprintf(logFile, "--- herald node started at %s ---\n", time.Now().Format(time.StampMilli))
	n.started = time.Now()
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = n.cmd.Wait()
		close(n.done)
	}()
	return n
}

// kill sends SIGKILL and waits for the process to be gone. Killing a node
// that has exited is a no-op.
func (n *crashNode) kill() {
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

// ready waits until the node answers /readyz, accepts a connection and, if
// name is not empty, describes name. It returns the connection and how long
// the node took from its start. It fails the test when the node exits or
// takes longer than crashReadyBound.
func (n *crashNode) ready(t *testing.T, name client.StreamName) (*client.Client, time.Duration) {
	t.Helper()
	deadline := n.started.Add(crashReadyBound)
	var lastErr error
	for {
		c, err := n.tryReady(name)
		if err == nil {
			return c, time.Since(n.started)
		}
		lastErr = err
		select {
		case <-n.done:
			t.Fatalf("node exited (%v) before it was ready: %v", n.cmd.ProcessState, lastErr)
		case <-time.After(10 * time.Millisecond): // polling a process's start, not asserting time
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not ready %v after its start: %v", crashReadyBound, lastErr)
		}
	}
}

// tryReady is one attempt of ready.
func (n *crashNode) tryReady(name client.StreamName) (*client.Client, error) {
	resp, err := crashHTTP.Get("http://" + n.http + "/readyz")
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/readyz: %s", resp.Status)
	}
	c, err := n.dialCtx()
	if err != nil {
		return nil, err
	}
	if name != (client.StreamName{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.DescribeStream(ctx, name); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("describe: %w", err)
		}
	}
	return c, nil
}

// dialCtx dials the node with a bounded wait.
func (n *crashNode) dialCtx() (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return client.Dial(ctx, n.addr, client.WithCAFile(filepath.Join(n.dataDir, "tls", "ca.pem")))
}

// crashLog is the node log shared by every run of the node in a test.
func crashLog(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(f.Name()); err == nil {
				if len(b) > 64<<10 {
					b = b[len(b)-64<<10:]
				}
				t.Logf("node log (end):\n%s", b)
			}
		}
		f.Close()
	})
	return f
}

// shardKeys returns a routing key for each of n shards.
func shardKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i, found := 0, 0; found < n; i++ {
		k := []byte(fmt.Sprint("key", i))
		if s := wire.ShardFor(k, uint32(n), wire.RoutingHash); keys[s] == nil {
			keys[s] = k
			found++
		}
	}
	return keys
}

// soakGate holds the soak's workers between two of their operations while
// the soak verifies the node, so that nothing is in flight then and the
// model is still. mu guards every field; cond is signalled whenever one
// changes.
type soakGate struct {
	mu   sync.Mutex
	cond *sync.Cond
	// held: the workers are to wait at the gate; stopped: they are to
	// return.
	held, stopped bool
	// running counts the workers that have not returned, waiting those
	// waiting at the gate.
	running, waiting int
}

func newSoakGate() *soakGate {
	g := &soakGate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// start runs fn as a worker on wg.
func (g *soakGate) start(wg *sync.WaitGroup, fn func()) {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
	wg.Go(func() {
		defer func() {
			g.mu.Lock()
			g.running--
			g.cond.Broadcast()
			g.mu.Unlock()
		}()
		fn()
	})
}

// pass is where a worker stands between two operations, with none of its
// own in flight: it waits while the gate is held, and reports false once
// the workers are to return.
func (g *soakGate) pass() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting++
	g.cond.Broadcast()
	for g.held && !g.stopped {
		g.cond.Wait()
	}
	g.waiting--
	return !g.stopped
}

// holding reports whether the workers are to come to the gate.
func (g *soakGate) holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held || g.stopped
}

// hold makes the workers wait at the gate; release lets them go on; stop
// makes them return.
func (g *soakGate) hold()    { g.set(func() { g.held = true }) }
func (g *soakGate) release() { g.set(func() { g.held = false }) }
func (g *soakGate) stop()    { g.set(func() { g.stopped = true }) }

func (g *soakGate) set(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f()
	g.cond.Broadcast()
}

// settled waits until every worker that has not returned waits at the
// gate, or ctx ends.
func (g *soakGate) settled(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { g.set(func() {}) })
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.waiting < g.running {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d workers at the gate: %w", g.waiting, g.running, err)
		}
		g.cond.Wait()
	}
	return nil
}

// soakConn is one of the soak's clients, dialed once for the whole run,
// and what its connection went through. mu guards the counts.
type soakConn struct {
	role string
	c    *client.Client
	mu   sync.Mutex
	// changed is closed (and replaced) at every event.
	changed chan struct{}
	// lost and back count ConnectionDisconnected and ConnectionReconnected,
	// lostAt and backAt are when the last of each came; closed are the
	// ConnectionClosed events' errors.
	lost, back     int
	lostAt, backAt time.Time
	closed         []error
	// noticed and returned are, per kill, how long after it the client
	// noticed the loss and was connected again.
	noticed, returned []time.Duration
	// task is what the client's worker is doing, for the report of a
	// worker that does not settle.
	task atomic.Pointer[soakTask]
}

// soakTask is one operation of a worker.
type soakTask struct {
	what  string
	since time.Time
}

// dialSoak dials node with a reconnecting client: the soak's idle timeout,
// and attempts soon after a loss (the node restarts at once).
func dialSoak(ctx context.Context, t *testing.T, node *crashNode, role string) *soakConn {
	t.Helper()
	sc := &soakConn{role: role, changed: make(chan struct{})}
	c, err := client.Dial(ctx, node.addr, client.WithCAFile(filepath.Join(node.dataDir, "tls", "ca.pem")),
		client.WithIdleTimeout(crashIdleTimeout),
		client.WithReconnect(client.Reconnect{InitialDelay: 20 * time.Millisecond, MaxDelay: 250 * time.Millisecond}),
		client.WithConnectionEvents(sc.event), client.WithName("crash-soak-"+role))
	if err != nil {
		t.Fatalf("dial %s: %v", role, err)
	}
	sc.c = c
	return sc
}

func (sc *soakConn) event(ev client.ConnectionEvent) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch ev.Kind {
	case client.ConnectionDisconnected:
		sc.lost++
		sc.lostAt = time.Now()
	case client.ConnectionReconnected:
		sc.back++
		sc.backAt = time.Now()
	case client.ConnectionClosed:
		sc.closed = append(sc.closed, ev.Err)
	}
	close(sc.changed)
	sc.changed = make(chan struct{})
}

// counts returns how often the connection was lost and came back so far.
func (sc *soakConn) counts() (lost, back int) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.lost, sc.back
}

// waitFor waits until cond(lost, back) holds, or ctx ends.
func (sc *soakConn) waitFor(ctx context.Context, cond func(lost, back int) bool) bool {
	for {
		sc.mu.Lock()
		ok, changed := cond(sc.lost, sc.back), sc.changed
		sc.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// lostSince reports whether the connection was lost after the client had
// counted lost0 losses, waiting a little for the event: it is delivered on
// a goroutine of the client's, maybe after the call that it failed.
func (sc *soakConn) lostSince(ctx context.Context, lost0 int) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return sc.waitFor(ctx, func(lost, _ int) bool { return lost > lost0 })
}

// doing notes what the client's worker does now.
func (sc *soakConn) doing(what string) { sc.task.Store(&soakTask{what, time.Now()}) }

// soak is one run of the crash soak: its clients, its workers and the
// model they feed.
type soak struct {
	t    *testing.T
	ctx  context.Context
	m    *soakModel
	name client.StreamName
	keys [][]byte
	gate *soakGate
	wg   sync.WaitGroup
	// conns are the workers' clients.
	conns []*soakConn
	// idem is the idempotent producer, on its worker's client.
	idem *client.Producer
	// kills counts the SIGKILLs so far (those while recovering included).
	kills atomic.Int64
	// closing is set when the clients are closed under the workers (the
	// test failed): their errors then are no news.
	closing   atomic.Bool
	closeOnce sync.Once
}

// fail reports a worker's unexpected error (unless the clients are being
// closed under it).
func (s *soak) fail(sc *soakConn, format string, args ...any) {
	if !s.closing.Load() {
		s.t.Errorf("%s: "+format, append([]any{sc.role}, args...)...)
	}
}

// killedSince reports whether a kill happened, or sc lost its connection,
// since kills0 and lost0 were taken; wait also waits a little for a loss
// event still on its way.
func (s *soak) killedSince(sc *soakConn, kills0 int64, lost0 int, wait bool) bool {
	if s.kills.Load() != kills0 {
		return true
	}
	if lost, _ := sc.counts(); lost != lost0 {
		return true
	}
	return wait && sc.lostSince(s.ctx, lost0)
}

// settlePublish notes the outcome of a plain publish of b to shard; it
// returns false if the worker should give up.
func (s *soak) settlePublish(sc *soakConn, shard uint32, b soakBatch, ack client.PublishAck, err error) bool {
	switch {
	case err == nil:
		if ack.Shard != shard || ack.Count != b.n {
			s.m.problem("%s: %v for shard %d acknowledged as %+v", sc.role, b, shard, ack)
		}
		s.m.acked(ack.Shard, ack.Offset, b)
	case errors.Is(err, client.ErrOutcomeUnknown):
		// Written on a connection lost before its ack: stored or not.
		// Nothing re-sends it.
		s.m.inDoubt(shard, b)
	default:
		s.fail(sc, "publish of %v: %v", b, err)
		return false
	}
	return true
}

// publishSingles publishes one record at a time, to random shards.
func (s *soak) publishSingles(sc *soakConn, rng *rand.Rand) {
	for s.gate.pass() {
		shard := uint32(rng.IntN(crashShards))
		b := s.m.next(whoSingle, 1)
		sc.doing("publish " + b.String())
		ack, err := sc.c.Publish(s.ctx, s.name, b.record(0).appendPayload(nil), client.WithKey(s.keys[shard]))
		if !s.settlePublish(sc, shard, b, ack, err) {
			return
		}
	}
}

// publishBatches pipelines batches of 1-8 records, up to 4 unanswered; it
// waits for them all before it stands at the gate.
func (s *soak) publishBatches(sc *soakConn, rng *rand.Rand) {
	type pending struct {
		f     *client.PublishFuture
		shard uint32
		b     soakBatch
	}
	var q []pending
	for {
		if len(q) == 4 || len(q) > 0 && s.gate.holding() {
			p := q[0]
			q = q[1:]
			sc.doing("wait for the ack of " + p.b.String())
			ack, err := p.f.Wait(s.ctx)
			if !s.settlePublish(sc, p.shard, p.b, ack, err) {
				return
			}
			continue
		}
		if len(q) == 0 && !s.gate.pass() {
			return
		}
		shard := uint32(rng.IntN(crashShards))
		b := s.m.next(whoBatch, 1+rng.IntN(crashMaxBatch))
		sc.doing("publish " + b.String())
		f, err := sc.c.PublishAsync(s.ctx, s.name, b.payloads(), client.WithKey(s.keys[shard]))
		if err != nil {
			s.fail(sc, "publish async of %v: %v", b, err)
			return
		}
		q = append(q, pending{f, shard, b})
	}
}

// publishIdempotent publishes with the idempotent producer p, single
// records and batches, and now and then re-sends its last batch on purpose,
// which must come back as a duplicate at the original offsets. Its client
// re-sends a batch in flight at a kill by itself: Publish does not fail.
func (s *soak) publishIdempotent(sc *soakConn, p *client.Producer, rng *rand.Rand) {
	for s.gate.pass() {
		shard := uint32(rng.IntN(crashShards))
		if rng.IntN(8) == 0 {
			if last := s.m.idemLastOf(shard); last.ok {
				sc.doing("re-send " + last.batch.String())
				if err := s.resendIdem(p, shard, last); err != nil {
					s.fail(sc, "%v", err)
					return
				}
				continue
			}
		}
		n := 1
		if rng.IntN(2) == 0 {
			n = 2 + rng.IntN(crashMaxBatch-1)
		}
		b := s.m.next(whoIdem, n)
		kills0 := s.kills.Load()
		lost0, _ := sc.counts()
		sc.doing("publish " + b.String())
		ack, err := p.Publish(s.ctx, b.payloads(), client.WithKey(s.keys[shard]))
		if err != nil {
			s.fail(sc, "idempotent publish of %v: %v", b, err)
			return
		}
		if ack.Shard != shard || ack.Count != n {
			s.m.problem("%s: %v for shard %d acknowledged as %+v", sc.role, b, shard, ack)
		}
		killed := s.killedSince(sc, kills0, lost0, ack.Duplicate)
		s.m.idemAcked(ack.Shard, ack.Offset, p.Sequence(ack.Shard), b, ack.Duplicate, killed)
	}
}

// resendIdem re-sends the idempotent producer's last acknowledged batch on
// shard: a duplicate at its offset, nothing written.
func (s *soak) resendIdem(p *client.Producer, shard uint32, last idemLast) error {
	ack, err := p.PublishSequence(s.ctx, last.seq, last.batch.payloads(), client.WithKey(s.keys[shard]))
	if err != nil {
		return fmt.Errorf("idempotent re-send of sequence %d (%v): %w", last.seq, last.batch, err)
	}
	if !ack.Duplicate || ack.Shard != shard || ack.Offset != last.offset {
		s.m.problem("re-send of sequence %d (%v) of shard %d, written at %d: ack %+v, want a duplicate there",
			last.seq, last.batch, shard, last.offset, ack)
	}
	s.m.count(func(st *soakStats) { st.idemResent++ })
	return nil
}

// consumeGroup polls the group on each shard in turn and acks everything it
// gets at once.
func (s *soak) consumeGroup(sc *soakConn) {
	g := sc.c.Group(s.name, crashGroup)
	var scratch []byte
	for shard := uint32(0); s.gate.pass(); shard = (shard + 1) % crashShards {
		kills0 := s.kills.Load()
		lost0, _ := sc.counts()
		sc.doing(fmt.Sprintf("poll shard %d", shard))
		recs, err := g.Poll(s.ctx, shard, 64, 20*time.Millisecond)
		switch {
		case err == nil:
		case errors.Is(err, client.ErrOutcomeUnknown):
			// What it claimed is delivered again.
			s.m.count(func(st *soakStats) { st.groupPollDoubt++ })
			continue
		default:
			s.fail(sc, "group poll: %v", err)
			return
		}
		if len(recs) == 0 {
			continue
		}
		offsets := make([]uint64, len(recs))
		for i, r := range recs {
			offsets[i] = r.Offset
			scratch = s.m.delivered(shard, r.Offset, r.Payload, scratch)
		}
		sc.doing(fmt.Sprintf("ack %d records of shard %d", len(offsets), shard))
		_, err = g.AckOffsets(s.ctx, shard, offsets...)
		switch {
		case err == nil:
			s.m.groupAcked(shard, offsets)
		case errors.Is(err, client.ErrOutcomeUnknown):
			s.m.groupInDoubt(shard, offsets)
		case errors.Is(err, client.ErrNotDelivered) && s.killedSince(sc, kills0, lost0, true):
			// Polled from the node before a kill, acked at the restarted
			// one, which has not delivered them yet: it will.
			s.m.count(func(st *soakStats) { st.groupNotDelivered++ })
		default:
			s.fail(sc, "group ack: %v", err)
			return
		}
	}
}

// readRange reads shard's records [from, to) in pages and hands each to fn,
// in offset order.
func readRange(ctx context.Context, t *testing.T, c *client.Client, name client.StreamName, shard uint32, from, to uint64, fn func(off uint64, payload []byte)) {
	t.Helper()
	for next := from; next < to; {
		page, err := c.Read(ctx, name, shard, next, to)
		if err != nil {
			t.Fatalf("read shard %d from %d (to %d): %v", shard, next, to, err)
		}
		if len(page.Records) == 0 {
			t.Fatalf("read shard %d from %d (to %d): an empty page, next %d", shard, next, to, page.Next)
		}
		for _, r := range page.Records {
			if r.Offset != next {
				t.Fatalf("read shard %d: offset %d where %d was due", shard, r.Offset, next)
			}
			fn(r.Offset, r.Payload)
			next++
		}
	}
}

// readShard reads shard's records [0, tail) and returns their payloads by
// offset.
func readShard(ctx context.Context, t *testing.T, c *client.Client, name client.StreamName, shard uint32, tail uint64) []string {
	t.Helper()
	out := make([]string, 0, tail)
	readRange(ctx, t, c, name, shard, 0, tail, func(_ uint64, payload []byte) { out = append(out, string(payload)) })
	return out
}

// begin begins the verification after kill through c, with every worker at
// the gate (so nothing is in flight): it takes the shards' tails and the
// group's cursors and checks the cursors, re-sends the idempotent
// producer's last batches, and hands the model's pending state to the
// verification it returns, whose reads (read) may run under load. See
// TestCrashSoak for what is checked when.
func (s *soak) begin(c *client.Client, kill int) *soakCheck {
	t, ctx := s.t, s.ctx
	t.Helper()
	info, err := c.DescribeStream(ctx, s.name)
	if err != nil {
		t.Fatalf("after kill %d: describe: %v", kill, err)
	}
	committed := make([]uint64, crashShards)
	g, err := c.Group(s.name, crashGroup).Describe(ctx)
	switch {
	case errors.Is(err, client.ErrGroupNotFound):
		// Its first use did not outlive the kill: nothing may have been
		// acked then.
	case err != nil:
		t.Fatalf("after kill %d: describe group: %v", kill, err)
	default:
		for _, sh := range g.Shards {
			committed[sh.Shard] = sh.Committed
		}
	}
	s.m.checkGroup(kill, committed, info.Tails)

	// The producer's last batch on each shard is remembered across the
	// crash: a re-send is a duplicate at the original offsets. (Only while
	// the producer is still: the node answers a re-send of an earlier batch
	// than the last with ErrDuplicateSequence.)
	for shard := range uint32(crashShards) {
		if last := s.m.idemLastOf(shard); last.ok {
			if err := s.resendIdem(s.idem, shard, last); err != nil {
				t.Fatalf("after kill %d: %v", kill, err)
			}
		}
	}
	return s.m.check(kill, info.Tails)
}

// read does v's reads through c: each shard's new records, the deliveries
// to read again, and the records verified earlier (all of them if full,
// else a sampled segment per shard). It returns the records the stream
// held when v began.
func (s *soak) read(c *client.Client, v *soakCheck, full bool, sample *rand.Rand) uint64 {
	t, ctx := s.t, s.ctx
	t.Helper()
	var stored uint64
	for shard, sc := range v.shards {
		from, to := sc.span()
		readRange(ctx, t, c, s.name, uint32(shard), from, to, sc.record)
		sc.finish()
		stored += to
	}
	for shard := range uint32(crashShards) {
		for _, r := range v.readBackRanges(shard) {
			readRange(ctx, t, c, s.name, shard, r[0], r[1], func(off uint64, payload []byte) { v.readBackRecord(shard, off, payload) })
		}
	}
	v.end()

	// Records verified earlier are still there, unchanged.
	for shard := range uint32(crashShards) {
		segs, verified := s.m.segments(shard)
		switch {
		case full:
			r := s.m.reread(v.kill, shard, 0)
			readRange(ctx, t, c, s.name, shard, 0, verified, r.record)
			r.finish()
		case segs > 0:
			seg := sample.IntN(segs)
			r := s.m.reread(v.kill, shard, seg)
			readRange(ctx, t, c, s.name, shard, uint64(seg)*crashSegment, uint64(seg+1)*crashSegment, r.record)
		}
	}
	return stored
}

// check fails the test with the problems the model found, if any.
func (s *soak) check(when string) {
	s.t.Helper()
	problems, more := s.m.takeProblems()
	for _, p := range problems {
		s.t.Error(p)
	}
	if more > 0 {
		s.t.Errorf("and %d more problems", more)
	}
	if s.t.Failed() {
		s.t.Fatalf("%s: stopping", when)
	}
}

// settle waits, after a restart, until every client is connected again
// (after losing its connection since lost0, at the kill at killedAt) and
// every worker waits at the gate with nothing in flight.
func (s *soak) settle(kill int, killedAt time.Time, lost0 []int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, crashSettleBound)
	defer cancel()
	for i, sc := range s.conns {
		if !sc.waitFor(ctx, func(lost, back int) bool { return lost > lost0[i] && back == lost }) {
			lost, back := sc.counts()
			s.t.Fatalf("after kill %d: the %s client is not back after %v (%d losses, %d reconnects)", kill, sc.role, crashSettleBound, lost, back)
		}
		sc.mu.Lock()
		sc.noticed = append(sc.noticed, sc.lostAt.Sub(killedAt))
		sc.returned = append(sc.returned, sc.backAt.Sub(killedAt))
		sc.mu.Unlock()
	}
	if err := s.gate.settled(ctx); err != nil {
		for _, sc := range s.conns {
			if task := sc.task.Load(); task != nil {
				s.t.Logf("%s: %s, since %v", sc.role, task.what, time.Since(task.since).Round(time.Millisecond))
			}
		}
		s.t.Fatalf("after kill %d: the workers did not settle: %v", kill, err)
	}
}

// shutdown stops the workers and closes the clients; once.
func (s *soak) shutdown() {
	s.closeOnce.Do(func() {
		s.gate.stop()
		s.closing.Store(true)
		for _, sc := range s.conns {
			_ = sc.c.Close()
		}
		s.wg.Wait()
	})
}

// heapAlloc returns the test process's live heap, after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// percentile returns the p-th percentile (0-100) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// mib formats n bytes in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Kill -9 a node again and again under acked durable publishing (single
// records, pipelined batches and an idempotent producer) and consumer-group
// consumption, each on its own client dialed once, which reconnects by
// itself to the node restarted on the same address and data dir. The run
// lasts HERALD_CRASH_KILLS kills (20 by default); HERALD_CRASH_SEED replays
// its schedule. Its deadline is crashBudgetBase plus crashBudgetPerKill per
// kill (within go test's -timeout).
//
// After each kill, the soak restarts the node (now and then killing it once
// more while it recovers), times it from its start until it answers a
// connection and a describe, and holds the workers at a gate until every
// client is back and everything in flight is answered. Then, with nothing in
// flight, it takes the shards' tails and checks
//   - each group cursor: not below what was acked, not past an offset never
//     acked, nor past the tail (so it never goes backwards);
//   - the idempotent producer's last batch per shard: a re-send is a
//     duplicate at its offset;
//
// and lets the workers go on. Until the next kill, while they work, it
// reads and checks (the records below those tails no longer change):
//   - the records new since the last check, per shard from its verified
//     tail to the tail taken, each read once: the tail is not below the
//     verified tail; every batch acknowledged since is at its offset,
//     whole, with its payloads; a publish that failed with
//     ErrOutcomeUnknown is stored whole, once, or not at all; nothing else
//     is stored (a second copy, a re-sent idempotent batch written again, a
//     record no publisher wrote); the group delivered every record it
//     delivered as it is stored (read again if it is below the verified
//     tail), never past the tail;
//   - that the records verified earlier did not change: one random segment
//     of crashSegment records per shard, compared with the checksum taken
//     when it was verified, and every verified record every crashFullEvery
//     kills and at the end.
//
// Throughout, the idempotent producer's publishes never fail (its client
// re-sends a batch in flight at a kill), and a fresh sequence is answered
// as a duplicate only across a lost connection; plain publishes are never
// re-sent by the test. The model keeps no payloads (they derive from the
// records' identities) and drops what it verified, so its memory stays
// flat; the log says how the heap went.
func TestCrashSoak(t *testing.T) {
	seed := uint64(crashEnv(t, "HERALD_CRASH_SEED", time.Now().UnixNano()))
	kills := int(crashEnv(t, "HERALD_CRASH_KILLS", crashDefaultKills))
	budget := crashBudgetBase + time.Duration(kills)*crashBudgetPerKill
	deadline := time.Now().Add(budget)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
		t.Logf("go test's -timeout cuts the soak's budget of %v to %v", budget, time.Until(deadline).Round(time.Second))
	}
	t.Logf("seed %d (HERALD_CRASH_SEED=%d replays the kill schedule), %d kills, until %s", seed, seed, kills, deadline.Format(time.TimeOnly))
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sample := rand.New(rand.NewPCG(seed, 7))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	dir := t.TempDir()
	logFile := crashLog(t)
	addr, httpAddr := freePorts(t)
	// Attempts never run out, so a record is settled only by an ack.
	env := []string{"HERALD_GROUP_MAX_ATTEMPTS=1000000"}
	s := &soak{t: t, ctx: ctx, m: newSoakModel(), keys: shardKeys(crashShards), gate: newSoakGate(),
		name: client.StreamName{Tenant: "acme", Namespace: "crash", Stream: "soak"}}

	node := startCrashNodeAt(t, dir, addr, httpAddr, logFile, env...)
	t.Cleanup(func() { node.kill() })
	c, _ := node.ready(t, client.StreamName{})
	if _, err := c.CreateStream(ctx, s.name, client.StreamConfig{Shards: crashShards, Durable: true}); err != nil {
		t.Fatal(err)
	}
	// The group comes into being on its first poll (of an empty shard:
	// nothing is claimed).
	if _, err := c.Group(s.name, crashGroup).Poll(ctx, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()

	single, batch, idem, group := dialSoak(ctx, t, node, "single"), dialSoak(ctx, t, node, "batch"),
		dialSoak(ctx, t, node, "idempotent"), dialSoak(ctx, t, node, "group")
	s.conns = []*soakConn{single, batch, idem, group}
	s.idem = idem.c.NewProducer(s.name, crashIdempotentID)
	t.Cleanup(s.shutdown)
	heapStart := heapAlloc()
	heapMax := heapStart
	began := time.Now()
	var seeds [4]uint64
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	s.gate.start(&s.wg, func() { s.publishSingles(single, rand.New(rand.NewPCG(seeds[0], 1))) })
	s.gate.start(&s.wg, func() { s.publishBatches(batch, rand.New(rand.NewPCG(seeds[1], 2))) })
	s.gate.start(&s.wg, func() { s.publishIdempotent(idem, s.idem, rand.New(rand.NewPCG(seeds[2], 3))) })
	s.gate.start(&s.wg, func() { s.consumeGroup(group) })

	var readyTimes, settleTimes []time.Duration
	var still, reading time.Duration
	startKills := 0
	lost0 := make([]int, len(s.conns))
	// pending is the last kill's verification, whose reads run while the
	// node is under load until the next kill; probe is its connection.
	var pending *soakCheck
	var probe *client.Client
	finish := func(full bool) {
		start := time.Now()
		s.read(probe, pending, full, sample)
		reading += time.Since(start)
		_ = probe.Close()
		s.check(fmt.Sprintf("after kill %d", pending.kill))
		pending = nil
	}
	for kill := 1; kill <= kills; kill++ {
		delay := crashKillDelayMin + time.Duration(rng.Int64N(int64(crashKillDelayMax-crashKillDelayMin)))
		killAt := time.Now().Add(delay) // the random kill moment
		if pending != nil {
			finish((kill-1)%crashFullEvery == 0)
		}
		select {
		case <-time.After(time.Until(killAt)):
		case <-node.done:
			t.Fatalf("kill %d: node exited by itself (%v)", kill, node.cmd.ProcessState)
		}
		for i, sc := range s.conns {
			lost0[i], _ = sc.counts()
		}
		node.kill()
		killedAt := time.Now()
		s.kills.Add(1)
		s.gate.hold()
		fmt.Fprintf(logFile, "--- killed (kill %d) at %s ---\n", kill, killedAt.Format(time.StampMilli))
		// Now and then the node is killed again while it recovers.
		if rng.IntN(5) == 0 {
			node = startCrashNodeAt(t, dir, addr, httpAddr, logFile, env...)
			select {
			case <-node.done:
				t.Fatalf("kill %d: node exited by itself (%v) while it recovered", kill, node.cmd.ProcessState)
			case <-time.After(time.Duration(rng.IntN(300)) * time.Millisecond): // the random kill moment
			}
			node.kill()
			s.kills.Add(1)
			startKills++
			fmt.Fprintf(logFile, "--- killed while recovering (kill %d) ---\n", kill)
		}
		node = startCrashNodeAt(t, dir, addr, httpAddr, logFile, env...)
		// The probe's connection checks the node (a client of the
		// workers' would notice the kill only after its idle timeout).
		var took time.Duration
		probe, took = node.ready(t, s.name)
		readyTimes = append(readyTimes, took)
		s.settle(kill, killedAt, lost0)
		settleTimes = append(settleTimes, time.Since(killedAt))
		start := time.Now()
		pending = s.begin(probe, kill)
		still += time.Since(start)
		if kill%crashFullEvery == 0 {
			// Sampled with the workers held: nothing in flight, as at the
			// start and the end.
			h := heapAlloc()
			heapMax = max(heapMax, h)
			t.Logf("kill %d: %v, heap %s", kill, time.Since(began).Round(time.Second), mib(h))
		}
		s.gate.release()
	}
	if pending != nil {
		finish(kills%crashFullEvery == 0)
	}

	// The end: the workers finish what they have in flight on the live
	// node and return; everything is checked once more, all of it read
	// again.
	s.gate.stop()
	s.wg.Wait()
	start := time.Now()
	c, err := node.dialCtx()
	if err != nil {
		t.Fatal(err)
	}
	stored := s.read(c, s.begin(c, kills), true, sample)
	_ = c.Close()
	reading += time.Since(start)
	s.check("at the end")
	heapEnd := heapAlloc()
	heapMax = max(heapMax, heapEnd)
	took := time.Since(began)
	for _, sc := range s.conns {
		lost, back := sc.counts()
		sc.mu.Lock()
		t.Logf("%s client: %d connections lost, %d reconnects; after a kill it noticed the loss within p50 %v, max %v, and was back within p50 %v, max %v",
			sc.role, lost, back, percentile(sc.noticed, 50).Round(time.Millisecond), percentile(sc.noticed, 100).Round(time.Millisecond),
			percentile(sc.returned, 50).Round(time.Millisecond), percentile(sc.returned, 100).Round(time.Millisecond))
		if len(sc.closed) > 0 || lost < kills || back != lost {
			t.Errorf("%s client: %d losses and %d reconnects over %d kills, closed %v; want a loss and a reconnect for each kill, never closed",
				sc.role, lost, back, kills, sc.closed)
		}
		sc.mu.Unlock()
	}
	s.shutdown()
	node.kill()

	st, sure := s.m.summary()
	t.Logf("%d kills under load (%d more while recovering) in %.1f min: %d records acked in %d batches, %d lost, %d duplicated; the stream holds %d records",
		kills, startKills, took.Minutes(), st.ackedRecords, st.ackedBatches, st.lost, st.duplicated, stored)
	if len(readyTimes) > 0 {
		t.Logf("restart to ready (a connection and a describe answered): p50 %v, max %v over %d restarts; kill to settled (clients back, everything in flight answered): p50 %v, max %v",
			percentile(readyTimes, 50).Round(time.Millisecond), percentile(readyTimes, 100).Round(time.Millisecond), len(readyTimes),
			percentile(settleTimes, 50).Round(time.Millisecond), percentile(settleTimes, 100).Round(time.Millisecond))
	}
	t.Logf("plain publishes: %d batches failed with ErrOutcomeUnknown (in flight at a kill), %d of them were stored", st.doubtBatches, st.doubtLanded)
	t.Logf("idempotent producer: %d re-sends answered as duplicates; of the batches in flight at a kill, %d were answered as duplicates (stored before it), %d written after it",
		st.idemResent, st.idemKillDuplicate, st.idemKillWritten)
	t.Logf("group: %d records delivered (%d checked by reading them again), %d acks answered, %d in doubt, %d refused after a kill as not delivered yet, %d polls in doubt; %d records settled in order",
		st.groupDelivered, st.groupReadBack, st.groupAcks, st.groupAckDoubt, st.groupNotDelivered, st.groupPollDoubt, sure)
	t.Logf("checking: %d records verified once each, %d read again; %v with the workers held, %v of reads under load",
		st.verifiedRecords, st.rereadRecords, still.Round(time.Millisecond), reading.Round(time.Millisecond))
	t.Logf("heap after GC, nothing in flight: %s at the start, %s at most (every %d kills), %s at the end", mib(heapStart), mib(heapMax), crashFullEvery, mib(heapEnd))
}

// flipOnDisk inverts one byte in the middle of marker in the one file of
// dir that holds it, and returns the file's name. It reads the files in
// chunks and writes the one byte: Badger's files are large and mostly
// sparse.
func flipOnDisk(t *testing.T, dir string, marker []byte) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	found := ""
	for _, e := range entries {
		at := indexInFile(t, filepath.Join(dir, e.Name()), marker)
		if at < 0 {
			continue
		}
		if found != "" {
			t.Fatalf("%.16q is in %s and in %s", marker, found, e.Name())
		}
		found = e.Name()
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{marker[len(marker)/2] ^ 0xff}
		if _, err := f.WriteAt(b, at+int64(len(marker)/2)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if found == "" {
		t.Fatalf("%.16q is in no file of %s", marker, dir)
	}
	return found
}

// indexInFile returns the position of the first marker in the file at path,
// or -1.
func indexInFile(t *testing.T, path string, marker []byte) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20+len(marker))
	for off := int64(0); ; off += 1 << 20 {
		n, err := f.ReadAt(buf, off)
		if i := bytes.Index(buf[:n], marker); i >= 0 {
			return off + int64(i)
		}
		if err != nil {
			return -1 // io.EOF, or a file that went away
		}
	}
}

// readAllPayloads reads shard's records from 0 to its tail.
func readAllPayloads(ctx context.Context, t *testing.T, c *client.Client, name client.StreamName, shard uint32) []string {
	t.Helper()
	info, err := c.DescribeStream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return readShard(ctx, t, c, name, shard, info.Tails[shard])
}

// The last batch of a shard, damaged on disk while the node was down (a
// byte flipped in Badger's value log, where batches of 1 KiB or more live),
// is found by its checksum when the node recovers the shard's tail: it is
// cut off the log (and logged), never served, and the shard goes on from
// the batch before it. The idempotent producer that wrote it is not told
// it is there: a re-send of its sequence writes it again. The crash also
// left empty write-ahead and value log files behind (as a kill -9 while
// Badger creates one does), which the node must get past.
func TestCrashCorruptTail(t *testing.T) {
	dir := t.TempDir()
	logFile := crashLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := client.StreamName{Tenant: "acme", Namespace: "crash", Stream: "torn"}
	keys := shardKeys(2)
	payload := func(tag string) []byte { return append([]byte(tag+":"), bytes.Repeat([]byte(tag), 2048/len(tag))...) }

	node := startCrashNode(t, dir, logFile)
	c, _ := node.ready(t, client.StreamName{})
	defer c.Close()
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishBatch(ctx, name, [][]byte{payload("other-0")}, client.WithKey(keys[1])); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(name, 5)
	batches := [][][]byte{
		{payload("idem-1a"), payload("idem-1b")},
		{payload("idem-2")},
		{payload("torn-3a"), payload("torn-3b"), payload("torn-3c")}, // the last write of all
	}
	var acks []client.PublishAck
	for _, b := range batches {
		ack, err := p.Publish(ctx, b, client.WithKey(keys[0]))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	_ = c.Close()
	node.kill()

	badgerDir := filepath.Join(dir, "badger")
	file := flipOnDisk(t, badgerDir, batches[2][1])
	t.Logf("flipped a byte of the last batch in %s", file)
	for _, f := range []string{"09999.mem", "009999.vlog"} {
		if err := os.WriteFile(filepath.Join(badgerDir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	node = startCrashNode(t, dir, logFile)
	c, took := node.ready(t, name)
	defer c.Close()
	t.Logf("ready %v after the restart", took.Round(time.Millisecond))
	torn := acks[2].Offset
	got := readAllPayloads(ctx, t, c, name, 0)
	if uint64(len(got)) != torn {
		t.Fatalf("shard 0 holds %d records after recovery, want %d (up to the damaged batch)", len(got), torn)
	}
	for i, b := range batches[:2] {
		for j, want := range b {
			if off := acks[i].Offset + uint64(j); got[off] != string(want) {
				t.Fatalf("offset %d holds %.20q, want %.20q", off, got[off], want)
			}
		}
	}
	if other := readAllPayloads(ctx, t, c, name, 1); len(other) != 1 || other[0] != string(payload("other-0")) {
		t.Fatalf("shard 1 holds %d records after recovery, want its one intact record", len(other))
	}
	logged, err := os.ReadFile(logFile.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"truncated corrupt batch", "empty log files", "batches past the recovered tail are forgotten"} {
		if !bytes.Contains(logged, []byte(want)) {
			t.Fatalf("the node did not log %q; log:\n%s", want, logged)
		}
	}

	// The producer re-sends its last batch: it is written again, at the
	// recovered tail, not answered as a duplicate of the batch cut off.
	p = c.NewProducer(name, 5)
	p.SetSequence(0, 3)
	ack, err := p.PublishSequence(ctx, 3, batches[2], client.WithKey(keys[0]))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate || ack.Offset != torn {
		t.Fatalf("re-send of the cut-off sequence 3: %+v, want it written at %d", ack, torn)
	}
	// The batches before it are still known.
	if ack, err := p.PublishSequence(ctx, 2, batches[1], client.WithKey(keys[0])); err != nil || !ack.Duplicate || ack.Offset != acks[1].Offset {
		t.Fatalf("re-send of sequence 2: %+v, %v; want a duplicate at %d", ack, err, acks[1].Offset)
	}
	if ack, err := p.Publish(ctx, [][]byte{payload("idem-4")}, client.WithKey(keys[0])); err != nil || ack.Duplicate || ack.Offset != torn+3 {
		t.Fatalf("sequence 4: %+v, %v; want it written at %d", ack, err, torn+3)
	}
	got = readAllPayloads(ctx, t, c, name, 0)
	want := []string{string(batches[2][0]), string(batches[2][1]), string(batches[2][2]), string(payload("idem-4"))}
	if !slices.Equal(got[torn:], want) {
		t.Fatalf("shard 0 from %d holds %d records, not the re-sent batch and the next one", torn, len(got[torn:]))
	}
}

// A batch damaged on disk in the middle of a shard's log (in a value log
// file the node no longer writes to) is not cut off: the tail stays, a read
// that reaches the batch fails with storage_failure instead of serving it,
// and the records around it read as usual.
func TestCrashCorruptMiddle(t *testing.T) {
	dir := t.TempDir()
	logFile := crashLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := client.StreamName{Tenant: "acme", Namespace: "crash", Stream: "middle"}
	payload := func(tag string) []byte { return append([]byte(tag+":"), bytes.Repeat([]byte(tag), 2048/len(tag))...) }

	node := startCrashNode(t, dir, logFile)
	c, _ := node.ready(t, client.StreamName{})
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"first", "damaged"} {
		if _, err := c.Publish(ctx, name, payload(tag)); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	node.kill()
	// Badger starts a new value log file on every start.
	node = startCrashNode(t, dir, logFile)
	c, _ = node.ready(t, name)
	for _, tag := range []string{"third", "fourth"} {
		if _, err := c.Publish(ctx, name, payload(tag)); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	node.kill()
	file := flipOnDisk(t, filepath.Join(dir, "badger"), payload("damaged"))
	t.Logf("flipped a byte of offset 1 in %s", file)

	node = startCrashNode(t, dir, logFile)
	c, _ = node.ready(t, name)
	defer c.Close()
	info, err := c.DescribeStream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info.Tails[0] != 4 {
		t.Fatalf("tail %d after recovery, want 4", info.Tails[0])
	}
	for _, from := range []uint64{0, 1} {
		if page, err := c.Read(ctx, name, 0, from, client.ReadToTail); !errors.Is(err, client.ErrStorageFailure) {
			t.Fatalf("read from %d: %d records, %v; want ErrStorageFailure", from, len(page.Records), err)
		}
	}
	page, err := c.Read(ctx, name, 0, 0, 1)
	if err != nil || len(page.Records) != 1 || string(page.Records[0].Payload) != string(payload("first")) {
		t.Fatalf("read of offset 0: %d records, %v", len(page.Records), err)
	}
	page, err = c.Read(ctx, name, 0, 2, client.ReadToTail)
	if err != nil || len(page.Records) != 2 || string(page.Records[1].Payload) != string(payload("fourth")) {
		t.Fatalf("read from offset 2: %d records, %v", len(page.Records), err)
	}
}
