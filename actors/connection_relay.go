package actors

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/wire"
)

// Group relays. The consumer groups of a cluster stream are coordinated by
// the leader of its shard 0 (shard_groups.go), but a client may be
// connected to any node. A node that does not coordinate a group passes the
// client's group traffic on to the node that does, over a relay
// connection: a QUIC connection to that node's cluster listener (ALPN
// peerwire.RelayALPN, the peer TLS), opened per client connection and
// coordinating node, that speaks the client protocol after a RelayHello
// naming the client's principal. The coordinating node serves it as it
// would the client (a connection actor, push members, lanes, credit), so
// the credit window, the heartbeat and every rule hold exactly as on one
// node; the relaying node only copies frames:
//
//   - a pull request (poll, ack, nack, dead letters, describe, seek, ...)
//     goes on the relay's control stream as the client sent it, and its
//     answer comes back to the client's control lane with the same request
//     id;
//   - a push member's stream is copied both ways, frame by frame, on a
//     stream of its own.
//
// A relayed connection never relays again: a request for a group this
// node does not coordinate is answered not_leader naming the leader, and
// the relaying node sends it there (at most relayHops times). When the
// relay is lost (the coordinating node died, or stopped leading and
// drained), what waits is answered so the client comes again: a push
// member's stream ends with not_leader (the Go client joins again at
// once, on the same connection), a poll or a read-only request is answered
// not_leader, and a request that may have changed the group (an ack, a
// nack, a seek, ...) replication_timeout: its outcome is unknown.

// GroupRelay is a cluster node's dialler of relay connections. It is
// shared by the node's connections: what it learns of unreachable nodes
// serves them all.
type GroupRelay struct {
	// Self is this node's id.
	Self uint64
	// Dial opens a relay connection to node's cluster listener.
	Dial func(ctx context.Context, node uint64) (*quic.Conn, error)
	// Timeout bounds a dial and its hello (default 5 s).
	Timeout time.Duration
	// Now is the clock of unreachable (nil: time.Now).
	Now func() time.Time
	// unreachable holds, by node, until when a node whose relay could not
	// be dialled is passed over by groupRoute.
	unreachable sync.Map
	// leaders holds, by stream id, the node that a relayed request was
	// last sent on to (a not_leader named it): where a node without a
	// replica of the stream's shard 0 sends the stream's group traffic.
	leaders sync.Map
}

// relayUnreachableFor is how long a node whose relay failed to dial is
// passed over, where another replica of shard 0 can be asked instead.
const relayUnreachableFor = 10 * time.Second

// learned records that node coordinates stream's groups (a not_leader
// named it).
func (r *GroupRelay) learned(stream, node uint64) {
	if stream != 0 && node != 0 {
		r.leaders.Store(stream, node)
	}
}

func (r *GroupRelay) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// markUnreachable notes that node's relay could not be dialled.
func (r *GroupRelay) markUnreachable(node uint64) {
	r.unreachable.Store(node, r.now().Add(relayUnreachableFor))
}

// reachable reports whether node is not known to be unreachable.
func (r *GroupRelay) reachable(node uint64) bool {
	v, ok := r.unreachable.Load(node)
	if !ok {
		return true
	}
	if r.now().After(v.(time.Time)) {
		r.unreachable.CompareAndDelete(node, v)
		return true
	}
	return false
}

// RelayAccept is how a connection that arrived as a relay (on the cluster
// listener, ALPN peerwire.RelayALPN) is checked: its RelayHello must come
// from a known peer, to this node, and, with peers authenticated, from the
// node its certificate names.
type RelayAccept struct {
	Self  uint64
	Known func(id uint64) bool
	// CheckIdentity checks that the peer's certificate names the node id
	// its hello claims; nil when peers are not authenticated (development
	// peer TLS): the relayed principal is then not trusted, and the
	// client's token is authenticated here instead.
	CheckIdentity func(certs []*x509.Certificate, id uint64) error
}

// relayHops bounds how often one request follows a not_leader to another
// node.
const relayHops = 3

// relayQueue bounds the pull requests a relay holds unwritten.
const relayQueue = 1024

// relayConn is one relay connection of a client connection, to one node.
// Its writer goroutine dials it and writes the queued requests on the
// control stream; its reader goroutine hands the answers back. Everything
// under mu is shared by them and the session's goroutines.
type relayConn struct {
	cs   *connSession
	node uint64
	out  chan *relayReq
	// ready is closed once the connection is up (conn set) or failed
	// (err set).
	ready chan struct{}
	mu    struct {
		sync.Mutex
		// conn is the connection once dialled.
		conn *quic.Conn
		// pending are the requests written and not answered, by id.
		pending map[uint64]*relayReq
		// err is set once the relay failed; nothing is sent after it.
		err error
	}
}

// relayReq is a pull request relayed: the client's frame as it came, and
// where its answer goes.
type relayReq struct {
	frame []byte
	id    uint64
	lane  *actor.PID
	// stream is the request's stream id (where a redirect is learned).
	stream uint64
	// settles is set for a request that may change the group (its loss
	// is outcome unknown); hops counts the redirects followed.
	settles bool
	hops    int
}

// groupRoute says where h's group requests are served: here (relay
// false), or by the coordinator on node (relay true; node 0: no leader
// known, answered not_leader). A single node's streams, and every request
// on a relayed connection, are served here.
//
// A node that holds no replica of shard 0 knows only where the shard's
// replicas are, and asks its preferred one first (which names the leader
// if it does not lead); while that one cannot be reached (its relay failed
// to dial lately), it asks the others in turn.
func (cs *connSession) groupRoute(h *StreamHandle) (node uint64, relay bool) {
	r := cs.cfg.Relay
	if r == nil || !groupsClustered(h) || cs.relayAccept != nil {
		return 0, false
	}
	lead := groupLeaderHint(h)
	if lead == r.Self {
		return 0, false
	}
	if len(h.Progress) == 0 || h.Progress[0] == nil {
		return lead, true
	}
	reps := h.Progress[0].Remote.Load()
	if reps == nil {
		return lead, true // a replica here knows the leader
	}
	if v, ok := r.leaders.Load(h.ID); ok && r.reachable(v.(uint64)) && slices.Contains(*reps, v.(uint64)) {
		return v.(uint64), true
	}
	if lead != 0 && !r.reachable(lead) {
		for _, n := range *reps {
			if n != lead && n != r.Self && r.reachable(n) {
				return n, true
			}
		}
	}
	return lead, true
}

// relayTo returns the relay connection to node, starting it if there is
// none (or the last one failed).
func (cs *connSession) relayTo(node uint64) *relayConn {
	cs.relays.Lock()
	if rc := cs.relays.m[node]; rc != nil && rc.failed() == nil {
		cs.relays.Unlock()
		return rc
	}
	if cs.relays.m == nil {
		cs.relays.m = map[uint64]*relayConn{}
	}
	rc := &relayConn{cs: cs, node: node, out: make(chan *relayReq, relayQueue), ready: make(chan struct{})}
	rc.mu.pending = map[uint64]*relayReq{}
	cs.relays.m[node] = rc
	cs.relays.Unlock()
	if !cs.cfg.Goroutines.Go(rc.run) {
		rc.fail(errSessionShutdown)
		close(rc.ready)
	}
	return rc
}

// failed returns why the relay failed (nil: it has not).
func (rc *relayConn) failed() error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.mu.err
}

// connection returns the relay's connection (nil before it is up, or
// after it failed).
func (rc *relayConn) connection() *quic.Conn {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.mu.err != nil {
		return nil
	}
	return rc.mu.conn
}

// retire makes the session's next requests for the node open a new relay
// (this one's node sent GoAway); this one answers what it has.
func (rc *relayConn) retire() {
	cs := rc.cs
	cs.relays.Lock()
	if cs.relays.m[rc.node] == rc {
		delete(cs.relays.m, rc.node)
	}
	cs.relays.Unlock()
}

// relayRequest relays a pull request to node, answering on lane; the
// caller has counted it in the lane's answer meter (Dispatch).
func (cs *connSession) relayRequest(node uint64, lane *actor.PID, f wire.Frame, stream uint64) {
	req := &relayReq{frame: wire.AppendFrame(nil, f.Header.Type, f.Header.Flags, f.Header.RequestID, f.Body), id: f.Header.RequestID,
		lane: lane, settles: relaySettles(f.Header.Type), stream: stream}
	cs.sendRelayed(node, req)
}

// relaySettles reports whether a request of type t may change the group.
func relaySettles(t wire.Type) bool {
	switch t {
	case wire.TypeGroupPoll, wire.TypeGroupDeadLetters, wire.TypeDescribeGroup, wire.TypeListGroups:
		return false
	}
	return true
}

// sendRelayed hands req to the relay to node, or answers it when there is
// no coordinator to send it to.
//
// A request is queued only on a relay that has not failed, under its lock:
// a relay that fails takes every request queued before it failed, and
// none after (those go to a new relay).
func (cs *connSession) sendRelayed(node uint64, req *relayReq) {
	switch {
	case node == 0:
		cs.answerRelayed(req, &wire.Error{Code: wire.CodeNotLeader, Message: "no node is known to coordinate this stream's consumer groups (its shard 0 is electing a leader); retry shortly"})
		return
	case node == cs.cfg.Relay.Self:
		// This node leads shard 0 now (the coordinator named it): the
		// request comes again, and is served here.
		cs.answerRelayed(req, &wire.Error{Code: wire.CodeNotLeader, Detail: node, Message: "this node coordinates the group now; retry"})
		return
	}
	for range 2 {
		rc := cs.relayTo(node)
		rc.mu.Lock()
		if rc.mu.err != nil {
			rc.mu.Unlock()
			continue // failed meanwhile: a new one
		}
		select {
		case rc.out <- req:
			rc.mu.Unlock()
		default:
			rc.mu.Unlock()
			cs.answerRelayed(req, wire.Errorf(wire.CodeOverloaded, "too many group requests on their way to node %d; retry after a delay", node))
		}
		return
	}
	cs.answerRelayed(req, wire.Errorf(wire.CodeNotLeader, "node %d, which coordinates the group, cannot be reached; retry", node))
}

// answerRelayed answers a relayed request with err.
func (cs *connSession) answerRelayed(req *relayReq, err *wire.Error) {
	cs.root.Send(req.lane, &WriteFrame{Frame: wire.AppendError(nil, req.id, err), Dispatched: true})
}

// lostError is what a relayed request is answered when its relay is lost.
func (req *relayReq) lostError(node uint64, cause error) *wire.Error {
	if req.settles {
		return wire.Errorf(wire.CodeReplicationTimeout, "the connection to node %d, which coordinates the group, was lost before it answered (%v); the request may or may not have been applied", node, cause)
	}
	return wire.Errorf(wire.CodeNotLeader, "the connection to node %d, which coordinates the group, was lost (%v); retry", node, cause)
}

// run dials the relay, then writes what is queued until the session ends
// or the relay fails.
func (rc *relayConn) run() {
	cs := rc.cs
	conn, ctl, err := rc.dial()
	if err != nil {
		cs.cfg.Relay.markUnreachable(rc.node)
		rc.fail(err)
		close(rc.ready)
		return
	}
	rc.mu.Lock()
	rc.mu.conn = conn
	rc.mu.Unlock()
	close(rc.ready)
	if !cs.cfg.Goroutines.Go(func() { rc.read(ctl) }) {
		rc.fail(errSessionShutdown)
		return
	}
	for {
		select {
		case <-cs.ctx.Done():
			rc.fail(errSessionShutdown)
			return
		case <-conn.Context().Done():
			rc.fail(fmt.Errorf("relay connection closed: %w", context.Cause(conn.Context())))
			return
		case req := <-rc.out:
			rc.mu.Lock()
			if rc.mu.err != nil {
				rc.mu.Unlock()
				cs.answerRelayed(req, req.lostError(rc.node, rc.mu.err))
				continue
			}
			rc.mu.pending[req.id] = req
			rc.mu.Unlock()
			if _, err := ctl.Write(req.frame); err != nil {
				rc.fail(err)
				return
			}
		}
	}
}

// dial opens the relay connection and its control stream and exchanges
// the hello: a RelayHello naming the client's principal, answered with a
// Welcome (or an Error, which fails the relay).
func (rc *relayConn) dial() (*quic.Conn, *quic.Stream, error) {
	cs, r := rc.cs, rc.cs.cfg.Relay
	ctx, cancel := context.WithTimeout(cs.ctx, cmpDuration(r.Timeout, 5*time.Second))
	defer cancel()
	conn, err := r.Dial(ctx, rc.node)
	if err != nil {
		return nil, nil, fmt.Errorf("dialling node %d: %w", rc.node, err)
	}
	fail := func(err error) (*quic.Conn, *quic.Stream, error) {
		_ = conn.CloseWithError(0, "relay failed")
		return nil, nil, err
	}
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(err)
	}
	p := cs.principal
	hello := peerwire.RelayHello{Version: peerwire.Version, From: r.Self, To: rc.node, Token: cs.token,
		Principal: peerwire.RelayPrincipal{Name: p.Name, Tenant: p.Tenant, Any: p.Any, Perms: uint8(p.Perms), Namespaces: p.Namespaces}}
	if err := hello.Validate(); err != nil {
		return fail(err)
	}
	if _, err := ctl.Write(peerwire.AppendRelayHello(nil, hello)); err != nil {
		return fail(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = ctl.SetReadDeadline(dl)
	}
	f, err := wire.ReadFrame(ctl, cs.cfg.MaxFrameBytes)
	if err != nil {
		return fail(fmt.Errorf("node %d's answer to the relay hello: %w", rc.node, err))
	}
	_ = ctl.SetReadDeadline(time.Time{})
	switch f.Header.Type {
	case wire.TypeWelcome:
		return conn, ctl, nil
	case wire.TypeError:
		werr, derr := wire.DecodeError(f.Body)
		if derr != nil {
			return fail(derr)
		}
		return fail(fmt.Errorf("node %d refused the relay: %w", rc.node, werr))
	}
	return fail(fmt.Errorf("node %d answered the relay hello with %s", rc.node, f.Header.Type))
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// read hands the answers on the control stream back to the requests'
// lanes, following a not_leader to the node it names.
func (rc *relayConn) read(ctl *quic.Stream) {
	cs := rc.cs
	for {
		f, err := wire.ReadFrame(ctl, cs.cfg.MaxFrameBytes)
		if err != nil {
			rc.fail(err)
			return
		}
		if f.Header.RequestID == 0 {
			// GoAway: the node drains. What is pending is answered as it
			// drains; what comes next goes to a new relay.
			rc.retire()
			continue
		}
		rc.mu.Lock()
		req := rc.mu.pending[f.Header.RequestID]
		delete(rc.mu.pending, f.Header.RequestID)
		rc.mu.Unlock()
		if req == nil {
			continue // answered already (a lost relay's answers raced)
		}
		frame := wire.AppendFrame(nil, f.Header.Type, f.Header.Flags, f.Header.RequestID, f.Body)
		if f.Header.Type == wire.TypeError {
			werr, derr := wire.DecodeError(f.Body)
			if derr == nil {
				// A not_leader naming this node itself goes back to the
				// client as it is: its retry is served here.
				if to := werr.Detail; werr.Code == wire.CodeNotLeader && to != 0 && to != rc.node && to != cs.cfg.Relay.Self && req.hops < relayHops {
					req.hops++
					cs.cfg.Relay.learned(req.stream, to)
					cs.sendRelayed(to, req)
					continue
				}
				if werr.Code == wire.CodeShuttingDown {
					// The coordinating node drains, not the client's: the
					// client comes again here, and goes to the next leader.
					frame = wire.AppendError(nil, req.id, &wire.Error{Code: wire.CodeNotLeader,
						Message: fmt.Sprintf("node %d, which coordinated the group, is stopping; retry", rc.node)})
				}
			}
		}
		cs.root.Send(req.lane, &WriteFrame{Frame: frame, Dispatched: true})
	}
}

// fail marks the relay failed (once), closes its connection, forgets it,
// and answers every request written or queued.
func (rc *relayConn) fail(err error) {
	cs := rc.cs
	rc.mu.Lock()
	if rc.mu.err != nil {
		rc.mu.Unlock()
		return
	}
	rc.mu.err = err
	pending, conn := rc.mu.pending, rc.mu.conn
	rc.mu.pending = map[uint64]*relayReq{}
	rc.mu.Unlock()
	rc.retire()
	if conn != nil {
		_ = conn.CloseWithError(0, "relay closed")
	}
	if !errors.Is(err, errSessionShutdown) {
		cs.logger.Debug("group relay lost", slog.Uint64("node", rc.node), slog.Any("error", err))
	}
	for _, req := range pending {
		cs.answerRelayed(req, req.lostError(rc.node, err))
	}
	// Those never written were not applied, whatever they ask.
	for {
		select {
		case req := <-rc.out:
			cs.answerRelayed(req, wire.Errorf(wire.CodeNotLeader, "the connection to node %d, which coordinates the group, failed before the request went (%v); retry", rc.node, err))
		default:
			return
		}
	}
}

// relayMember relays a push member's stream s (whose GroupSubscribe is f)
// to the coordinator on node: the subscribe goes on a stream of the relay,
// and frames are copied both ways until either side ends.
func (cs *connSession) relayMember(s *quic.Stream, f wire.Frame, node, stream uint64) error {
	id := f.Header.RequestID
	lost := func(err error) *wire.Error {
		return wire.Errorf(wire.CodeNotLeader, "the group's coordinator could not be reached (%v); join again", err)
	}
	frame := wire.AppendFrame(nil, f.Header.Type, f.Header.Flags, id, f.Body)
	for hops := 0; ; hops++ {
		if node == 0 || node == cs.cfg.Relay.Self {
			refuseStream(s, id, &wire.Error{Code: wire.CodeNotLeader, Detail: node, Message: "no other node is known to coordinate this stream's consumer groups (its shard 0 is electing a leader, or this node leads it now); join again shortly"})
			return nil
		}
		rc := cs.relayTo(node)
		select {
		case <-rc.ready:
		case <-cs.ctx.Done():
			return nil
		}
		conn := rc.connection()
		if conn == nil {
			refuseStream(s, id, lost(rc.failed()))
			return nil
		}
		ctx, cancel := context.WithTimeout(cs.ctx, cs.cfg.HandshakeTimeout)
		rs, err := conn.OpenStreamSync(ctx)
		cancel()
		if err != nil {
			rc.fail(err)
			refuseStream(s, id, lost(err))
			return nil
		}
		if _, err := rs.Write(frame); err != nil {
			rs.CancelRead(0)
			refuseStream(s, id, lost(err))
			return nil
		}
		first, err := wire.ReadFrame(rs, cs.cfg.MaxFrameBytes)
		if err != nil {
			rs.CancelRead(0)
			rs.CancelWrite(0)
			refuseStream(s, id, lost(err))
			return nil
		}
		if first.Header.Type == wire.TypeError {
			if werr, derr := wire.DecodeError(first.Body); derr == nil && werr.Code == wire.CodeNotLeader &&
				werr.Detail != 0 && werr.Detail != node && werr.Detail != cs.cfg.Relay.Self && hops < relayHops {
				rs.CancelRead(0)
				_ = rs.Close()
				node = werr.Detail
				cs.cfg.Relay.learned(stream, node)
				continue
			}
		}
		if err := writeFrame(s, relayedFrame(first, node)); err != nil {
			rs.CancelRead(0)
			rs.CancelWrite(0)
			return nil
		}
		cs.pipeMember(s, rs, node)
		return nil
	}
}

// relayedFrame is f as the client gets it: a coordinating node's
// shutting_down (it drains, not the client's node) becomes not_leader, so
// the member joins again at once.
func relayedFrame(f wire.Frame, node uint64) wire.Frame {
	if f.Header.Type != wire.TypeError {
		return f
	}
	if werr, err := wire.DecodeError(f.Body); err == nil && werr.Code == wire.CodeShuttingDown {
		return wire.Frame{Header: wire.Header{Type: wire.TypeError, RequestID: f.Header.RequestID},
			Body: wire.AppendError(nil, 0, &wire.Error{Code: wire.CodeNotLeader,
				Message: fmt.Sprintf("node %d, which coordinated the group, is stopping; join again", node)})[wire.HeaderSize:]}
	}
	return f
}

func writeFrame(w io.Writer, f wire.Frame) error {
	_, err := w.Write(wire.AppendFrame(nil, f.Header.Type, f.Header.Flags, f.Header.RequestID, f.Body))
	return err
}

// pipeMember copies a relayed member's frames: the coordinator's (rs) to
// the client (s) on a goroutine, the client's acks to the coordinator
// here, until either ends. When the coordinator's side ends other than
// cleanly (its node died, the relay was lost), the client's stream ends
// with not_leader, so the member joins again.
func (cs *connSession) pipeMember(s, rs *quic.Stream, node uint64) {
	done := make(chan struct{})
	if !cs.cfg.Goroutines.Go(func() {
		defer close(done)
		for {
			f, err := wire.ReadFrame(rs, cs.cfg.MaxFrameBytes)
			if err != nil {
				if errors.Is(err, io.EOF) {
					_ = s.Close()
				} else if cs.ctx.Err() == nil {
					refuseStream(s, 0, wire.Errorf(wire.CodeNotLeader,
						"the group stream through node %d ended (%v); join again", node, err))
				}
				s.CancelRead(0) // ends the copy the other way
				return
			}
			if err := writeFrame(s, relayedFrame(f, node)); err != nil {
				rs.CancelRead(0)
				rs.CancelWrite(0)
				s.CancelRead(0) // ends the copy the other way
				return
			}
		}
	}) {
		rs.CancelRead(0)
		rs.CancelWrite(0)
		return
	}
	for {
		f, err := wire.ReadFrame(s, cs.cfg.MaxFrameBytes)
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = rs.Close() // the member ends, and its stream with it
			} else {
				rs.CancelWrite(0)
				rs.CancelRead(0)
			}
			break
		}
		if err := writeFrame(rs, f); err != nil {
			rs.CancelRead(0)
			break
		}
	}
	<-done
}

// serveRelay runs the handshake of a connection another node opened as a
// relay: a RelayHello from a known peer, to this node (and, with peers
// authenticated, from the node its certificate names), whose principal
// this node takes as stated, or, with development peer TLS, whose token it
// authenticates itself. Then the connection is served as a client's.
func (cs *connSession) serveRelay(control *quic.Stream) error {
	ra := cs.relayAccept
	t, body, err := peerwire.ReadFrame(control, 64<<10)
	if err != nil {
		return cs.closeWith(wire.Errorf(wire.CodeProtocolViolation, "relay hello: %v", err))
	}
	if t != peerwire.TypeRelayHello {
		return cs.closeWith(wire.Errorf(wire.CodeProtocolViolation, "a relay connection opens with a relay hello, not %s", t))
	}
	hello, err := peerwire.DecodeRelayHello(body)
	if err != nil {
		return cs.closeWith(wire.Errorf(wire.CodeProtocolViolation, "relay hello: %v", err))
	}
	_ = control.SetReadDeadline(time.Time{})
	answers := NewAnswerMeter(answerBacklogBytes)
	lane := cs.openLane(control, nil, nil, answers)
	if lane == nil {
		return cs.ctx.Err()
	}
	refuse := func(werr *wire.Error) error {
		cs.logger.Warn("relay connection refused", slog.Uint64("from", hello.From), slog.String("reason", werr.Message))
		cs.root.Send(lane, &CloseLane{Err: werr})
		_, _ = cs.root.RequestFuture(lane, &LaneSyncRequest{}, cs.cfg.HandshakeTimeout).Result()
		return cs.closeWith(werr)
	}
	switch {
	case hello.Version != peerwire.Version:
		return refuse(&wire.Error{Code: wire.CodeUnsupportedVersion, Detail: peerwire.Version,
			Message: fmt.Sprintf("relay hello of peer protocol version %d; this node speaks %d", hello.Version, peerwire.Version)})
	case hello.To != ra.Self:
		return refuse(wire.Errorf(wire.CodeUnauthenticated, "relay hello to node %d reached node %d", hello.To, ra.Self))
	case hello.From == ra.Self || !ra.Known(hello.From):
		return refuse(wire.Errorf(wire.CodeUnauthenticated, "relay hello from node %d, which is not a peer of node %d", hello.From, ra.Self))
	}
	if ra.CheckIdentity != nil {
		if err := ra.CheckIdentity(cs.conn.ConnectionState().TLS.PeerCertificates, hello.From); err != nil {
			return refuse(wire.Errorf(wire.CodeUnauthenticated, "relay from node %d: %v", hello.From, err))
		}
		p := hello.Principal
		cs.principal = Principal{Name: p.Name, Tenant: p.Tenant, Any: p.Any, Perms: Permission(p.Perms), Namespaces: p.Namespaces}
	} else {
		// Peers are not authenticated: whoever reached this port could
		// state any principal. The client's token is checked here, as its
		// own node checked it.
		principal, werr := cs.cfg.Auth.Authenticate(hello.Token, nil)
		if werr != nil {
			cs.cfg.Stats.AuthFailures.Add(1)
			return refuse(werr)
		}
		cs.principal = principal
	}
	// The relaying node copies group frames only: every feature of this
	// version is its.
	cs.token, cs.features = hello.Token, wire.Features
	return cs.welcome(lane, control, answers, 0)
}
