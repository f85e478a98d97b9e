package udpproxy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxQueuedBytes bounds the datagrams one direction holds while they wait
// out a delay, as a router's buffer would: a datagram that would take the
// queue past it is dropped (and counted in Stats.Dropped).
const maxQueuedBytes = 16 << 20

// Stats counts the datagrams that went one way through a proxy. Each
// datagram read is counted once in Forwarded, Dropped or Failed when the
// proxy is done with it: at once, or when its delay is up; until then it is
// among the Queued. Datagrams still queued when the proxy closes are never
// counted as done.
type Stats struct {
	// Forwarded counts the datagrams sent on to their destination.
	Forwarded uint64
	// Dropped counts the datagrams dropped by a fault: the direction was
	// cut (including those waiting out a delay when it was cut), the Drop
	// probability came up, or the delay queue was full.
	Dropped uint64
	// Failed counts the datagrams that could not be sent: the socket
	// returned an error (a port unreachable from a stopped target is
	// retried once, see sendPacket), or a new session's socket could not be
	// created. A datagram sent to a target that is down is usually
	// Forwarded, as it would be on a network.
	Failed uint64
	// Queued is the number of datagrams waiting out a delay now (not a
	// counter): a test that sets a fault after sending knows from it that
	// the proxy has read what it sent.
	Queued int
}

// String formats s for test logs and notes.
func (s Stats) String() string {
	return fmt.Sprintf("forwarded %d, dropped %d, failed %d, queued %d", s.Forwarded, s.Dropped, s.Failed, s.Queued)
}

// packet is one datagram on its way through a Direction.
type packet struct {
	// data is the payload. When handed to Direction.handle it may be the
	// reader's buffer; a queued packet owns a copy.
	data []byte
	// conn is the socket to send on: a session's upstream socket (connected
	// to the target) going forward, the listening socket going back.
	conn *net.UDPConn
	// to is the client to send to on the listening socket; the zero value
	// for a connected socket.
	to netip.AddrPort
	// due is when a queued packet's delay is up.
	due time.Time
}

// sendPacket writes pkt on its socket. A connected socket reports the port
// unreachable that an earlier datagram drew (the target is down) as the
// error of the next send, which is then not sent: sendPacket tries that
// datagram once more, so that it meets the target's fate (delivered if the
// target is back) rather than its predecessor's.
func sendPacket(pkt packet) error {
	err := writePacket(pkt)
	if errors.Is(err, syscall.ECONNREFUSED) {
		err = writePacket(pkt)
	}
	return err
}

// writePacket writes pkt on its socket once.
func writePacket(pkt packet) error {
	if pkt.to.IsValid() {
		_, err := pkt.conn.WriteToUDPAddrPort(pkt.data, pkt.to)
		return err
	}
	_, err := pkt.conn.Write(pkt.data)
	return err
}

// Direction is one way through a Proxy (Proxy.Forward or Proxy.Reverse) and
// the faults applied to it. Its methods are safe to call from any goroutine,
// at any time, including after the proxy is closed. A fault applies to the
// datagrams that arrive after it is set; Cut(true) also drops those already
// waiting out a delay.
//
// The faults apply in this order: a cut direction drops everything; else a
// datagram is dropped with the Drop probability; else it waits out the
// Delay and is sent. Datagrams leave in the order they arrived: lowering the
// delay does not let a new datagram overtake one already queued.
type Direction struct {
	// name is "forward" or "reverse", for String.
	name string
	// send writes one packet; sendPacket but in tests. Set at construction.
	send func(packet) error
	// queueLimit is the most bytes the queue holds (maxQueuedBytes but in
	// tests). Set at construction.
	queueLimit int
	// wake is signalled, without blocking, when a packet is queued; run
	// waits on it while the queue is empty.
	wake chan struct{}
	// done is closed when the proxy closes; run returns then.
	done <-chan struct{}

	// mu guards the faults and the queue. It is never held while sending,
	// nor together with Proxy.mu.
	mu struct {
		sync.Mutex
		// cut drops every datagram.
		cut bool
		// drop is the probability of dropping each datagram, in [0, 1].
		drop float64
		// rng decides the drops; it is drawn only when 0 < drop < 1, so
		// that with a seed the decisions depend only on the seed and the
		// number of datagrams that met a fractional drop.
		rng *rand.Rand
		// delay is how long each datagram waits before it is sent.
		delay time.Duration
		// queue holds the packets waiting out a delay, in arrival order;
		// run sends its head when the head is due.
		queue []packet
		// queued is the sum of the queued packets' sizes.
		queued int
		// sending is set while run sends a packet it took off the queue,
		// so that handle does not send a later packet ahead of it.
		sending bool
	}

	// forwarded, dropped and failed are the counters of Stats.
	forwarded, dropped, failed atomic.Uint64
}

// newDirection returns a direction with no faults whose drops are decided by
// rng. Its queue goroutine, run, is started by the caller and returns when
// done is closed.
func newDirection(name string, rng *rand.Rand, done <-chan struct{}, send func(packet) error) *Direction {
	d := &Direction{
		name:       name,
		send:       send,
		queueLimit: maxQueuedBytes,
		wake:       make(chan struct{}, 1),
		done:       done,
	}
	d.mu.rng = rng
	return d
}

// String returns "forward" or "reverse".
func (d *Direction) String() string { return d.name }

// Cut cuts the direction (true: drop every datagram, including those
// waiting out a delay) or heals the cut (false). Drop and Delay are kept
// while cut and apply again once healed.
func (d *Direction) Cut(cut bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.cut = cut
	if !cut || len(d.mu.queue) == 0 {
		return
	}
	d.dropped.Add(uint64(len(d.mu.queue)))
	clear(d.mu.queue)
	d.mu.queue = d.mu.queue[:0]
	d.mu.queued = 0
}

// Drop drops each datagram that arrives afterwards with probability p: 0
// drops none, 1 drops all. Drop panics if p is not in [0, 1] (a NaN
// included), as a probability outside it is a bug in the caller.
func (d *Direction) Drop(p float64) {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("udpproxy: drop probability %v is not in [0, 1]", p))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.drop = p
}

// Delay holds each datagram that arrives afterwards for delay before sending
// it; 0 (or a negative delay) sends at once. Datagrams already queued keep
// the delay they arrived with, and none is sent before those that arrived
// earlier.
func (d *Direction) Delay(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.delay = max(delay, 0)
}

// Heal clears every fault: not cut, no drops, no delay. Datagrams already
// waiting out a delay are still sent when due.
func (d *Direction) Heal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.cut = false
	d.mu.drop = 0
	d.mu.delay = 0
}

// Stats returns the direction's counters so far. The fields are not one
// snapshot (a datagram just taken off the queue to be sent is in none of
// them for a moment): read them once the traffic a test counts has been
// handled.
func (d *Direction) Stats() Stats {
	d.mu.Lock()
	queued := len(d.mu.queue)
	d.mu.Unlock()
	return Stats{
		Forwarded: d.forwarded.Load(),
		Dropped:   d.dropped.Load(),
		Failed:    d.failed.Load(),
		Queued:    queued,
	}
}

// handle passes one datagram that arrived in this direction through the
// faults: it drops it, sends it at once, or queues a copy for run. pkt.data
// may be the caller's read buffer: handle does not keep it.
func (d *Direction) handle(pkt packet) {
	d.mu.Lock()
	if d.dropLocked() {
		d.mu.Unlock()
		d.dropped.Add(1)
		return
	}
	if d.mu.delay == 0 && len(d.mu.queue) == 0 && !d.mu.sending {
		d.mu.Unlock()
		d.sendCounted(pkt)
		return
	}
	if d.mu.queued+len(pkt.data) > d.queueLimit {
		d.mu.Unlock()
		d.dropped.Add(1)
		return
	}
	pkt.data = bytes.Clone(pkt.data)
	pkt.due = time.Now().Add(d.mu.delay)
	wasEmpty := len(d.mu.queue) == 0
	d.mu.queue = append(d.mu.queue, pkt)
	d.mu.queued += len(pkt.data)
	d.mu.Unlock()
	if wasEmpty {
		// run waits for the queue to fill, or for a head that Cut may
		// have dropped since: either way it must look again.
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// dropLocked decides whether the next datagram is dropped.
func (d *Direction) dropLocked() bool {
	switch {
	case d.mu.cut:
		return true
	case d.mu.drop == 0:
		return false
	case d.mu.drop == 1:
		return true
	default:
		return d.mu.rng.Float64() < d.mu.drop
	}
}

// sendCounted sends pkt and counts the outcome.
func (d *Direction) sendCounted(pkt packet) {
	if err := d.send(pkt); err != nil {
		d.failed.Add(1)
		return
	}
	d.forwarded.Add(1)
}

// run is the direction's queue goroutine: it sends each queued packet when
// it is due, in queue order, and returns when done is closed (discarding
// what is still queued). It sleeps on a timer or on wake, never polls.
func (d *Direction) run() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		d.mu.Lock()
		d.mu.sending = false
		if len(d.mu.queue) == 0 {
			d.mu.Unlock()
			select {
			case <-d.wake:
				continue
			case <-d.done:
				return
			}
		}
		pkt := d.mu.queue[0]
		if wait := time.Until(pkt.due); wait > 0 {
			d.mu.Unlock()
			// Only Cut changes the head while we wait, by emptying the
			// queue; the next packet queued then signals wake, and may
			// be due before this one was.
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-d.wake:
				timer.Stop()
			case <-d.done:
				timer.Stop()
				return
			}
			continue
		}
		d.mu.queue[0] = packet{}
		d.mu.queue = d.mu.queue[1:]
		d.mu.queued -= len(pkt.data)
		d.mu.sending = true
		d.mu.Unlock()
		d.sendCounted(pkt)
	}
}
