package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// The reconnecting Go client against a real `herald node` process that is
// killed with SIGKILL and restarted on the same port and data dir.

// fixedNode is a `herald node` process that restarts on the same
// addresses.
type fixedNode struct {
	t       *testing.T
	dataDir string
	addr    string
	http    string
	env     []string
	log     *os.File
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
}

// newFixedNode picks the node's addresses and data dir; start runs it.
func newFixedNode(t *testing.T, env ...string) *fixedNode {
	t.Helper()
	addr, httpAddr := freePorts(t)
	log, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := &fixedNode{t: t, dataDir: t.TempDir(), addr: addr, http: httpAddr, env: env, log: log}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("node log:\n%s", b)
			}
		}
		log.Close()
	})
	return n
}

// start runs the node and waits until /readyz answers; it returns how long
// that took.
func (n *fixedNode) start() time.Duration {
	n.t.Helper()
	bin := heraldBinary(n.t)
	began := time.Now()
	cmd := exec.Command(bin, "node", "--data-dir", n.dataDir, "--listen", n.addr, "--http", n.http, "--log-level", "warn")
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = n.log, n.log
	fmt.Fprintf(n.log, "--- herald node started at %s ---\n", began.Format(time.StampMilli))
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	deadline := began.Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + n.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(began)
			}
		}
		select {
		case <-done:
			n.t.Fatalf("node exited during start: %v", cmd.ProcessState)
		case <-time.After(20 * time.Millisecond): // polling a process's start, not asserting time
		}
		if time.Now().After(deadline) {
			n.t.Fatal("node did not become ready within 60 s")
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone (a no-op when it
// is not running).
func (n *fixedNode) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// dial connects a reconnecting client that reports its connection events
// on the returned log.
func (n *fixedNode) dial(t *testing.T) (*client.Client, *connEvents) {
	t.Helper()
	ev := &connEvents{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.addr, client.WithCAFile(filepath.Join(n.dataDir, "tls", "ca.pem")),
		client.WithConnectionEvents(ev.add))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, ev
}

// connEvents counts a client's connection events.
type connEvents struct {
	mu           sync.Mutex
	disconnected int
	reconnected  int
	closed       []error
	// downtimes are the reconnects' downtimes.
	downtimes []time.Duration
}

func (e *connEvents) add(ev client.ConnectionEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch ev.Kind {
	case client.ConnectionDisconnected:
		e.disconnected++
	case client.ConnectionReconnected:
		e.reconnected++
		e.downtimes = append(e.downtimes, ev.Downtime)
	case client.ConnectionClosed:
		e.closed = append(e.closed, ev.Err)
	}
}

// reconnects returns how many reconnects the client made.
func (e *connEvents) reconnects() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reconnected
}

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling processes and clients, not asserting time
	}
}

// recKey is a record's place.
type recKey struct {
	shard  uint32
	offset uint64
}

// TestReconnectAcrossKillNine: a plain publisher, an idempotent producer, a
// durable subscriber and a group member, each on its own reconnecting
// client, run while the node is killed with SIGKILL three times and
// restarted on the same port and data dir. None of them is restarted by the
// test. In the end:
//   - the subscriber received every record of the stream exactly once per
//     shard, in order, from offset 0 to the tail: every acked publish among
//     them at its acked offset;
//   - every plain publish was either acked or failed with ErrOutcomeUnknown
//     (in flight at a kill), nothing else;
//   - every idempotent publish succeeded, and each of its records is stored
//     exactly once;
//   - the group member kept its id, consumed every record at least once,
//     and the group committed the whole stream; an Ack of a delivery taken
//     before a kill fails with ErrStaleCursor.
func TestReconnectAcrossKillNine(t *testing.T) {
	const (
		kills  = 3
		shards = 2
		// perCycle is how many more acked records each run of the node
		// gets before it is killed.
		perCycle = 600
	)
	node := newFixedNode(t, "HERALD_GROUP_VISIBILITY_TIMEOUT=2s", "HERALD_GROUP_MAX_ATTEMPTS=1000000")
	ready := []time.Duration{node.start()}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	admin, _ := node.dial(t)
	orders := client.StreamName{Tenant: "acme", Namespace: "recon", Stream: "orders"}
	idem := client.StreamName{Tenant: "acme", Namespace: "recon", Stream: "idem"}
	for _, s := range []client.StreamName{orders, idem} {
		n := shards
		if s == idem {
			n = 1
		}
		if _, err := admin.CreateStream(ctx, s, client.StreamConfig{Shards: n, Durable: true}); err != nil {
			t.Fatal(err)
		}
	}
	keys := [shards][]byte{}
	for i, found := 0, 0; found < shards; i++ {
		k := []byte(fmt.Sprint("k", i))
		if s := wire.ShardFor(k, shards, wire.RoutingHash); keys[s] == nil {
			keys[s] = k
			found++
		}
	}

	pubC, pubEv := node.dial(t)
	subC, subEv := node.dial(t)
	grpC, grpEv := node.dial(t)
	stop := make(chan struct{}) // closed when the publishers are to stop
	var wg sync.WaitGroup

	// The plain publisher: pipelined acked batches of 4, keyed to both
	// shards.
	var pmu sync.Mutex
	acked := map[recKey]string{}
	var unknown, otherErrs atomic.Int64
	var unknownPayloads []string
	wg.Go(func() {
		type pending struct {
			f        *client.PublishFuture
			payloads []string
		}
		futures := make(chan pending, 64)
		var inner sync.WaitGroup
		inner.Go(func() {
			for p := range futures {
				ack, err := p.f.Wait(ctx)
				pmu.Lock()
				switch {
				case err == nil:
					for i, pl := range p.payloads {
						acked[recKey{ack.Shard, ack.Offset + uint64(i)}] = pl
					}
				case errors.Is(err, client.ErrOutcomeUnknown):
					unknown.Add(1)
					unknownPayloads = append(unknownPayloads, p.payloads...)
				default:
					otherErrs.Add(1)
					t.Errorf("plain publish: %v", err)
				}
				pmu.Unlock()
			}
		})
		defer inner.Wait()
		defer close(futures)
		for b := 0; ; b++ {
			select {
			case <-stop:
				return
			default:
			}
			payloads := make([]string, 4)
			raw := make([][]byte, 4)
			for i := range payloads {
				payloads[i] = fmt.Sprintf("plain-%06d-%d", b, i)
				raw[i] = []byte(payloads[i])
			}
			f, err := pubC.PublishAsync(ctx, orders, raw, client.WithKey(keys[b%shards]))
			if err != nil {
				t.Errorf("PublishAsync: %v", err)
				return
			}
			futures <- pending{f, payloads}
		}
	})

	// The idempotent producer: four goroutines publish through it, one
	// record per publish, so that several batches are in flight at a kill.
	prod := pubC.NewProducer(idem, 42)
	var idemAcked, idemDuplicates atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ack, err := prod.Publish(ctx, [][]byte{[]byte(fmt.Sprintf("idem-%d-%06d", g, i))})
				if err != nil {
					t.Errorf("idempotent publish %d of goroutine %d: %v", i, g, err)
					return
				}
				idemAcked.Add(1)
				if ack.Duplicate {
					idemDuplicates.Add(1)
				}
			}
		})
	}

	// The durable subscriber: every shard from 0, checked as it reads.
	var smu sync.Mutex
	got := map[recKey]string{}
	next := [shards]uint64{}
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	sub, err := subC.Subscribe(ctx, orders, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	var subWG sync.WaitGroup
	subWG.Go(func() {
		for {
			ev, err := sub.Next(subCtx)
			if err != nil {
				if subCtx.Err() == nil {
					t.Errorf("subscriber: %v", err)
				}
				return
			}
			smu.Lock()
			if ev.Offset != next[ev.Shard] {
				t.Errorf("subscriber: shard %d offset %d, want %d (a gap or a duplicate)", ev.Shard, ev.Offset, next[ev.Shard])
			}
			next[ev.Shard] = ev.Offset + 1
			got[recKey{ev.Shard, ev.Offset}] = string(ev.Payload)
			smu.Unlock()
		}
	})

	// The group member: acks every delivery, but keeps one aside before
	// the first kill, to ack after the reconnect.
	member, err := grpC.Group(orders, "work").Subscribe(ctx, client.WithMember("recon-m1"), client.WithWindow(50))
	if err != nil {
		t.Fatal(err)
	}
	var gmu sync.Mutex
	consumed := map[recKey]int{}
	var staleAcks, unknownAcks atomic.Int64
	held := make(chan client.Delivery, 1)
	var grpWG sync.WaitGroup
	grpWG.Go(func() {
		kept := false
		for {
			d, err := member.Next(subCtx)
			if err != nil {
				if subCtx.Err() == nil {
					t.Errorf("group member: %v", err)
				}
				return
			}
			gmu.Lock()
			for _, r := range d.Records {
				consumed[recKey{r.Shard, r.Offset}]++
			}
			gmu.Unlock()
			if !kept {
				kept = true
				held <- d
				continue
			}
			switch err := member.Ack(subCtx, d); {
			case err == nil:
			case errors.Is(err, client.ErrStaleCursor):
				staleAcks.Add(1) // taken before a kill, acked after: delivered again
			case errors.Is(err, client.ErrOutcomeUnknown):
				unknownAcks.Add(1) // in flight at a kill
			case subCtx.Err() != nil:
				return
			default:
				t.Errorf("group ack: %v", err)
			}
		}
	})
	stale := <-held

	waitAcked := func(n int) {
		t.Helper()
		waitUntil(t, time.Minute, fmt.Sprintf("%d acked plain records", n), func() bool {
			pmu.Lock()
			defer pmu.Unlock()
			return len(acked) >= n || t.Failed()
		})
	}
	for k := 1; k <= kills; k++ {
		waitAcked(k * perCycle)
		node.kill()
		killedAt := time.Now()
		fmt.Fprintf(node.log, "--- killed (SIGKILL %d) at %s ---\n", k, killedAt.Format(time.StampMilli))
		ready = append(ready, node.start())
		waitUntil(t, time.Minute, "every client to reconnect", func() bool {
			return pubEv.reconnects() >= k && subEv.reconnects() >= k && grpEv.reconnects() >= k
		})
		t.Logf("kill %d: the clients were back %v after the kill (node ready after %v)", k,
			time.Since(killedAt).Round(time.Millisecond), ready[len(ready)-1].Round(time.Millisecond))
		if k == 1 {
			if err := member.Ack(ctx, stale); !errors.Is(err, client.ErrStaleCursor) {
				t.Errorf("Ack of a delivery taken before the kill: %v, want ErrStaleCursor", err)
			}
		}
	}
	waitAcked((kills + 1) * perCycle)
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Everything settles: the subscriber reaches the tails, the group
	// commits them.
	info, err := admin.DescribeStream(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the subscriber to reach the tails", func() bool {
		smu.Lock()
		defer smu.Unlock()
		for s := range shards {
			if next[s] < info.Tails[s] {
				return false
			}
		}
		return true
	})
	waitUntil(t, 2*time.Minute, "the group to commit the stream", func() bool {
		g, err := admin.Group(orders, "work").Describe(ctx)
		if err != nil {
			return false
		}
		for _, s := range g.Shards {
			if s.Committed < info.Tails[s.Shard] {
				return false
			}
		}
		return true
	})
	stopSub()
	subWG.Wait()
	grpWG.Wait()
	_ = sub.Close()
	_ = member.Close()

	smu.Lock()
	pmu.Lock()
	gmu.Lock()
	defer smu.Unlock()
	defer pmu.Unlock()
	defer gmu.Unlock()
	var total uint64
	for s := range shards {
		total += info.Tails[s]
	}
	if uint64(len(got)) != total {
		t.Errorf("the subscriber got %d records, the stream holds %d", len(got), total)
	}
	for k, pl := range acked {
		if got[k] != pl {
			t.Errorf("acked %q at shard %d offset %d; the subscriber got %q", pl, k.shard, k.offset, got[k])
		}
	}
	stored := map[string]int{}
	for _, pl := range got {
		stored[pl]++
	}
	landed := 0
	for _, pl := range unknownPayloads {
		if stored[pl] > 0 {
			landed++
		}
	}
	for pl, n := range stored {
		if n != 1 {
			t.Errorf("%q is stored %d times", pl, n)
		}
	}
	missed := 0
	for k := range got {
		if consumed[k] == 0 {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("the group member never received %d of the %d records", missed, total)
	}
	redelivered := 0
	for _, n := range consumed {
		if n > 1 {
			redelivered++
		}
	}
	if m := member.Assignment().Member; m != "recon-m1" {
		t.Errorf("the member is %q after the kills", m)
	}

	// The idempotent stream: each record once.
	iinfo, err := admin.DescribeStream(ctx, idem)
	if err != nil {
		t.Fatal(err)
	}
	idemStored := readAllPayloads(ctx, t, admin, idem, 0)
	seen := map[string]int{}
	for _, pl := range idemStored {
		seen[pl]++
	}
	for pl, n := range seen {
		if n != 1 {
			t.Errorf("idempotent record %q stored %d times", pl, n)
		}
	}
	if int64(len(seen)) < idemAcked.Load() || uint64(len(idemStored)) != iinfo.Tails[0] {
		t.Errorf("idempotent stream holds %d records (%d distinct) for %d acked publishes", len(idemStored), len(seen), idemAcked.Load())
	}

	for name, ev := range map[string]*connEvents{"publisher": pubEv, "subscriber": subEv, "member": grpEv} {
		ev.mu.Lock()
		if ev.disconnected != kills || ev.reconnected != kills || len(ev.closed) != 0 {
			t.Errorf("%s client: %d disconnects, %d reconnects, closed %v; want %d, %d, none", name, ev.disconnected, ev.reconnected, ev.closed, kills, kills)
		}
		downs := slicesSorted(ev.downtimes)
		ev.mu.Unlock()
		t.Logf("%s client: downtimes %v", name, downs)
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
	t.Logf("%d kills: %d records in the stream, %d plain batches acked (%d records), %d in flight at a kill failed with ErrOutcomeUnknown (%d of their %d records landed), %d other errors",
		kills, total, len(acked)/4, len(acked), unknown.Load(), landed, len(unknownPayloads), otherErrs.Load())
	t.Logf("idempotent: %d publishes acked, %d of them answered as duplicates of a write before a kill; %d records stored, each once",
		idemAcked.Load(), idemDuplicates.Load(), len(idemStored))
	t.Logf("group: every record consumed, %d delivered more than once; %d acks stale after a rejoin, %d in doubt at a kill",
		redelivered, staleAcks.Load(), unknownAcks.Load())
	t.Logf("node start to ready: min %v, max %v", ready[0].Round(time.Millisecond), ready[len(ready)-1].Round(time.Millisecond))
}

// slicesSorted returns ds rounded to milliseconds, sorted, as strings.
func slicesSorted(ds []time.Duration) string {
	out := make([]string, len(ds))
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	for i, d := range s {
		out[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(out, " ")
}

// TestReconnectDialNoNode: Dial to an address where no node runs fails
// within about the 2 s dial timeout, naming the address.
func TestReconnectDialNoNode(t *testing.T) {
	addr, _ := freePorts(t)
	start := time.Now()
	c, err := client.Dial(context.Background(), addr, client.WithInsecure())
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("Dial to nothing succeeded")
	}
	t.Logf("Dial %s: failed after %v: %v", addr, took.Round(time.Millisecond), err)
	if !errors.Is(err, client.ErrNoNodeAnswered) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Dial: %v, want ErrNoNodeAnswered naming %s", err, addr)
	}
	if took > 5*time.Second {
		t.Fatalf("Dial took %v", took)
	}
}

// TestReconnectNoticesKilledNode: a node killed with SIGKILL under a live,
// quiet connection is noticed within about 5 s (the client's idle timeout),
// and the client, which cannot reconnect to a node that stays dead, keeps
// trying until Close.
func TestReconnectNoticesKilledNode(t *testing.T) {
	node := newFixedNode(t)
	node.start()
	lost := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, node.addr, client.WithCAFile(filepath.Join(node.dataDir, "tls", "ca.pem")),
		client.WithConnectionEvents(func(ev client.ConnectionEvent) {
			if ev.Kind == client.ConnectionDisconnected {
				select {
				case lost <- time.Now():
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := client.StreamName{Tenant: "acme", Namespace: "recon", Stream: "quiet"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	node.kill()
	killed := time.Now()
	select {
	case at := <-lost:
		noticed := at.Sub(killed)
		t.Logf("a node killed with SIGKILL was noticed after %v", noticed.Round(time.Millisecond))
		if noticed > 7*time.Second {
			t.Fatalf("noticed after %v, want about 5 s", noticed)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not notice the killed node in 30 s")
	}
	start := time.Now()
	c.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Close during the reconnect took %v", took)
	}
}

// TestReconnectStatelessReset: a node killed with SIGKILL and restarted on
// its address and data dir answers the first packet of a connection from
// before the restart with a QUIC stateless reset (its reset key is derived
// from the secret it keeps in its data dir), so the client learns of the
// loss from that answer, not from its idle timeout, and reconnects.
func TestReconnectStatelessReset(t *testing.T) {
	node := newFixedNode(t)
	node.start()
	events := make(chan client.ConnectionEvent, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, node.addr, client.WithCAFile(filepath.Join(node.dataDir, "tls", "ca.pem")),
		client.WithIdleTimeout(30*time.Second), // far longer than this test waits for the loss
		client.WithConnectionEvents(func(ev client.ConnectionEvent) { events <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := client.StreamName{Tenant: "acme", Namespace: "recon", Stream: "reset"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	node.kill()
	node.start()
	restarted := time.Now()
	// A call sends a packet on the old connection; the new node resets it.
	// The describe itself is read-only, so the client sends it again on
	// the new connection.
	if _, err := c.DescribeStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-events:
			if ev.Kind != client.ConnectionDisconnected {
				continue
			}
			t.Logf("loss noticed %v after the restart: %v", time.Since(restarted).Round(time.Millisecond), ev.Err)
			var reset *quic.StatelessResetError
			if !errors.As(ev.Err, &reset) {
				t.Fatalf("the connection was lost with %v, want a stateless reset from the restarted node", ev.Err)
			}
			return
		case <-ctx.Done():
			t.Fatal("no ConnectionDisconnected event")
		}
	}
}
