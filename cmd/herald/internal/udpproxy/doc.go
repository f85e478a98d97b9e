// Package udpproxy is a UDP proxy for fault tests: put one between two nodes
// (whose traffic is QUIC over UDP) and it drops, delays or cuts the link in
// either direction, and heals it, while the test runs.
//
// A Proxy listens on one UDP address and forwards every datagram it reads
// there to one target address. Each client address gets its own session: an
// upstream socket connected to the target, created on the client's first
// datagram, so that the target's replies on that socket go back to that
// client. Sessions live until the proxy is closed.
//
// Each way through the proxy is a Direction: Forward carries datagrams from
// clients to the target, Reverse carries the target's replies back. A
// Direction's faults (Cut, Drop, Delay) are set from any goroutine at any
// time, apply to the datagrams that arrive afterwards, and are counted in its
// Stats, so a test asserts on what the proxy did rather than on timeouts.
// The Proxy's own Cut, Drop, Delay and Heal set both directions at once.
//
// Goroutines: a proxy runs one reader on its listening socket, one reader
// per session, and one queue goroutine per direction that sends delayed
// datagrams when they are due (no goroutine per datagram, no polling).
// Close stops them all and returns once they have returned.
//
// Typical use between two nodes of a test cluster:
//
//	p, err := udpproxy.New("127.0.0.1:0", nodeB.Addr, udpproxy.WithSeed(1))
//	// node A dials p.Addr() instead of node B
//	p.Cut(true)                               // partition A from B
//	p.Reverse().Drop(0.3)                     // or lose 30% of B's replies
//	p.Heal()                                  // back to a clean link
//	t.Logf("A->B %v, B->A %v", p.Forward().Stats(), p.Reverse().Stats())
package udpproxy
