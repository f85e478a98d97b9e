package actors

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/transport"
)

// testPeerNode is one node's side of the cluster transport: a QUIC
// transport on a loopback UDP socket, its accept loop, and its links.
type testPeerNode struct {
	t     *testing.T
	id    uint64
	sys   *actor.ActorSystem
	tr    *quic.Transport
	ln    *quic.Listener
	links map[uint64]*actor.PID
	gor   *Goroutines
	mu    sync.Mutex
	got   map[uint64][]peerwire.Message // by sender
	wg    sync.WaitGroup
	qc    *quic.Config
	tls   transport.PeerTLS
	udp   *net.UDPConn
	// route, when set, takes what arrives instead of got.
	route func(from uint64, msgs []peerwire.Message)
}

// setRoute sends what arrives to route from now on.
func (n *testPeerNode) setRoute(route func(from uint64, msgs []peerwire.Message)) {
	n.mu.Lock()
	n.route = route
	n.mu.Unlock()
}

func newTestPeerNode(t *testing.T, id uint64, addr string, tlsConf transport.PeerTLS) *testPeerNode {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Fatal(err)
	}
	n := &testPeerNode{t: t, id: id, sys: actor.NewActorSystem(), tr: &quic.Transport{Conn: udp}, links: map[uint64]*actor.PID{},
		gor: &Goroutines{}, got: map[uint64][]peerwire.Message{}}
	qc := &quic.Config{MaxIdleTimeout: 2 * time.Second, KeepAlivePeriod: 500 * time.Millisecond}
	if n.ln, err = n.tr.Listen(tlsConf.Server, qc); err != nil {
		t.Fatal(err)
	}
	n.qc, n.tls, n.udp = qc, tlsConf, udp
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			conn, err := n.ln.Accept(context.Background())
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			from, _, stream, err := AcceptPeer(ctx, conn, n.id, "", func(id uint64) bool { return n.linkPID(id) != nil }, n.tls.CheckPeerIdentity)
			cancel()
			if err != nil {
				_ = conn.CloseWithError(1, err.Error())
				continue
			}
			n.sys.Root.Send(n.linkPID(from), &PeerAccepted{Conn: conn, Stream: stream})
		}
	}()
	return n
}

// link starts this node's link to peer at addr; the links must all be
// started before any peer dials.
func (n *testPeerNode) link(peer uint64, addr string) { n.linkWith(peer, addr, nil) }

// linkWith is link with the link's config changed by mutate.
func (n *testPeerNode) linkWith(peer uint64, addr string, mutate func(*PeerLinkConfig)) {
	cfg := PeerLinkConfig{
		Self: n.id, Peer: peer, Addr: addr,
		Dial: PeerDialer(n.tr, n.tls.Client, n.qc), CheckIdentity: n.tls.CheckPeerIdentity,
		Deliver: func(from uint64, msgs []peerwire.Message) {
			n.mu.Lock()
			route := n.route
			if route == nil {
				n.got[from] = append(n.got[from], msgs...)
			}
			n.mu.Unlock()
			if route != nil {
				route(from, msgs)
			}
		},
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, Goroutines: n.gor,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	pid := n.sys.Root.Spawn(NewPeerLinkProps(cfg))
	n.mu.Lock()
	n.links[peer] = pid
	n.mu.Unlock()
}

func (n *testPeerNode) linkPID(peer uint64) *actor.PID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[peer]
}

func (n *testPeerNode) received(from uint64) []peerwire.Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]peerwire.Message(nil), n.got[from]...)
}

func (n *testPeerNode) status(peer uint64) PeerStatus {
	v, err := n.sys.Root.RequestFuture(n.linkPID(peer), &PeerStatusRequest{}, 5*time.Second).Result()
	if err != nil {
		n.t.Fatal(err)
	}
	return v.(PeerStatus)
}

// stop stops the links, then the transport, and waits for every goroutine.
func (n *testPeerNode) stop() {
	n.mu.Lock()
	links := maps.Clone(n.links)
	n.mu.Unlock()
	for _, pid := range links {
		_ = n.sys.Root.StopFuture(pid).Wait()
	}
	_ = n.ln.Close()
	_ = n.tr.Close()
	_ = n.udp.Close()
	n.wg.Wait()
	n.gor.CloseAndWait()
	n.sys.Shutdown()
}

// waitFor polls cond (a test of the transport's state, which no event
// announces to the test) until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// undeliveredProbe collects PeerUndelivered answers.
type undeliveredProbe struct {
	mu  sync.Mutex
	got []*PeerUndelivered
}

func (p *undeliveredProbe) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*PeerUndelivered); ok {
		p.mu.Lock()
		p.got = append(p.got, m)
		p.mu.Unlock()
	}
}

func (p *undeliveredProbe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.got)
}

// Two nodes under one cluster CA: node 1 dials node 2, and both send over
// the one connection, in order, every group's messages batched into
// frames. When node 2 goes away, node 1's link goes down and tells the
// senders of what it drops (a snapshot marked); when node 2 is back at its
// address, node 1 dials it again and messages flow both ways again.
func TestPeerLinksOverQUIC(t *testing.T) {
	tlsOf := clusterPeerTLS(t, 1, 2)
	n1 := newTestPeerNode(t, 1, "127.0.0.1:0", tlsOf(1))
	defer n1.stop()
	addr2 := freeUDPAddr(t)
	n2 := newTestPeerNode(t, 2, addr2, tlsOf(2))
	n2.link(1, n1.ln.Addr().String())
	n1.link(2, addr2)
	waitFor(t, "the link up", func() bool { return n1.status(2).Up && n2.status(1).Up })

	const sends = 200
	for i := range sends {
		msg := peerwire.Message{Group: peerwire.Group{Stream: 9, Shard: uint32(i % 3)}, Data: fmt.Appendf(nil, "m%d", i)}
		n1.sys.Root.Send(n1.linkPID(2), &PeerSend{Msgs: []peerwire.Message{msg}})
	}
	n2.sys.Root.Send(n2.linkPID(1), &PeerSend{Msgs: []peerwire.Message{{Group: peerwire.Group{Stream: 9}, Data: []byte("back")}}})
	waitFor(t, "every message at node 2", func() bool { return len(n2.received(1)) == sends })
	for i, m := range n2.received(1) {
		if string(m.Data) != fmt.Sprintf("m%d", i) || m.Group.Shard != uint32(i%3) {
			t.Fatalf("message %d at node 2: %+v", i, m)
		}
	}
	waitFor(t, "the answer at node 1", func() bool { return len(n1.received(2)) == 1 })
	if st := n1.status(2); st.Messages != sends || st.Frames == 0 || st.Frames > st.Messages || st.Dropped != 0 {
		t.Fatalf("node 1's link: %+v", st)
	}

	// Node 2 goes away.
	n2.stop()
	waitFor(t, "the link down", func() bool { return !n1.status(2).Up })
	probe := &undeliveredProbe{}
	pid := n1.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return probe }))
	n1.sys.Root.Send(n1.linkPID(2), &PeerSend{Msgs: []peerwire.Message{{Group: peerwire.Group{Stream: 9}, Data: []byte("lost")}, {Group: peerwire.Group{Stream: 9, Shard: 1}, Data: []byte("snap")}},
		Snapshot: []bool{false, true}, ReplyTo: pid})
	waitFor(t, "the drops reported", func() bool { return probe.count() == 2 })
	probe.mu.Lock()
	if probe.got[0].Snapshot || !probe.got[1].Snapshot || probe.got[1].Peer != 2 || probe.got[1].Group.Shard != 1 {
		t.Fatalf("undelivered: %+v %+v", probe.got[0], probe.got[1])
	}
	probe.mu.Unlock()

	// Node 2 is back at its address: node 1 dials it again.
	n2 = newTestPeerNode(t, 2, addr2, tlsOf(2))
	defer n2.stop()
	n2.link(1, n1.ln.Addr().String())
	waitFor(t, "the link up again", func() bool { return n1.status(2).Up })
	n1.sys.Root.Send(n1.linkPID(2), &PeerSend{Msgs: []peerwire.Message{{Group: peerwire.Group{Stream: 9}, Data: []byte("again")}}})
	waitFor(t, "the message after the reconnect", func() bool { return len(n2.received(1)) == 1 })
}

// A node whose --peers gives another node's address for a peer finds out
// at the Hello, and says which node answered.
func TestPeerLinkWrongAddress(t *testing.T) {
	d1, err := transport.DevPeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	d3, err := transport.DevPeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	n1 := newTestPeerNode(t, 1, "127.0.0.1:0", d1)
	defer n1.stop()
	n3 := newTestPeerNode(t, 3, "127.0.0.1:0", d3)
	defer n3.stop()
	n3.link(1, n1.ln.Addr().String())
	// Node 1 believes node 2 is at node 3's address.
	n1.link(2, n3.ln.Addr().String())
	waitFor(t, "the failed dial", func() bool { return n1.status(2).LastError != "" })
	if st := n1.status(2); st.Up || !strings.Contains(st.LastError, "node 3") {
		t.Fatalf("link to a wrong address: %+v", st)
	}
}

// freeUDPAddr returns a loopback UDP address nothing listens on now.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// A peer that is alive (its QUIC connection answers) but stopped reading
// does not hold the link up: once a frame's write waits out WriteTimeout
// the link goes down, and what was queued is reported undelivered.
func TestPeerLinkWriteTimeout(t *testing.T) {
	d1, err := transport.DevPeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := transport.DevPeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	n1 := newTestPeerNode(t, 1, "127.0.0.1:0", d1)
	defer n1.stop()
	// Node 2 is only a listener that answers the Hello and never reads.
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	ln, err := tr.Listen(d2.Server, &quic.Config{MaxIdleTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *quic.Conn, 1)
	go func() {
		conn, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, _, _, err := AcceptPeer(ctx, conn, 2, "", func(id uint64) bool { return id == 1 }, nil); err != nil {
			_ = conn.CloseWithError(1, err.Error())
			return
		}
		accepted <- conn // and never read
	}()
	pid := n1.sys.Root.Spawn(NewPeerLinkProps(PeerLinkConfig{Self: 1, Peer: 2, Addr: udp.LocalAddr().String(),
		Dial: PeerDialer(n1.tr, d1.Client, n1.qc), Deliver: func(uint64, []peerwire.Message) {},
		WriteTimeout: 200 * time.Millisecond, RetryMin: time.Hour, Goroutines: n1.gor}))
	defer func() { _ = n1.sys.Root.StopFuture(pid).Wait() }()
	status := func() PeerStatus {
		v, err := n1.sys.Root.RequestFuture(pid, &PeerStatusRequest{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v.(PeerStatus)
	}
	waitFor(t, "the link up", func() bool { return status().Up })
	conn := <-accepted
	defer conn.CloseWithError(0, "")
	// More than the stream's and the connection's receive windows.
	big := make([]byte, 256<<10)
	for range 64 {
		n1.sys.Root.Send(pid, &PeerSend{Msgs: []peerwire.Message{{Group: peerwire.Group{Stream: 1}, Data: big}}})
	}
	waitFor(t, "the link down on its write timeout", func() bool { return !status().Up })
	if st := status(); !strings.Contains(st.LastError, "deadline") {
		t.Fatalf("link down with %q, want the write deadline", st.LastError)
	}
}

// Under a cluster CA, a node presenting another node's certificate (both
// signed by the CA) is refused: the certificate must name the id its
// Hello claims.
func TestPeerLinkIdentityFromCertificate(t *testing.T) {
	tlsOf := clusterPeerTLS(t, 1, 2, 3)
	n1 := newTestPeerNode(t, 1, "127.0.0.1:0", tlsOf(1))
	defer n1.stop()
	// "Node 2" holds node 3's certificate.
	n2 := newTestPeerNode(t, 2, "127.0.0.1:0", tlsOf(3))
	defer n2.stop()
	n2.link(1, n1.ln.Addr().String())
	n1.link(2, n2.ln.Addr().String())
	waitFor(t, "the refused dial", func() bool { return n1.status(2).LastError != "" })
	if st := n1.status(2); st.Up || !strings.Contains(st.LastError, "herald://node/2") {
		t.Fatalf("link to a node with another's certificate: %+v", st)
	}
}

// clusterPeerTLS makes a cluster CA with a certificate for each of ids and
// returns each node's mutual TLS under it.
func clusterPeerTLS(t *testing.T, ids ...uint64) func(id uint64) transport.PeerTLS {
	t.Helper()
	certs, err := transport.NewClusterCertificates(t.TempDir(), ids)
	if err != nil {
		t.Fatal(err)
	}
	return func(id uint64) transport.PeerTLS {
		t.Helper()
		p, err := transport.ClusterTLS(certs.CAFile, certs.Nodes[id][0], certs.Nodes[id][1])
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// A peer that sends nothing, not even beats, is suspected after
// SuspectAfter, and alive again once it is heard; a link that goes down
// suspects its peer at once. (That beats keep an idle pair alive is
// TestIdleReplicatedGroupsQuiesce's: a suspicion would wake its groups.)
func TestPeerLinkBeatsAndSuspects(t *testing.T) {
	tlsOf := clusterPeerTLS(t, 1, 2)
	n1 := newTestPeerNode(t, 1, "127.0.0.1:0", tlsOf(1))
	defer n1.stop()
	addr2 := freeUDPAddr(t)
	n2 := newTestPeerNode(t, 2, addr2, tlsOf(2))
	var mu sync.Mutex
	var events []string
	note := func(e string) func(uint64) {
		return func(peer uint64) { mu.Lock(); events = append(events, fmt.Sprintf("%s %d", e, peer)); mu.Unlock() }
	}
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), events...) }
	// Node 2 never beats; node 1 beats every 20 ms and suspects after 200 ms.
	n2.linkWith(1, n1.ln.Addr().String(), func(c *PeerLinkConfig) { c.BeatEvery = time.Hour })
	n1.linkWith(2, addr2, func(c *PeerLinkConfig) {
		c.BeatEvery, c.SuspectAfter, c.OnSuspect, c.OnAlive = 20*time.Millisecond, 200*time.Millisecond, note("suspect"), note("alive")
	})
	waitFor(t, "the link up", func() bool { return n1.status(2).Up && n2.status(1).Up })
	n2.sys.Root.Send(n2.linkPID(1), &PeerSend{Msgs: []peerwire.Message{{Group: peerwire.Group{Stream: 9}, Data: []byte("hi")}}})
	// A new link starts suspecting its peer (the groups forget what an
	// earlier link told them).
	waitFor(t, "node 2 heard", func() bool { return len(seen()) >= 2 })
	waitFor(t, "node 2 suspected once silent", func() bool { return len(seen()) >= 3 })
	n2.sys.Root.Send(n2.linkPID(1), &PeerSend{Msgs: []peerwire.Message{{Group: peerwire.Group{Stream: 9}, Data: []byte("again")}}})
	waitFor(t, "node 2 alive again", func() bool { return len(seen()) >= 4 })
	if got := seen()[:4]; strings.Join(got, ",") != "suspect 2,alive 2,suspect 2,alive 2" {
		t.Fatalf("events %v", got)
	}
	n2.stop()
	waitFor(t, "node 2 suspected when its link went down", func() bool { return len(seen()) >= 5 && seen()[4] == "suspect 2" })
}
