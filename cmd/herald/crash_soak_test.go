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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// The crash soak: a real `herald node` on one data dir, killed with SIGKILL
// at random moments while publishers and a consumer group work on it, and
// checked after every restart against what the clients were told.

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
	// crashKillDelayMin and crashKillDelayMax bound the random time the
	// node runs under load before it is killed.
	crashKillDelayMin = 30 * time.Millisecond
	crashKillDelayMax = 600 * time.Millisecond
	// crashIdempotentID is the idempotent producer's id.
	crashIdempotentID = 77
	// crashBudgetBase and crashBudgetPerKill make the soak's deadline, so
	// that it grows with HERALD_CRASH_KILLS (go test's -timeout must too).
	crashBudgetBase    = 2 * time.Minute
	crashBudgetPerKill = 10 * time.Second
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

// startCrashNode starts `herald node` on dataDir with its output appended to
// logFile and env added to its environment. It does not wait for the node:
// see ready.
func startCrashNode(t *testing.T, dataDir string, logFile *os.File, env ...string) *crashNode {
	t.Helper()
	addr, httpAddr := freePorts(t)
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
	t.Cleanup(n.kill)
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

// dial dials the node or fails the test; the connection is closed at the
// end of the test at the latest.
func (n *crashNode) dial(t *testing.T) *client.Client {
	t.Helper()
	c, err := n.dialCtx()
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
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

// idemBatch is one batch of the idempotent producer.
type idemBatch struct {
	key      []byte
	shard    uint32
	seq      uint64
	payloads [][]byte
	// offset is where the batch was written (once acked).
	offset uint64
}

// soakModel is what the clients were told, across every run of the node.
type soakModel struct {
	name client.StreamName
	keys [][]byte

	mu sync.Mutex
	// acked holds every acknowledged record: shard -> offset -> payload.
	acked [crashShards]map[uint64]string
	// idemLast is the idempotent producer's last acknowledged batch per
	// shard.
	idemLast map[uint32]idemBatch
	// idemSeq is the idempotent producer's last sequence used per shard.
	idemSeq map[uint32]uint64
	// idemDoubt are idempotent batches whose outcome is unknown (in flight
	// at a kill), to be re-sent after the restart.
	idemDoubt []idemBatch
	// delivered is what the group delivered: shard -> offset -> payload.
	delivered [crashShards]map[uint64]string
	// groupAcked are the offsets whose group ack succeeded, per shard.
	groupAcked [crashShards]map[uint64]bool
	// groupDoubt are offsets whose group ack failed at a kill (outcome
	// unknown), per shard.
	groupDoubt [crashShards]map[uint64]bool

	// Counts, for the log.
	ackedBatches, idemResent, idemDuplicates, idemRewritten, groupAcks int
}

func newSoakModel(name client.StreamName) *soakModel {
	m := &soakModel{name: name, keys: shardKeys(crashShards), idemLast: map[uint32]idemBatch{}, idemSeq: map[uint32]uint64{}}
	for s := range crashShards {
		m.acked[s] = map[uint64]string{}
		m.delivered[s] = map[uint64]string{}
		m.groupAcked[s] = map[uint64]bool{}
		m.groupDoubt[s] = map[uint64]bool{}
	}
	return m
}

// recordAck notes an acknowledged batch.
func (m *soakModel) recordAck(shard uint32, offset uint64, payloads [][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ackedBatches++
	for j, p := range payloads {
		m.acked[shard][offset+uint64(j)] = string(p)
	}
}

// soakPayloads returns n unique payloads; some batches are padded past Badger's
// value threshold so that both the LSM tree and the value log hold batches.
func soakPayloads(rng *rand.Rand, kill int, who string, seq *int, n int) [][]byte {
	pad := ""
	if rng.IntN(3) == 0 {
		pad = strings.Repeat(".", 100+rng.IntN(200))
	}
	out := make([][]byte, n)
	for j := range out {
		*seq++
		out[j] = fmt.Appendf(nil, "%s-k%d-%d%s", who, kill, *seq, pad)
	}
	return out
}

// cycle is one run of the node under load, until its kill.
type cycle struct {
	t      *testing.T
	m      *soakModel
	kill   int
	ctx    context.Context
	killed atomic.Bool
}

// unexpected reports a failure that is not the kill's doing (nor, in the
// last run, the stop's).
func (cy *cycle) unexpected(format string, args ...any) {
	if !cy.killed.Load() {
		cy.t.Errorf("kill %d: "+format, append([]any{cy.kill}, args...)...)
	}
}

// publishSingles publishes one record at a time, to random shards.
func (cy *cycle) publishSingles(c *client.Client, rng *rand.Rand) {
	seq := 0
	for cy.ctx.Err() == nil {
		p := soakPayloads(rng, cy.kill, "single", &seq, 1)
		ack, err := c.Publish(cy.ctx, cy.m.name, p[0], client.WithKey(cy.m.keys[rng.IntN(crashShards)]))
		if err != nil {
			cy.unexpected("publish: %v", err)
			return
		}
		cy.m.recordAck(ack.Shard, ack.Offset, p)
	}
}

// publishBatches pipelines batches of 1-8 records, up to 4 unanswered.
func (cy *cycle) publishBatches(c *client.Client, rng *rand.Rand) {
	type pending struct {
		f        *client.PublishFuture
		payloads [][]byte
	}
	futures := make(chan pending, 4)
	go func() {
		defer close(futures)
		seq := 0
		for cy.ctx.Err() == nil {
			p := soakPayloads(rng, cy.kill, "batch", &seq, 1+rng.IntN(8))
			f, err := c.PublishAsync(cy.ctx, cy.m.name, p, client.WithKey(cy.m.keys[rng.IntN(crashShards)]))
			if err != nil {
				cy.unexpected("publish async: %v", err)
				return
			}
			futures <- pending{f, p}
		}
	}()
	for p := range futures {
		ack, err := p.f.Wait(cy.ctx)
		if err != nil {
			cy.unexpected("publish async ack: %v", err)
			continue // in flight at the kill: outcome unknown
		}
		cy.m.recordAck(ack.Shard, ack.Offset, p.payloads)
	}
}

// publishIdempotent publishes with the idempotent producer p, single
// records and batches, and now and then re-sends its last batch on purpose,
// which must come back as a duplicate at the original offsets.
func (cy *cycle) publishIdempotent(p *client.Producer, rng *rand.Rand) {
	m := cy.m
	seq := 0
	for cy.ctx.Err() == nil {
		shard := uint32(rng.IntN(crashShards))
		if rng.IntN(8) == 0 {
			m.mu.Lock()
			last, ok := m.idemLast[shard]
			m.mu.Unlock()
			if ok {
				ack, err := p.PublishSequence(cy.ctx, last.seq, last.payloads, client.WithKey(last.key))
				if err != nil {
					cy.unexpected("idempotent re-send of sequence %d: %v", last.seq, err)
					return // a re-send of a written batch changes nothing
				}
				if !ack.Duplicate || ack.Shard != shard || ack.Offset != last.offset {
					cy.t.Errorf("kill %d: re-send of sequence %d on shard %d written at %d: ack %+v, want a duplicate at %d",
						cy.kill, last.seq, shard, last.offset, ack, last.offset)
				}
				m.mu.Lock()
				m.idemResent++
				m.mu.Unlock()
				continue
			}
		}
		n := 1
		if rng.IntN(2) == 0 {
			n = 2 + rng.IntN(7)
		}
		payloads := soakPayloads(rng, cy.kill, "idem", &seq, n)
		key := m.keys[shard]
		ack, err := p.Publish(cy.ctx, payloads, client.WithKey(key))
		var pe *client.ProducerError
		switch {
		case errors.As(err, &pe):
			cy.unexpected("idempotent publish: %v", err)
			m.mu.Lock()
			m.idemDoubt = append(m.idemDoubt, idemBatch{key: key, shard: pe.Shard, seq: pe.Sequence, payloads: payloads})
			m.idemSeq[pe.Shard] = p.Sequence(pe.Shard)
			m.mu.Unlock()
			return // the next batch waits for this one's outcome
		case err != nil:
			cy.unexpected("idempotent publish (nothing sent): %v", err)
			return
		case ack.Duplicate:
			cy.t.Errorf("kill %d: a fresh sequence %d came back as a duplicate: %+v", cy.kill, p.Sequence(shard), ack)
		}
		m.recordAck(ack.Shard, ack.Offset, payloads)
		m.mu.Lock()
		m.idemLast[ack.Shard] = idemBatch{key: key, shard: ack.Shard, seq: p.Sequence(ack.Shard), payloads: payloads, offset: ack.Offset}
		m.idemSeq[ack.Shard] = p.Sequence(ack.Shard)
		m.mu.Unlock()
	}
}

// consumeGroup polls the group on each shard in turn and acks everything it
// gets at once.
func (cy *cycle) consumeGroup(c *client.Client) {
	m := cy.m
	for shard := uint32(0); cy.ctx.Err() == nil; shard = (shard + 1) % crashShards {
		recs, err := c.Group(m.name, crashGroup).Poll(cy.ctx, shard, 64, 20*time.Millisecond)
		if err != nil {
			cy.unexpected("group poll: %v", err)
			return
		}
		if len(recs) == 0 {
			continue
		}
		offsets := make([]uint64, len(recs))
		m.mu.Lock()
		for i, r := range recs {
			offsets[i] = r.Offset
			if prev, ok := m.delivered[shard][r.Offset]; ok && prev != string(r.Payload) {
				cy.t.Errorf("kill %d: group delivered %d/%d as %q, earlier as %q", cy.kill, shard, r.Offset, r.Payload, prev)
			}
			m.delivered[shard][r.Offset] = string(r.Payload)
		}
		m.mu.Unlock()
		_, err = c.Group(m.name, crashGroup).AckOffsets(cy.ctx, shard, offsets...)
		m.mu.Lock()
		for _, off := range offsets {
			if err == nil {
				m.groupAcked[shard][off] = true
				delete(m.groupDoubt[shard], off)
			} else if !m.groupAcked[shard][off] {
				m.groupDoubt[shard][off] = true
			}
		}
		if err == nil {
			m.groupAcks++
		}
		m.mu.Unlock()
		if err != nil {
			cy.unexpected("group ack: %v", err)
			return
		}
	}
}

// readShard reads shard's records [0, tail) with range reads, in pages, and
// returns their payloads by offset.
func readShard(ctx context.Context, t *testing.T, c *client.Client, name client.StreamName, shard uint32, tail uint64) []string {
	t.Helper()
	out := make([]string, 0, tail)
	for next := uint64(0); next < tail; {
		page, err := c.Read(ctx, name, shard, next, tail)
		if err != nil {
			t.Fatalf("read shard %d from %d (tail %d): %v", shard, next, tail, err)
		}
		if len(page.Records) == 0 {
			t.Fatalf("read shard %d from %d (tail %d): an empty page, next %d", shard, next, tail, page.Next)
		}
		for _, r := range page.Records {
			if r.Offset != next {
				t.Fatalf("read shard %d: offset %d where %d was due", shard, r.Offset, next)
			}
			out = append(out, string(r.Payload))
			next++
		}
	}
	return out
}

// prefix returns the first offset from 0 that is in none of sets.
func prefix(sets ...map[uint64]bool) uint64 {
	for off := uint64(0); ; off++ {
		in := false
		for _, s := range sets {
			in = in || s[off]
		}
		if !in {
			return off
		}
	}
}

// location is where a payload is stored.
type location struct {
	shard  uint32
	offset uint64
}

// verify checks the restarted node against the model: every acknowledged
// record at its offset, every payload stored at most once, the group's
// cursors between what was surely acked and what may have been, and the
// idempotent producer's memory of its batches. It re-sends the idempotent
// batches whose outcome is unknown on p, checking that each is written
// exactly once, and returns how many records the stream holds.
func (m *soakModel) verify(ctx context.Context, t *testing.T, kill int, c *client.Client, p *client.Producer) int {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	info, err := c.DescribeStream(ctx, m.name)
	if err != nil {
		t.Fatalf("after kill %d: describe: %v", kill, err)
	}
	where := map[string]location{}
	total := 0
	for s := range uint32(crashShards) {
		tail := info.Tails[s]
		stored := readShard(ctx, t, c, m.name, s, tail)
		total += len(stored)
		for off, payload := range stored {
			if prev, dup := where[payload]; dup {
				t.Fatalf("after kill %d: %q is stored twice: at %d/%d and at %d/%d", kill, payload, prev.shard, prev.offset, s, off)
			}
			where[payload] = location{s, uint64(off)}
		}
		for off, payload := range m.acked[s] {
			if off >= tail {
				t.Fatalf("after kill %d: shard %d's tail is %d, but offset %d (%q) was acknowledged", kill, s, tail, off, payload)
			}
			if stored[off] != payload {
				t.Fatalf("after kill %d: %d/%d holds %q, %q was acknowledged there", kill, s, off, stored[off], payload)
			}
		}
		for off, payload := range m.delivered[s] {
			if off >= tail || stored[off] != payload {
				t.Fatalf("after kill %d: the group delivered %q as %d/%d, which is not stored there", kill, payload, s, off)
			}
		}
	}
	m.verifyGroup(ctx, t, kill, c, info.Tails)

	// The producer remembers its last batch on each shard across the
	// crash: a re-send is a duplicate at the original offsets.
	for s := range uint32(crashShards) {
		last, ok := m.idemLast[s]
		if !ok {
			continue
		}
		ack, err := p.PublishSequence(ctx, last.seq, last.payloads, client.WithKey(last.key))
		if err != nil {
			t.Fatalf("after kill %d: re-send of acknowledged sequence %d on shard %d: %v", kill, last.seq, s, err)
		}
		if !ack.Duplicate || ack.Shard != s || ack.Offset != last.offset {
			t.Fatalf("after kill %d: re-send of sequence %d on shard %d written at %d: ack %+v, want a duplicate there",
				kill, last.seq, s, last.offset, ack)
		}
		m.idemResent++
	}
	// A batch in flight at the kill is re-sent with its sequence: a
	// duplicate where it was written, or written now if it was not.
	for _, d := range m.idemDoubt {
		loc, found := where[string(d.payloads[0])]
		ack, err := p.PublishSequence(ctx, d.seq, d.payloads, client.WithKey(d.key))
		if err != nil {
			t.Fatalf("after kill %d: re-send of sequence %d on shard %d: %v", kill, d.seq, d.shard, err)
		}
		if ack.Shard != d.shard {
			t.Fatalf("after kill %d: re-send of sequence %d of shard %d went to shard %d", kill, d.seq, d.shard, ack.Shard)
		}
		if found {
			for j, payload := range d.payloads {
				if got := where[string(payload)]; got != (location{d.shard, loc.offset + uint64(j)}) {
					t.Fatalf("after kill %d: batch of sequence %d is torn: record %d at %+v, the first at %+v", kill, d.seq, j, got, loc)
				}
			}
			if !ack.Duplicate || ack.Offset != loc.offset {
				t.Fatalf("after kill %d: re-send of sequence %d, stored at %d/%d: ack %+v, want a duplicate there",
					kill, d.seq, loc.shard, loc.offset, ack)
			}
			m.idemDuplicates++
		} else {
			for _, payload := range d.payloads {
				if got, ok := where[string(payload)]; ok {
					t.Fatalf("after kill %d: part of the batch of sequence %d is stored (%q at %+v), not the rest", kill, d.seq, payload, got)
				}
			}
			if ack.Duplicate || ack.Offset != info.Tails[d.shard] {
				t.Fatalf("after kill %d: re-send of sequence %d, not stored: ack %+v, want it written at the tail %d",
					kill, d.seq, ack, info.Tails[d.shard])
			}
			m.idemRewritten++
		}
		m.ackedBatches++
		for j, payload := range d.payloads {
			m.acked[d.shard][ack.Offset+uint64(j)] = string(payload)
		}
		m.idemLast[d.shard] = idemBatch{key: d.key, shard: d.shard, seq: d.seq, payloads: d.payloads, offset: ack.Offset}
		m.idemSeq[d.shard] = max(m.idemSeq[d.shard], d.seq)
	}
	m.idemDoubt = nil
	return total
}

// verifyGroup checks each shard's committed cursor: at least every offset
// acked before the kill (acks are answered once durable), and never past an
// offset that was not acked (or whose ack was in flight at the kill).
func (m *soakModel) verifyGroup(ctx context.Context, t *testing.T, kill int, c *client.Client, tails []uint64) {
	t.Helper()
	committed := make([]uint64, crashShards)
	info, err := c.Group(m.name, crashGroup).Describe(ctx)
	switch {
	case errors.Is(err, client.ErrGroupNotFound):
		// Never used, or its first use did not outlive the kill: nothing
		// may have been acked then.
	case err != nil:
		t.Fatalf("after kill %d: describe group: %v", kill, err)
	default:
		for _, s := range info.Shards {
			committed[s.Shard] = s.Committed
		}
	}
	for s := range crashShards {
		sure, maybe := prefix(m.groupAcked[s]), prefix(m.groupAcked[s], m.groupDoubt[s])
		switch {
		case committed[s] < sure:
			t.Fatalf("after kill %d: shard %d's group cursor is %d, but every offset below %d was acked", kill, s, committed[s], sure)
		case committed[s] > maybe:
			t.Fatalf("after kill %d: shard %d's group cursor is %d, past offset %d, which was never acked", kill, s, committed[s], maybe)
		case committed[s] > tails[s]:
			t.Fatalf("after kill %d: shard %d's group cursor %d is past its tail %d", kill, s, committed[s], tails[s])
		}
		// An ack in doubt below the cursor took effect (nothing else
		// settles a record here: no nacks, and attempts never run out).
		for off := range m.groupDoubt[s] {
			if off < committed[s] {
				m.groupAcked[s][off] = true
				delete(m.groupDoubt[s], off)
			}
		}
	}
}

// percentile returns the p-th percentile (0-100) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// Kill -9 a node again and again under acked durable publishing (single
// records, pipelined batches and an idempotent producer, from three
// clients) and consumer-group consumption, restart it on the same data dir
// each time, and check after each restart that every acknowledged record is
// stored once at its offset, that re-sent idempotent batches were not
// written twice, and that no group cursor passed an unacknowledged record.
// HERALD_CRASH_SEED replays a run; HERALD_CRASH_KILLS kills more often, and
// the deadline (crashBudgetBase plus crashBudgetPerKill per kill, within go
// test's -timeout) grows with it.
func TestCrashSoak(t *testing.T) {
	seed := uint64(crashEnv(t, "HERALD_CRASH_SEED", time.Now().UnixNano()))
	kills := int(crashEnv(t, "HERALD_CRASH_KILLS", crashDefaultKills))
	t.Logf("seed %d (HERALD_CRASH_SEED=%d replays the kill schedule), %d kills", seed, seed, kills)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	dir := t.TempDir()
	logFile := crashLog(t)
	// Attempts never run out, so a record is settled only by an ack.
	env := []string{"HERALD_GROUP_MAX_ATTEMPTS=1000000"}
	name := client.StreamName{Tenant: "acme", Namespace: "crash", Stream: "soak"}
	m := newSoakModel(name)
	budget := crashBudgetBase + time.Duration(kills)*crashBudgetPerKill
	deadline := time.Now().Add(budget)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
		t.Logf("go test's -timeout cuts the soak's budget of %v to %v", budget, time.Until(deadline).Round(time.Second))
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	node := startCrashNode(t, dir, logFile, env...)
	c, _ := node.ready(t, client.StreamName{})
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: crashShards, Durable: true}); err != nil {
		t.Fatal(err)
	}
	// The group comes into being on its first poll (of an empty shard:
	// nothing is claimed).
	if _, err := c.Group(name, crashGroup).Poll(ctx, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()

	var readyTimes []time.Duration
	startKills := 0
	records := 0
	var verifying time.Duration
	for kill := 0; kill <= kills; kill++ {
		if kill > 0 {
			// Now and then the node is killed again while it recovers.
			if rng.IntN(5) == 0 {
				node = startCrashNode(t, dir, logFile, env...)
				select {
				case <-node.done:
					t.Fatalf("node exited by itself (%v) while it recovered", node.cmd.ProcessState)
				case <-time.After(time.Duration(rng.IntN(300)) * time.Millisecond): // the random kill moment
				}
				node.kill()
				startKills++
			}
			node = startCrashNode(t, dir, logFile, env...)
			c, took := node.ready(t, name)
			readyTimes = append(readyTimes, took)
			_ = c.Close()
		}
		cy := &cycle{t: t, m: m, kill: kill}
		var stop context.CancelFunc
		cy.ctx, stop = context.WithCancel(ctx)
		clients := make([]*client.Client, 4)
		for i := range clients {
			clients[i] = node.dial(t)
		}
		p := clients[2].NewProducer(name, crashIdempotentID)
		for s, last := range m.idemSeq {
			p.SetSequence(s, last)
		}
		if kill > 0 {
			start := time.Now()
			records = m.verify(ctx, t, kill, clients[3], p)
			verifying += time.Since(start)
		}

		var wg sync.WaitGroup
		workerSeeds := [4]uint64{rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64()}
		wg.Go(func() { cy.publishSingles(clients[0], rand.New(rand.NewPCG(workerSeeds[0], 1))) })
		wg.Go(func() { cy.publishBatches(clients[1], rand.New(rand.NewPCG(workerSeeds[1], 2))) })
		wg.Go(func() { cy.publishIdempotent(p, rand.New(rand.NewPCG(workerSeeds[2], 3))) })
		wg.Go(func() { cy.consumeGroup(clients[3]) })

		if kill == kills {
			// The last run is not killed: it is stopped, and a call that
			// stop cancels is no failure either.
			cy.killed.Store(true)
			stop()
			wg.Wait()
			for _, c := range clients {
				_ = c.Close()
			}
			break
		}
		delay := crashKillDelayMin + time.Duration(rng.Int64N(int64(crashKillDelayMax-crashKillDelayMin)))
		select {
		case <-time.After(delay): // the random kill moment
		case <-node.done:
			t.Fatalf("node exited by itself (%v)", node.cmd.ProcessState)
		}
		cy.killed.Store(true)
		node.kill()
		stop() // calls waiting on the dead node return now
		wg.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	node.kill()

	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("%d kills under load (%d more while recovering); the stream holds %d records, %d acked in %d batches; checking took %v",
		kills, startKills, records, len(m.acked[0])+len(m.acked[1])+len(m.acked[2]), m.ackedBatches, verifying.Round(time.Millisecond))
	t.Logf("idempotent producer: %d re-sends answered as duplicates, %d batches in flight at a kill were stored (duplicate on re-send), %d were not (written by the re-send)",
		m.idemResent, m.idemDuplicates, m.idemRewritten)
	sure := uint64(0)
	for s := range crashShards {
		sure += prefix(m.groupAcked[s])
	}
	t.Logf("group: %d acks, %d records settled in order", m.groupAcks, sure)
	if len(readyTimes) > 0 {
		t.Logf("restart to ready (a connection and a describe answered): p50 %v, max %v over %d restarts",
			percentile(readyTimes, 50).Round(time.Millisecond), percentile(readyTimes, 100).Round(time.Millisecond), len(readyTimes))
	}
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
