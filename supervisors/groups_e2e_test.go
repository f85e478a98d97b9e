package supervisors

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// udpProxy forwards one client's QUIC datagrams to a node and back until
// Cut, after which it drops everything, as a crashed client host would: the
// node gets no CONNECTION_CLOSE and finds out by its idle timeout.
type udpProxy struct {
	ln     *net.UDPConn
	up     *net.UDPConn
	cut    atomic.Bool
	client atomic.Pointer[net.UDPAddr]
	wg     sync.WaitGroup
}

func newUDPProxy(t *testing.T, target string) *udpProxy {
	t.Helper()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	raddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{ln: ln, up: up}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, from, err := ln.ReadFromUDP(buf)
			if err != nil {
				return
			}
			p.client.Store(from)
			if !p.cut.Load() {
				_, _ = up.Write(buf[:n])
			}
		}
	}()
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			if to := p.client.Load(); to != nil && !p.cut.Load() {
				_, _ = ln.WriteToUDP(buf[:n], to)
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = up.Close()
		p.wg.Wait()
	})
	return p
}

func (p *udpProxy) Addr() string { return p.ln.LocalAddr().String() }

// A member whose connection dies mid-stream (no goodbye: its host is cut
// off) loses its shards once the node notices; every record is acked by
// some member, none is lost, and the only records delivered twice are ones
// pushed to the dead member and not acked.
func TestGroupMemberKilledMidStream(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.IdleTimeout = MinIdleTimeout })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pubc := dialClient(t, n)
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "work"}
	if _, err := pubc.CreateStream(ctx, stream, client.StreamConfig{Shards: 4, Durable: true}); err != nil {
		t.Fatal(err)
	}
	const total = 2000
	for i := 0; i < total; i += 100 {
		for k := i; k < i+100; k++ {
			if _, err := pubc.PublishBatch(ctx, stream, [][]byte{[]byte(fmt.Sprint(k))}, client.WithKey([]byte(fmt.Sprint(k)))); err != nil {
				t.Fatal(err)
			}
		}
	}

	type key struct {
		shard  uint32
		offset uint64
	}
	var mu sync.Mutex
	deliveries := map[key]int{}
	acked := map[key]bool{}
	record := func(d client.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range d.Records {
			deliveries[key{r.Shard, r.Offset}]++
		}
	}
	settle := func(d client.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range d.Records {
			acked[key{r.Shard, r.Offset}] = true
		}
	}

	// The doomed member, through a proxy the test cuts.
	proxy := newUDPProxy(t, n.Addr())
	doomedc, err := client.Dial(ctx, proxy.Addr(), client.WithCAFile(n.CAFile()))
	if err != nil {
		t.Fatal(err)
	}
	defer doomedc.Close()
	doomed, err := doomedc.Group(stream, "workers").Subscribe(ctx, client.WithMember("doomed"), client.WithWindow(50), client.WithMaxPerPush(10))
	if err != nil {
		t.Fatal(err)
	}
	// It takes some records, acks a few deliveries, and is cut off.
	unacked := map[key]bool{}
	for i := 0; i < 8; i++ {
		d, err := doomed.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		record(d)
		if i%2 == 0 {
			if err := doomed.Ack(ctx, d); err != nil {
				t.Fatal(err)
			}
			settle(d)
			continue
		}
		for _, r := range d.Records {
			unacked[key{r.Shard, r.Offset}] = true
		}
	}
	proxy.cut.Store(true)

	// The survivor joins and works until every record is settled.
	survivorc := dialClient(t, n)
	survivor, err := survivorc.Group(stream, "workers").Subscribe(ctx, client.WithMember("survivor"), client.WithWindow(200))
	if err != nil {
		t.Fatal(err)
	}
	defer survivor.Close()
	for {
		mu.Lock()
		done := len(acked) == total
		mu.Unlock()
		if done {
			break
		}
		d, err := survivor.Next(ctx)
		if err != nil {
			t.Fatalf("survivor: %v (acked %d of %d)", err, len(acked), total)
		}
		record(d)
		if err := survivor.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
		settle(d)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, times := range deliveries {
		if times > 1 && !unacked[k] {
			t.Errorf("record %v delivered %d times but was not one the dead member held unacked", k, times)
		}
	}
	redelivered := 0
	for k := range unacked {
		if deliveries[k] < 2 {
			t.Errorf("record %v held unacked by the dead member was not delivered again", k)
		}
		redelivered++
	}
	info, err := survivorc.Group(stream, "workers").Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := uint64(0)
	for _, sh := range info.Shards {
		if sh.Committed != sh.Tail {
			t.Errorf("shard %d committed %d, tail %d", sh.Shard, sh.Committed, sh.Tail)
		}
		sum += sh.Committed
	}
	if sum != total || len(info.Members) != 1 || info.Members[0].ID != "survivor" {
		t.Fatalf("group after the run: committed %d of %d, members %+v", sum, total, info.Members)
	}
	t.Logf("%d records, %d redelivered after the member died", total, redelivered)
}

// The pull path through the client: poll, ack out of order, nack, a record
// that keeps failing lands in dead letters and is redriven.
func TestGroupPullThroughClient(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.GroupMaxAttempts = 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n)
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.PublishBatch(ctx, stream, [][]byte{[]byte(fmt.Sprint("order-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := c.Group(stream, "fulfilment").Poll(ctx, 0, 5, time.Second)
	if err != nil || len(recs) != 5 || string(recs[4].Payload) != "order-4" || recs[0].Attempts != 1 {
		t.Fatalf("poll: %v %+v", err, recs)
	}
	// Ack 4, 1, 0 (out of order); 2 succeeds later; 3 keeps failing.
	for _, off := range []uint64{4, 1, 0} {
		if _, err := c.Group(stream, "fulfilment").AckOffsets(ctx, 0, off); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Group(stream, "fulfilment").Describe(ctx)
	if err != nil || info.Shards[0].Committed != 2 {
		t.Fatalf("committed after out-of-order acks: %+v %v", info, err)
	}
	if _, err := c.Group(stream, "fulfilment").NackOffsets(ctx, 0, 2, 3); err != nil {
		t.Fatal(err)
	}
	for attempt := uint32(2); attempt <= 3; attempt++ {
		recs, err := c.Group(stream, "fulfilment").Poll(ctx, 0, 5, time.Second)
		if err != nil || len(recs) != 2 || recs[0].Offset != 2 || recs[1].Attempts != attempt {
			t.Fatalf("redelivery %d: %v %+v", attempt, err, recs)
		}
		if attempt == 2 {
			if _, err := c.Group(stream, "fulfilment").AckOffsets(ctx, 0, 2); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Group(stream, "fulfilment").NackOffsets(ctx, 0, 3); err != nil {
				t.Fatal(err)
			}
			// 2 is acked: only 3 comes back (the poll above wanted 2 records
			// because 2 had been nacked too).
			recs, err = c.Group(stream, "fulfilment").Poll(ctx, 0, 5, time.Second)
			if err != nil || len(recs) != 1 || recs[0].Offset != 3 || recs[0].Attempts != 3 {
				t.Fatalf("third attempt: %v %+v", err, recs)
			}
			if _, err := c.Group(stream, "fulfilment").NackOffsets(ctx, 0, 3); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	letters, more, err := c.Group(stream, "fulfilment").DeadLetters(ctx, client.AllShards, 0, 0)
	if err != nil || more || len(letters) != 1 || letters[0].Offset != 3 || letters[0].Attempts != 3 {
		t.Fatalf("dead letters: %v %v %+v", err, more, letters)
	}
	info, _ = c.Group(stream, "fulfilment").Describe(ctx)
	if info.Shards[0].Committed != 5 {
		t.Fatalf("committed %d after dead-lettering the last record, want 5", info.Shards[0].Committed)
	}
	if n, err := c.Group(stream, "fulfilment").Redrive(ctx, 0, 3); err != nil || n != 1 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	recs, err = c.Group(stream, "fulfilment").Poll(ctx, 0, 5, time.Second)
	if err != nil || len(recs) != 1 || recs[0].Offset != 3 || recs[0].Attempts != 1 || string(recs[0].Payload) != "order-3" {
		t.Fatalf("after redrive: %v %+v", err, recs)
	}
	if _, err := c.Group(stream, "fulfilment").AckOffsets(ctx, 0, 3); err != nil {
		t.Fatal(err)
	}
	if letters, _, _ := c.Group(stream, "fulfilment").DeadLetters(ctx, client.AllShards, 0, 0); len(letters) != 0 {
		t.Fatalf("dead letters left: %+v", letters)
	}
	for name, want := range map[string]float64{
		"herald_group_delivered_total":    9,
		"herald_group_acked_total":        5,
		"herald_group_nacked_total":       4,
		"herald_group_dead_letters_total": 1,
	} {
		if got := n.Metric(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Typed errors reach the caller.
	if _, err := c.Group(stream, "fulfilment").AckOffsets(ctx, 0, 99); !errors.Is(err, client.ErrNotDelivered) {
		t.Fatalf("ack of an undelivered offset: %v", err)
	}
	if _, err := c.Group(stream, "nobody").Describe(ctx); !errors.Is(err, client.ErrGroupNotFound) {
		t.Fatalf("describe of an unknown group: %v", err)
	}
}

// Close leaves at once: the other member gets the shards on its next ack
// (a heartbeat here), with no timeout to wait out; a member beyond the
// shard count waits idle until then.
func TestGroupCloseRebalancesAtOnce(t *testing.T) {
	n := testNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n)
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "pair"}
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	join := func(id string) *client.GroupMember {
		t.Helper()
		gs, err := c.Group(stream, "g").Subscribe(ctx, client.WithMember(id), client.WithHeartbeat(-1))
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	a, b, extra := join("a"), join("b"), join("z")
	defer a.Close()
	defer extra.Close()
	if got := extra.Assignment().Shards; len(got) != 0 {
		t.Fatalf("third member of a 2-shard stream got shards %v", got)
	}
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.Assignment().Shards; len(got) != 1 || got[0] != 0 {
		t.Fatalf("a with three members: %v", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns once the client's side is done; the node sees the
	// stream end a moment later. Heartbeat until the assignment shows it
	// (no timeout is involved: the session timeout is 30 s).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := a.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		if err := extra.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		ga, gz := a.Assignment().Shards, extra.Assignment().Shards
		if len(ga) == 1 && len(gz) == 1 && ga[0] == 0 && gz[0] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after b left: a %v, z %v", ga, gz)
		}
	}
}
