package supervisors

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// Consumer groups keep the promise of the credit window against a real
// node: credit comes back only with a durable commit of exactly the
// records an ack's cursor names, in flight never exceeds the window, lag
// follows the tail with nobody consuming, and a log read that stalls holds
// up no one but the read.

// pushMember is a raw push member that tracks, from the frames alone, what
// the node pushed it and what it acked.
type pushMember struct {
	t        *testing.T
	c        *rawConn
	s        *quic.Stream
	window   int
	inFlight int
	// held are the deliveries pushed and not yet acked, oldest first.
	held []wire.GroupRecords
	id   uint64
}

func joinPush(t *testing.T, c *rawConn, group, member string, window, maxPush uint32) *pushMember {
	t.Helper()
	s := c.stream()
	c.write(s, wire.AppendGroupSubscribe(nil, 1, wire.GroupSubscribe{Name: jobs, Group: group, Member: member, Window: window, MaxPerPush: maxPush}))
	if f := c.read(s); f.Header.Type != wire.TypeGroupAssignment {
		t.Fatalf("join: %s %s", f.Header.Type, errFrame(f))
	}
	return &pushMember{t: t, c: c, s: s, window: int(window), id: 100}
}

// take records a push; the window must hold.
func (m *pushMember) take(f wire.Frame) {
	m.t.Helper()
	g := decodeRecords(m.t, f)
	m.inFlight += len(g.Records)
	if m.inFlight > m.window {
		m.t.Fatalf("a push of %d records took in flight to %d, past the window %d", len(g.Records), m.inFlight, m.window)
	}
	m.held = append(m.held, g)
}

// fill reads pushes until in flight is the window.
func (m *pushMember) fill() {
	m.t.Helper()
	for m.inFlight < m.window {
		m.take(m.c.read(m.s))
	}
}

// ack sends an ack and returns the frame answering it (pushes before the
// answer are taken).
func (m *pushMember) ack(cursor []byte, count uint32) wire.Frame {
	m.t.Helper()
	m.id++
	id := m.id
	m.c.write(m.s, wire.AppendGroupStreamAck(nil, id, wire.GroupStreamAck{Cursor: cursor, Count: count}))
	for {
		f := m.c.read(m.s)
		if f.Header.RequestID == id {
			return f
		}
		m.take(f)
	}
}

// refused sends an ack that must be refused with code and return nothing:
// the heartbeat after it (answered after it, by the same member actor)
// shows the node's in flight unchanged.
func (m *pushMember) refused(what string, cursor []byte, count uint32, code wire.Code) {
	m.t.Helper()
	f := m.ack(cursor, count)
	if f.Header.Type != wire.TypeError {
		m.t.Fatalf("%s: answered %s, want %s", what, f.Header.Type, code)
	}
	wantErrCode(m.t, f, code)
	if got := m.heartbeat(); got != m.inFlight {
		m.t.Fatalf("%s: the node holds %d in flight after it, the client %d", what, got, m.inFlight)
	}
}

// heartbeat sends an empty ack and returns the in flight its answer says.
func (m *pushMember) heartbeat() int {
	m.t.Helper()
	f := m.ack(nil, 0)
	if f.Header.Type != wire.TypeGroupAssignment {
		m.t.Fatalf("heartbeat: %s %s", f.Header.Type, errFrame(f))
	}
	a, err := wire.DecodeGroupAssignment(f.Body)
	if err != nil {
		m.t.Fatal(err)
	}
	return int(a.InFlight)
}

// commit acks the oldest held delivery rightly; its credit comes back.
func (m *pushMember) commit() {
	m.t.Helper()
	d := m.held[0]
	f := m.ack(d.Cursor, uint32(len(d.Records)))
	if f.Header.Type != wire.TypeGroupAssignment {
		m.t.Fatalf("ack: %s %s", f.Header.Type, errFrame(f))
	}
	m.held = m.held[1:]
	m.inFlight -= len(d.Records)
	a, _ := wire.DecodeGroupAssignment(f.Body)
	if int(a.InFlight) != m.inFlight {
		m.t.Fatalf("after a durable ack the node holds %d in flight, the client %d", a.InFlight, m.inFlight)
	}
}

func (c *rawConn) describeJobs(id uint64, group string) wire.GroupInfo {
	c.t.Helper()
	f := c.call(id, wire.AppendDescribeGroup(nil, id, wire.DescribeGroup{Name: jobs, Group: group}))
	if f.Header.Type != wire.TypeGroupInfo {
		c.t.Fatalf("describe: %s %s", f.Header.Type, errFrame(f))
	}
	info, err := wire.DecodeGroupInfo(f.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return info
}

// Forged, oversized, undersized and repeated acks never raise a member's
// credit, and in flight never exceeds the window (measured against the
// node before the fix: a forged ack of 5 pushed 5 more records, a real
// cursor for 2 records acked with count 30 left 13 in flight of 5).
func TestGroupAcksReturnOnlyTheirDeliverysCredit(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	c.publishN(jobs, 0, 60)
	m := joinPush(t, c, "live", "m1", 5, 2)
	m.fill()
	if len(m.held[0].Records) != 2 {
		t.Fatalf("first push of %d records, want 2", len(m.held[0].Records))
	}
	real := m.held[0].Cursor

	m.refused("a forged cursor", []byte("garbage-cursor"), 5, wire.CodeInvalidCursor)
	tampered := bytes.Clone(real)
	tampered[len(tampered)-1] ^= 1
	m.refused("a tampered cursor", tampered, 2, wire.CodeInvalidCursor)
	m.refused("an oversized ack", real, 30, wire.CodeInvalidRequest)
	m.refused("an undersized ack", real, 1, wire.CodeInvalidRequest)
	m.refused("credit without a cursor", nil, 3, wire.CodeInvalidRequest)
	if info := c.describeJobs(2, "live"); info.Shards[0].Committed != 0 || info.Members[0].InFlight != 5 {
		t.Fatalf("after refused acks: committed %d, member in flight %d", info.Shards[0].Committed, info.Members[0].InFlight)
	}

	// The right ack commits and returns its two records of credit, once.
	m.commit()
	m.fill()
	m.refused("the same ack again", real, 2, wire.CodeInvalidRequest)
	if info := c.describeJobs(3, "live"); info.Shards[0].Committed != 2 {
		t.Fatalf("committed %d, want 2", info.Shards[0].Committed)
	}

	// Acks in any order, each refused variant between them, drain the
	// stream; the window holds throughout.
	for range 20 {
		d := m.held[len(m.held)-1]
		m.refused("an oversized ack", d.Cursor, uint32(len(d.Records))+1, wire.CodeInvalidRequest)
		m.commit()
		if m.inFlight < m.window && len(m.held) < 30 {
			// More may follow: the node pushes within the credit it has.
			m.take(m.c.read(m.s))
		}
	}
}

// failOnce fails the first durable commit that carries consumer-group state
// once armed (the storage writer then refuses every write, as a real
// failure makes it).
type failOnce struct {
	storage.Log
	armed  atomic.Bool
	failed atomic.Bool
}

func (f *failOnce) Commit(a []storage.Append, m []storage.MetaPut) error {
	if f.armed.Load() {
		for _, p := range m {
			if len(p.Key) > 0 && p.Key[0] == 'G' {
				f.armed.Store(false)
				f.failed.Store(true)
				return errors.New("injected group commit failure")
			}
		}
	}
	return f.Log.Commit(a, m)
}

// A failed commit returns no credit, and its records come back after the
// visibility timeout.
func TestGroupFailedCommitReturnsNoCredit(t *testing.T) {
	clk := newFakeClock()
	fail := &failOnce{}
	n := testNode(t, t.TempDir(), withFakeGroupClock(clk), func(c *Config, o *Options) {
		c.GroupSessionTimeout = time.Hour // the member stays while the visibility timeout lapses
		o.WrapDurableLog = func(l storage.Log) storage.Log { fail.Log = l; return fail }
	})
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	c.publishN(jobs, 0, 2)
	m := joinPush(t, c, "live", "m1", 4, 4)
	m.take(c.read(m.s))
	d := m.held[0]
	if len(d.Records) != 2 {
		t.Fatalf("push of %d records, want 2", len(d.Records))
	}
	fail.armed.Store(true)
	f := m.ack(d.Cursor, 2)
	wantErrCode(t, f, wire.CodeStorageFailure)
	if !fail.failed.Load() {
		t.Fatal("the commit did not reach the log")
	}
	// Nothing came back: the member still holds both records.
	if info := c.describeJobs(2, "live"); info.Members[0].InFlight != 2 || info.Shards[0].Committed != 0 {
		t.Fatalf("after the failed commit: member in flight %d, committed %d", info.Members[0].InFlight, info.Shards[0].Committed)
	}
	// The visibility timeout lapses: the same records are pushed again
	// (the member has room for them), as a second attempt.
	clk.Advance(31 * time.Second)
	m.take(c.read(m.s))
	again := m.held[1]
	if len(again.Records) != 2 || again.Records[0].Offset != 0 || again.Records[1].Offset != 1 || again.Records[0].Attempts != 2 {
		t.Fatalf("redelivered %+v", again.Records)
	}
	if m.inFlight != 4 {
		t.Fatalf("in flight %d, want the window of 4", m.inFlight)
	}
}

// Lag follows the shard's tail with no consumer attached: in describe and
// in herald_group_lag.
func TestGroupLagFollowsTheTailWithoutConsumers(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "acme", Namespace: "lag", Stream: "orders"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := c.Publish(ctx, name, fmt.Appendf(nil, "r%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(10)
	g := c.Group(name, "billing")
	recs, err := g.Poll(ctx, 0, 3, 0)
	if err != nil || len(recs) != 3 {
		t.Fatalf("poll: %d records %v", len(recs), err)
	}
	if n, err := g.Ack(ctx, recs...); err != nil || n != 3 {
		t.Fatalf("ack: %d %v", n, err)
	}
	// Nobody consumes from here on.
	publish(50)
	info, err := g.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := info.Shards[0]; s.Tail != 60 || s.Committed != 3 {
		t.Fatalf("describe: tail %d committed %d, want 60 and 3", s.Tail, s.Committed)
	}
	series := `herald_group_lag{group="billing",stream="acme/lag/orders"}`
	if got := scrapeSeries(t, n)[series]; got != 57 {
		t.Fatalf("%s = %v, want 57", series, got)
	}
	publish(5)
	if got := scrapeSeries(t, n)[series]; got != 62 {
		t.Fatalf("%s = %v after 5 more, want 62", series, got)
	}
}

// stallRead blocks the first log read after it is armed until released.
type stallRead struct {
	storage.Log
	armed   atomic.Bool
	entered chan storage.ShardKey
	release chan struct{}
	once    sync.Once
}

func (s *stallRead) Read(k storage.ShardKey, from uint64, maxBatches, maxBytes int) ([]storage.Batch, error) {
	if s.armed.CompareAndSwap(true, false) {
		s.entered <- k
		<-s.release
	}
	return s.Log.Read(k, from, maxBatches, maxBytes)
}

func (s *stallRead) unstall() { s.once.Do(func() { close(s.release) }) }

// While a group's log read stalls, the same group's acks and heartbeats,
// its describe, and every other group on the node are answered: no actor
// waits on the disk in Receive.
func TestGroupStalledReadHoldsUpNoOne(t *testing.T) {
	stall := &stallRead{entered: make(chan storage.ShardKey, 1), release: make(chan struct{})}
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.WrapDurableLog = func(l storage.Log) storage.Log { stall.Log = l; return stall }
	})
	t.Cleanup(stall.unstall)
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	other := wire.StreamName{Tenant: "acme", Namespace: "shop", Stream: "other"}
	f := c.call(91, wire.AppendCreateStream(nil, 91, wire.CreateStream{Name: other, Config: wire.StreamConfig{Shards: 1, Durable: true}}))
	if f.Header.Type != wire.TypeStreamInfo {
		t.Fatal(errFrame(f))
	}
	c.publishN(jobs, 0, 3)
	c.publishN(other, 0, 3)
	m := joinPush(t, c, "live", "m1", 10, 3)
	m.take(c.read(m.s))
	if m.inFlight != 3 {
		t.Fatalf("first push of %d", m.inFlight)
	}

	// The next record makes the coordinator read it: that read stalls.
	stall.armed.Store(true)
	c.publishN(jobs, 3, 1)
	select {
	case <-stall.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the coordinator did not read the new record")
	}
	// Meanwhile the same group acks, heartbeats and describes...
	m.commit()
	if got := m.heartbeat(); got != 0 {
		t.Fatalf("heartbeat during the stall: in flight %d", got)
	}
	if info := c.describeJobs(2, "live"); info.Shards[0].Committed != 3 || info.Shards[0].Tail != 4 {
		t.Fatalf("describe during the stall: %+v", info.Shards[0])
	}
	// ... and another group on another stream polls, acks and describes.
	poll := decodeRecords(t, c.call(3, wire.AppendGroupPoll(nil, 3, wire.GroupPoll{Name: other, Group: "audit", Max: 10})))
	if len(poll.Records) != 3 {
		t.Fatalf("other group's poll: %d records", len(poll.Records))
	}
	if f := c.call(4, wire.AppendGroupAck(nil, 4, false, wire.GroupAck{Name: other, Group: "audit", Offsets: []uint64{0, 1, 2}})); f.Header.Type != wire.TypeGroupDone {
		t.Fatalf("other group's ack: %s %s", f.Header.Type, errFrame(f))
	}
	// A group of the stalled stream that has no coordinator yet starts.
	if f := c.call(5, wire.AppendDescribeGroup(nil, 5, wire.DescribeGroup{Name: jobs, Group: "never"})); f.Header.Type != wire.TypeError {
		t.Fatalf("unknown group: %s", f.Header.Type)
	}
	// The read comes back and its record is pushed.
	stall.unstall()
	m.take(c.read(m.s))
	if r := m.held[len(m.held)-1].Records; len(r) != 1 || r[0].Offset != 3 {
		t.Fatalf("after the stall: %+v", r)
	}
}

// After a restart every stored group reports its lag, with no consumer
// ever attached to the new node (nothing asks for the group: its
// coordinator starts with the node).
func TestGroupLagReportedAfterRestartWithoutConsumers(t *testing.T) {
	dir := t.TempDir()
	name := client.StreamName{Tenant: "acme", Namespace: "lag", Stream: "restart"}
	series := `herald_group_lag{group="billing",stream="acme/lag/restart"}`
	var want float64
	func() {
		n := testNode(t, dir)
		ctx := testCtx(t)
		c := dialClient(t, n)
		if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if _, err := c.Publish(ctx, name, fmt.Appendf(nil, "r%d", i), client.WithKey(fmt.Appendf(nil, "k%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		g := c.Group(name, "billing")
		recs, err := g.Poll(ctx, 0, 4, 0)
		if err != nil || len(recs) == 0 {
			t.Fatalf("poll: %d %v", len(recs), err)
		}
		if _, err := g.Ack(ctx, recs...); err != nil {
			t.Fatal(err)
		}
		want = float64(20 - len(recs))
		if got := scrapeSeries(t, n)[series]; got != want {
			t.Fatalf("before the restart %s = %v, want %v", series, got, want)
		}
		_ = c.Close()
		if err := n.Shutdown(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}()
	n := testNode(t, dir)
	// The coordinator loads its state after the node is ready: wait for
	// the series (each scrape is a round trip; the bound is generous).
	got, ok := 0.0, false
	for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); {
		got, ok = scrapeSeries(t, n)[series]
		ok = ok && got != 0
	}
	if got != want {
		t.Fatalf("after the restart %s = %v (present %v), want %v", series, got, ok, want)
	}
}

// A push member that holds its whole window unacked past the visibility
// timeout (its handler never acks: push has no nack) is removed with
// session_expired, so its shards do not wait on it for good: the records go
// to the member that is left.
func TestGroupMemberHoldingALapsedWindowIsRemoved(t *testing.T) {
	clk := newFakeClock()
	n := testNode(t, t.TempDir(), withFakeGroupClock(clk), func(c *Config, _ *Options) {
		c.GroupSessionTimeout = time.Hour // only the visibility timeout lapses
	})
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	c.publishN(jobs, 0, 4)
	stuck := joinPush(t, c, "live", "stuck", 2, 2)
	stuck.take(c.read(stuck.s))
	if stuck.inFlight != 2 {
		t.Fatalf("pushed %d", stuck.inFlight)
	}
	// A second member joins with no shards to take (one shard): it waits.
	other := joinPush(t, c, "live", "x-other", 4, 4)
	clk.Advance(31 * time.Second)
	wantErrCode(t, c.read(stuck.s), wire.CodeSessionExpired)
	// The shard goes to the other member, and with it every record.
	for other.inFlight < 4 {
		other.take(c.read(other.s))
	}
	if got := other.held[0].Records[0]; got.Offset != 0 || got.Attempts != 2 {
		t.Fatalf("the other member's first record %+v, want offset 0 on its second attempt", got)
	}
}

// After the catalog restarts (new handles, new shard actors, the group's
// coordinator stopped with its shards), the lag of a group nobody consumes
// still follows the tail (found in review: it froze at the old shards').
func TestGroupLagFollowsTheTailAfterACatalogRestart(t *testing.T) {
	var armed atomic.Bool
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) {
		o.CatalogProps = panicOnce(&armed, "*actors.ListStreamsRequest")
		o.RequestTimeout = time.Second
	})
	ctx := testCtx(t)
	c := dialClient(t, n)
	name := client.StreamName{Tenant: "acme", Namespace: "lag", Stream: "catalog"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishBatch(ctx, name, [][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Group(name, "idle").Poll(ctx, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	series := `herald_group_lag{group="idle",stream="acme/lag/catalog"}`
	if got := scrapeSeries(t, n)[series]; got != 2 {
		t.Fatalf("%s = %v, want 2", series, got)
	}
	armed.Store(true)
	if _, err := c.ListStreams(ctx, "acme", ""); err == nil {
		t.Fatal("the list whose handling panicked succeeded")
	}
	// The restarted catalog serves again: publish through it.
	var err error
	for range 100 {
		if _, err = c.Publish(ctx, name, []byte("c")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("publish after the catalog restart: %v", err)
	}
	if got := scrapeSeries(t, n)[series]; got != 3 {
		t.Fatalf("after the catalog restart %s = %v, want 3", series, got)
	}
}
