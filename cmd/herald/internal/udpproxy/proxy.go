package udpproxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"
)

// ErrBadAddress is returned (wrapped, with the net package's error beside
// it) by New when the listening or target address cannot be resolved, or
// the target has port 0.
var ErrBadAddress = errors.New("udpproxy: bad address")

// maxDatagram is the size of the read buffers: a UDP datagram's length field
// is 16 bits, so no datagram is longer (the largest over IPv4 is 65,507
// bytes), and a read never truncates one.
const maxDatagram = 64 << 10

// socketBuffer is the kernel buffer asked for on each socket, as quic-go
// asks for its own: bursts of QUIC packets then queue in the kernel rather
// than being lost before the proxy reads them. The kernel caps it at
// net.core.rmem_max and wmem_max.
const socketBuffer = 4 << 20

// The streams of the two directions' random sources, so that with one seed
// they draw different sequences.
const (
	forwardStream = 0x666f7277617264 // "forward"
	reverseStream = 0x72657665727365 // "reverse"
)

// Option configures New.
type Option func(*config)

// config is what the options set.
type config struct {
	// seed seeds the random sources of Drop, if seeded.
	seed uint64
	// seeded is set by WithSeed.
	seeded bool
	// send replaces sendPacket in both directions, if set: a test seam.
	send func(packet) error
}

// WithSeed seeds the random sources that decide Drop's drops, so that a run
// drops the same datagrams, by their position in each direction, every time.
// Without it the seed is random; Proxy.Seed reports it either way.
func WithSeed(seed uint64) Option {
	return func(c *config) {
		c.seed = seed
		c.seeded = true
	}
}

// Proxy forwards UDP datagrams between clients and one target, through the
// faults of its two Directions. Create it with New and stop it with Close.
// Its methods are safe to call from any goroutine.
type Proxy struct {
	// listen is the socket clients send to: listenLoop reads it and the
	// reverse direction sends on it.
	listen *net.UDPConn
	// target is the address every session's upstream socket is connected
	// to.
	target *net.UDPAddr
	// seed seeded the directions' random sources.
	seed uint64
	// forward carries datagrams from clients to the target, reverse the
	// target's replies back.
	forward, reverse *Direction
	// done is closed by Close to stop the directions' queue goroutines.
	done chan struct{}
	// wg counts every goroutine the proxy started; Close waits for it.
	wg sync.WaitGroup
	// closeOnce makes Close idempotent; closeErr is what it returns.
	closeOnce sync.Once
	closeErr  error

	// mu guards the sessions. It is never held during I/O, nor together
	// with a Direction's mu.
	mu struct {
		sync.Mutex
		// closed is set by Close; no session is added afterwards.
		closed bool
		// sessions maps each client address to its session. Only
		// listenLoop adds to it, and nothing removes from it.
		sessions map[netip.AddrPort]*session
	}
}

// session is one client's path to the target.
type session struct {
	// client is the client's address, where replies go.
	client netip.AddrPort
	// upstream is connected to the target: forwarded datagrams are sent
	// on it and sessionLoop reads the replies from it. Close closes it.
	upstream *net.UDPConn
}

// New listens on the UDP address listen (such as "127.0.0.1:0"; Addr
// reports the port chosen) and forwards to the UDP address target, with no
// faults set. The error wraps ErrBadAddress if an address does not resolve
// or the target has port 0, or is the net package's error if the proxy
// cannot listen. The caller must Close the proxy.
func New(listen, target string, opts ...Option) (*Proxy, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.seeded {
		cfg.seed = rand.Uint64()
	}
	if cfg.send == nil {
		cfg.send = sendPacket
	}
	laddr, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return nil, fmt.Errorf("%w: listen %q: %w", ErrBadAddress, listen, err)
	}
	taddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("%w: target %q: %w", ErrBadAddress, target, err)
	}
	if taddr.Port == 0 {
		return nil, fmt.Errorf("%w: target %q: port 0 is not a destination", ErrBadAddress, target)
	}
	conn, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: listen on %s: %w", laddr, err)
	}
	setBuffers(conn)
	p := &Proxy{
		listen: conn,
		target: taddr,
		seed:   cfg.seed,
		done:   make(chan struct{}),
	}
	p.forward = newDirection("forward", rand.New(rand.NewPCG(cfg.seed, forwardStream)), p.done, cfg.send)
	p.reverse = newDirection("reverse", rand.New(rand.NewPCG(cfg.seed, reverseStream)), p.done, cfg.send)
	p.mu.sessions = make(map[netip.AddrPort]*session)
	p.wg.Go(p.forward.run)
	p.wg.Go(p.reverse.run)
	p.wg.Go(p.listenLoop)
	return p, nil
}

// setBuffers asks for socketBuffer on c. It is best effort: the kernel
// silently caps the sizes, and a proxy with smaller buffers still works.
func setBuffers(c *net.UDPConn) {
	_ = c.SetReadBuffer(socketBuffer)
	_ = c.SetWriteBuffer(socketBuffer)
}

// Addr returns the address the proxy listens on: where clients send.
func (p *Proxy) Addr() *net.UDPAddr { return p.listen.LocalAddr().(*net.UDPAddr) }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() *net.UDPAddr { return p.target }

// Seed returns the seed of the random sources that decide drops (given to
// WithSeed, or chosen by New): log it to replay a run's drops.
func (p *Proxy) Seed() uint64 { return p.seed }

// Forward returns the direction from clients to the target.
func (p *Proxy) Forward() *Direction { return p.forward }

// Reverse returns the direction from the target back to the clients.
func (p *Proxy) Reverse() *Direction { return p.reverse }

// Cut cuts both directions (true) or heals both cuts (false); see
// Direction.Cut.
func (p *Proxy) Cut(cut bool) {
	p.forward.Cut(cut)
	p.reverse.Cut(cut)
}

// Drop sets the drop probability of both directions; see Direction.Drop.
func (p *Proxy) Drop(prob float64) {
	p.forward.Drop(prob)
	p.reverse.Drop(prob)
}

// Delay sets the delay of both directions; see Direction.Delay.
func (p *Proxy) Delay(delay time.Duration) {
	p.forward.Delay(delay)
	p.reverse.Delay(delay)
}

// Heal clears every fault of both directions; see Direction.Heal.
func (p *Proxy) Heal() {
	p.forward.Heal()
	p.reverse.Heal()
}

// Sessions returns the number of client addresses the proxy has seen, each
// with its own upstream socket.
func (p *Proxy) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.sessions)
}

// Close stops the proxy: it closes the listening socket and every session's
// socket, discards the datagrams waiting out a delay, and returns once every
// goroutine the proxy started has returned. It is idempotent, and safe to
// call concurrently: every call returns after the proxy has stopped, the
// first close's error (from closing the sockets) or nil.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.mu.closed = true
		sessions := p.mu.sessions
		p.mu.Unlock()
		close(p.done)
		errs := []error{p.listen.Close()}
		for _, s := range sessions {
			errs = append(errs, s.upstream.Close())
		}
		p.wg.Wait()
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// listenLoop reads the datagrams clients send and passes each to the
// forward direction, on its client's session. It returns when Close closes
// the socket.
func (p *Proxy) listenLoop() {
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := p.listen.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Anything else is reported once for a past event (an ICMP
			// error, on platforms that report them on unconnected
			// sockets) and is no reason to stop.
			continue
		}
		s, err := p.session(from)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			p.forward.failed.Add(1)
			continue
		}
		p.forward.handle(packet{data: buf[:n], conn: s.upstream})
	}
}

// session returns the session of client, creating it (and starting its
// reader) on the client's first datagram. The error is net.ErrClosed once
// the proxy is closing, or the error creating the upstream socket.
func (p *Proxy) session(client netip.AddrPort) (*session, error) {
	p.mu.Lock()
	s, closed := p.mu.sessions[client], p.mu.closed
	p.mu.Unlock()
	switch {
	case closed:
		return nil, net.ErrClosed
	case s != nil:
		return s, nil
	}
	upstream, err := net.DialUDP("udp", nil, p.target)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: session for %s: %w", client, err)
	}
	setBuffers(upstream)
	s = &session{client: client, upstream: upstream}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		// Close did not see this socket: close it here.
		_ = upstream.Close()
		return nil, net.ErrClosed
	}
	p.mu.sessions[client] = s
	p.wg.Go(func() { p.sessionLoop(s) })
	return s, nil
}

// sessionLoop reads the target's replies to s and passes each to the
// reverse direction, addressed to s's client. It returns when Close closes
// the socket.
func (p *Proxy) sessionLoop(s *session) {
	buf := make([]byte, maxDatagram)
	for {
		n, err := s.upstream.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// A connected socket reports each ICMP error (the target's
			// port unreachable while it is down) once, on a read or a
			// send: the socket still works.
			continue
		}
		p.reverse.handle(packet{data: buf[:n], conn: p.listen, to: s.client})
	}
}
