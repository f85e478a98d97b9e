package udpproxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// patience bounds every wait for something that should happen: a test that
// passes never waits this long.
const patience = 5 * time.Second

// echoServer is a UDP server on 127.0.0.1 that sends every datagram back to
// its sender, and remembers the senders.
type echoServer struct {
	// conn is the server's socket.
	conn *net.UDPConn
	// wg waits for the serving goroutine.
	wg sync.WaitGroup

	// mu guards sources.
	mu sync.Mutex
	// sources are the addresses datagrams came from, in order of first
	// arrival.
	sources []netip.AddrPort
}

// newEcho starts an echo server, stopped at the end of the test.
func newEcho(t *testing.T) *echoServer {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{conn: conn}
	e.wg.Go(e.serve)
	t.Cleanup(func() {
		conn.Close()
		e.wg.Wait()
	})
	return e
}

func (e *echoServer) serve() {
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := e.conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		e.mu.Lock()
		if !slices.Contains(e.sources, from) {
			e.sources = append(e.sources, from)
		}
		e.mu.Unlock()
		_, _ = e.conn.WriteToUDPAddrPort(buf[:n], from)
	}
}

// addr returns the server's address as New takes it.
func (e *echoServer) addr() string { return e.conn.LocalAddr().String() }

// sourcesSoFar returns a copy of the senders seen so far.
func (e *echoServer) sourcesSoFar() []netip.AddrPort {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.sources)
}

// newProxy returns a proxy on 127.0.0.1 to target, closed at the end of the
// test.
func newProxy(t *testing.T, target string, opts ...Option) *Proxy {
	t.Helper()
	p, err := New("127.0.0.1:0", target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// newClient returns a UDP socket connected to the proxy, closed at the end
// of the test.
func newClient(t *testing.T, p *Proxy) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// send writes msg on c.
func send(t *testing.T, c *net.UDPConn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// receive reads the next datagram on c, failing the test if none comes
// within patience.
func receive(t *testing.T, c *net.UDPConn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, maxDatagram)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	return string(buf[:n])
}

// roundTrip sends msg on c and checks that the echo comes back.
func roundTrip(t *testing.T, c *net.UDPConn, msg string) {
	t.Helper()
	send(t, c, msg)
	if got := receive(t, c); got != msg {
		t.Fatalf("got %q back, want %q", got, msg)
	}
}

// nothingArrives checks that no datagram arrives on c for a short while:
// only a negative check, after the counters have shown the drops.
func nothingArrives(t *testing.T, c *net.UDPConn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, maxDatagram)
	n, err := c.Read(buf)
	if err == nil {
		t.Fatalf("got %q through a cut link", buf[:n])
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
}

// waitStats waits until d's counters reach want, failing the test if they
// do not within patience or go past it. The proxy counts a datagram once
// it has handled it, so this is how a test knows that what it sent has gone
// through the faults.
func waitStats(t *testing.T, d *Direction, want Stats) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		got := d.Stats()
		if got == want {
			return
		}
		if got.Forwarded > want.Forwarded || got.Dropped > want.Dropped || got.Failed > want.Failed || time.Now().After(deadline) {
			// Past what the test sent: no amount of waiting helps.
			t.Fatalf("%v stats %v, want %v", d, got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNewBadAddress(t *testing.T) {
	echo := newEcho(t)
	for _, tc := range []struct {
		name, listen, target string
	}{
		{"listen without port", "127.0.0.1", echo.addr()},
		{"listen bad port", "127.0.0.1:99999", echo.addr()},
		{"listen unknown port name", "127.0.0.1:nonsense", echo.addr()},
		{"target without port", "127.0.0.1:0", "127.0.0.1"},
		{"target empty", "127.0.0.1:0", ""},
		{"target port 0", "127.0.0.1:0", "127.0.0.1:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.listen, tc.target)
			if err == nil {
				p.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, ErrBadAddress) {
				t.Fatalf("error %v does not wrap ErrBadAddress", err)
			}
			t.Log(err)
		})
	}
	t.Run("listen address in use", func(t *testing.T) {
		p, err := New(echo.addr(), echo.addr())
		if err == nil {
			p.Close()
			t.Fatal("New succeeded on a port in use")
		}
		if errors.Is(err, ErrBadAddress) {
			t.Fatalf("error %v wraps ErrBadAddress, but the address was good", err)
		}
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Fatalf("error %v does not wrap the net package's", err)
		}
	})
	t.Run("the net package's error is wrapped", func(t *testing.T) {
		_, err := New("127.0.0.1", echo.addr())
		var addrErr *net.AddrError
		if !errors.As(err, &addrErr) {
			t.Fatalf("error %v does not wrap a *net.AddrError", err)
		}
	})
}

func TestPassThrough(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.addr())
	if got := p.Addr(); got.Port == 0 || !got.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("Addr() = %v", got)
	}
	if got := p.Target().String(); got != echo.addr() {
		t.Fatalf("Target() = %v, want %v", got, echo.addr())
	}
	c := newClient(t, p)
	for i := range 10 {
		roundTrip(t, c, "hello "+strconv.Itoa(i))
	}
	// The largest datagram IPv4 carries goes through whole.
	big := string(make([]byte, 65507))
	roundTrip(t, c, big)
	waitStats(t, p.Forward(), Stats{Forwarded: 11})
	waitStats(t, p.Reverse(), Stats{Forwarded: 11})
	if got := p.Sessions(); got != 1 {
		t.Fatalf("%d sessions, want 1", got)
	}
}

func TestCutAndHeal(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.addr())
	c := newClient(t, p)
	roundTrip(t, c, "before")

	p.Cut(true)
	for i := range 5 {
		send(t, c, "cut "+strconv.Itoa(i))
	}
	waitStats(t, p.Forward(), Stats{Forwarded: 1, Dropped: 5})
	nothingArrives(t, c)
	waitStats(t, p.Reverse(), Stats{Forwarded: 1})

	p.Cut(false)
	roundTrip(t, c, "healed")
	waitStats(t, p.Forward(), Stats{Forwarded: 2, Dropped: 5})
	waitStats(t, p.Reverse(), Stats{Forwarded: 2})

	// One direction only: the target gets the datagrams, its replies are
	// lost on the way back.
	p.Reverse().Cut(true)
	for i := range 3 {
		send(t, c, "half "+strconv.Itoa(i))
	}
	waitStats(t, p.Forward(), Stats{Forwarded: 5, Dropped: 5})
	waitStats(t, p.Reverse(), Stats{Forwarded: 2, Dropped: 3})
	nothingArrives(t, c)

	p.Heal()
	roundTrip(t, c, "healed again")
}

func TestDropAll(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.addr())
	c := newClient(t, p)
	p.Forward().Drop(1)
	for i := range 20 {
		send(t, c, strconv.Itoa(i))
	}
	waitStats(t, p.Forward(), Stats{Dropped: 20})
	nothingArrives(t, c)
	p.Forward().Drop(0)
	roundTrip(t, c, "after")
}

// Drop(0.5) with a seed drops exactly the datagrams the seed says (the
// forward source drawn by hand), about half, and every datagram it forwards
// comes back.
func TestDropHalfSeeded(t *testing.T) {
	const (
		seed  = 42
		n     = 256
		batch = 32 // sent at once: well within the sockets' buffers
	)
	echo := newEcho(t)
	p := newProxy(t, echo.addr(), WithSeed(seed))
	if p.Seed() != seed {
		t.Fatalf("Seed() = %d, want %d", p.Seed(), seed)
	}
	c := newClient(t, p)
	p.Forward().Drop(0.5)

	ref := rand.New(rand.NewPCG(seed, forwardStream))
	var want Stats
	for i := range n {
		if ref.Float64() < 0.5 {
			want.Dropped++
		} else {
			want.Forwarded++
		}
		send(t, c, strconv.Itoa(i))
		if (i+1)%batch == 0 {
			waitStats(t, p.Forward(), want)
		}
	}
	if want.Dropped < n*2/5 || want.Dropped > n*3/5 {
		t.Fatalf("the seed drops %d of %d: pick a seed that shows about half", want.Dropped, n)
	}
	// The replies are the forwarded datagrams, in order.
	var got []int
	for range want.Forwarded {
		i, err := strconv.Atoi(receive(t, c))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
	}
	if !slices.IsSorted(got) {
		t.Fatalf("replies out of order: %v", got)
	}
	waitStats(t, p.Reverse(), Stats{Forwarded: want.Forwarded})
	t.Logf("Drop(0.5), seed %d: forward %v", seed, p.Forward().Stats())
}

// Datagrams come back in the order they were sent, after both delays; when
// the forward delay is lowered midway, the later datagrams still come after
// the earlier ones.
func TestDelayKeepsOrder(t *testing.T) {
	const delay = 30 * time.Millisecond
	echo := newEcho(t)
	p := newProxy(t, echo.addr())
	c := newClient(t, p)
	p.Forward().Delay(delay)
	p.Reverse().Delay(delay)
	start := time.Now()
	for i := range 50 {
		if i == 25 {
			// Once the first 25 are queued: set before the proxy has
			// read them, the change would apply to them too.
			waitStats(t, p.Forward(), Stats{Queued: 25})
			p.Forward().Delay(0)
		}
		send(t, c, strconv.Itoa(i))
	}
	if got := receive(t, c); got != "0" {
		t.Fatalf("first reply %q, want 0", got)
	}
	if rtt := time.Since(start); rtt < 2*delay {
		t.Fatalf("first reply after %v, before the delays (2 × %v) were up", rtt, delay)
	}
	for i := 1; i < 50; i++ {
		if got, want := receive(t, c), strconv.Itoa(i); got != want {
			t.Fatalf("reply %q, want %q", got, want)
		}
	}
	waitStats(t, p.Forward(), Stats{Forwarded: 50})
	waitStats(t, p.Reverse(), Stats{Forwarded: 50})
}

// Each client address gets its own session, so its own upstream address at
// the target, and only its own replies.
func TestSessionsPerClient(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.addr())
	clients := make([]*net.UDPConn, 3)
	for i := range clients {
		clients[i] = newClient(t, p)
	}
	for round := range 3 {
		for i, c := range clients {
			send(t, c, fmt.Sprintf("client %d round %d", i, round))
		}
		for i, c := range clients {
			if got, want := receive(t, c), fmt.Sprintf("client %d round %d", i, round); got != want {
				t.Fatalf("client %d got %q, want %q", i, got, want)
			}
		}
	}
	if got := p.Sessions(); got != len(clients) {
		t.Fatalf("%d sessions, want %d", got, len(clients))
	}
	sources := echo.sourcesSoFar()
	if len(sources) != len(clients) {
		t.Fatalf("the target saw %d senders (%v), want %d", len(sources), sources, len(clients))
	}
	for _, c := range clients {
		if slices.Contains(sources, c.LocalAddr().(*net.UDPAddr).AddrPort()) {
			t.Fatalf("the target saw client %v itself, not a session", c.LocalAddr())
		}
	}
	waitStats(t, p.Forward(), Stats{Forwarded: 9})
	waitStats(t, p.Reverse(), Stats{Forwarded: 9})
}

// A target that is not listening: the datagrams are handled (Linux reports
// the port unreachable on the session's socket, on a send or the session's
// read), the proxy keeps running, and once a target listens there again the
// datagrams go through on the same session.
func TestTargetDown(t *testing.T) {
	echo := newEcho(t)
	addr := echo.addr()
	echo.conn.Close()
	echo.wg.Wait()
	p := newProxy(t, addr)
	c := newClient(t, p)
	for i := range 5 {
		send(t, c, strconv.Itoa(i))
	}
	deadline := time.Now().Add(patience)
	for s := p.Forward().Stats(); s.Forwarded+s.Failed < 5; s = p.Forward().Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("forward stats %v, want 5 handled", s)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("target down: forward %v", p.Forward().Stats())

	conn, err := net.ListenUDP("udp", echo.conn.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatalf("cannot listen on the target's port again: %v", err)
	}
	restarted := &echoServer{conn: conn}
	restarted.wg.Go(restarted.serve)
	t.Cleanup(func() {
		conn.Close()
		restarted.wg.Wait()
	})
	roundTrip(t, c, "up again")
	if got := p.Sessions(); got != 1 {
		t.Fatalf("%d sessions, want the one", got)
	}
}

// Close stops every goroutine before it returns, with sessions open and
// datagrams waiting out a delay; it closes the sockets, and may be called
// again. Faults and counters still work afterwards.
func TestCloseStopsEverything(t *testing.T) {
	echo := newEcho(t)
	before := len(proxyGoroutines())
	p, err := New("127.0.0.1:0", echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := newClient(t, p), newClient(t, p)
	roundTrip(t, c1, "one")
	roundTrip(t, c2, "two")
	p.Delay(time.Hour)
	send(t, c1, "queued")
	waitStats(t, p.Forward(), Stats{Forwarded: 2, Queued: 1})
	if got := len(proxyGoroutines()); got != before+5 {
		t.Fatalf("%d proxy goroutines running, want 5 (listen, 2 sessions, 2 queues)", got-before)
	}
	p.mu.Lock()
	var upstreams []*net.UDPConn
	for _, s := range p.mu.sessions {
		upstreams = append(upstreams, s.upstream)
	}
	p.mu.Unlock()

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := p.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if leaks := proxyGoroutines(); len(leaks) != before {
				t.Errorf("Close returned with %d proxy goroutines running:\n%v", len(leaks)-before, leaks)
			}
		})
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}

	// The listening port is free again, and the sessions' sockets are
	// closed.
	relisten, err := net.ListenUDP("udp", p.Addr())
	if err != nil {
		t.Fatalf("listening socket still open: %v", err)
	}
	relisten.Close()
	for _, u := range upstreams {
		if _, err := u.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("session socket still open: write error %v", err)
		}
	}

	p.Cut(true)
	p.Heal()
	if got := p.Forward().Stats(); got.Forwarded != 2 {
		t.Fatalf("forward stats after Close %v, want 2 forwarded", got)
	}
}

// withSend makes the proxy's directions send with f.
func withSend(f func(packet) error) Option {
	return func(c *config) { c.send = f }
}

// Close waits for a goroutine that is busy sending: it does not return
// until the send does and the goroutine has returned.
func TestCloseWaitsForGoroutines(t *testing.T) {
	echo := newEcho(t)
	entered, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // should the test fail before it releases
	var once sync.Once
	p, err := New("127.0.0.1:0", echo.addr(), withSend(func(pkt packet) error {
		once.Do(func() {
			close(entered)
			<-release
		})
		return sendPacket(pkt)
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, p)
	send(t, c, "held")
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the listen goroutine was still sending", err)
	case <-time.After(50 * time.Millisecond):
	}
	releaseOnce()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if leaks := proxyGoroutines(); len(leaks) > 0 {
		t.Fatalf("Close returned with %d proxy goroutines running:\n%v", len(leaks), leaks)
	}
}
