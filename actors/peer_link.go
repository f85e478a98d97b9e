package actors

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/peerwire"
)

// The cluster transport (issue 17). A node keeps one QUIC connection to
// each peer, dialled by the node with the lower id, and one peerLink actor
// per peer that owns it. Every raft group of the node sends its messages
// for that peer to the link (PeerSend); the link puts whatever queued into
// one Raft frame each time its mailbox drains, so a busy node sends few
// frames however many groups it runs. What arrives from the peer goes to
// Deliver, which routes each message to its group.
//
// Raft messages may be lost, so the link never waits for a peer: while it
// is down, or past MaxQueuedBytes, a message is dropped and its sender told
// (PeerUndelivered), which raft needs to hear (ReportUnreachable, and
// ReportSnapshot for a snapshot). Writes happen on the link's writer
// goroutine, one frame at a time, so Receive never blocks.

// PeerLinkConfig configures the link to one peer.
type PeerLinkConfig struct {
	// Self and Peer are the two node ids; the link dials when Self < Peer
	// and otherwise waits for the peer to (PeerAccepted).
	Self, Peer uint64
	// Addr is the peer's address in this node's --peers.
	Addr string
	// Dial opens a QUIC connection to Addr (the node's cluster transport,
	// with its peer TLS); nil on a link that never dials.
	Dial func(ctx context.Context, addr string) (*quic.Conn, error)
	// CheckIdentity, if set, checks that the peer's verified certificate
	// names the node id it claims (transport.PeerTLS.CheckPeerIdentity).
	CheckIdentity func(certs []*x509.Certificate, id uint64) error
	// Deliver receives what the peer sent, on the link's reader goroutine;
	// DeliverShard a Shard frame (nil: dropped).
	Deliver      func(from uint64, msgs []peerwire.Message)
	DeliverShard func(from uint64, m peerwire.ShardMessage)
	// MaxQueuedBytes bounds the messages waiting for the writer (default
	// 8 MiB); MaxFrameBytes a frame either way (default
	// peerwire.DefaultMaxFrameBytes).
	MaxQueuedBytes int
	MaxFrameBytes  uint32
	// HandshakeTimeout bounds a dial and its Hello exchange (default 5 s).
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one frame's write (default 10 s): a peer that is
	// alive but stopped reading has its connection closed and redialled
	// rather than holding the link up with nothing getting through.
	WriteTimeout time.Duration
	// RetryMin and RetryMax bound the wait between dials, doubling from
	// the first to the second (defaults 100 ms and 2 s).
	RetryMin, RetryMax time.Duration
	// BeatEvery is how often the link writes an empty frame when it wrote
	// nothing else meanwhile (default 100 ms), so that the peer knows this
	// node is alive however quiet its groups are; SuspectAfter is how long
	// the peer may stay silent (no frame at all) before the link suspects
	// it is gone (default 1 s) and tells OnSuspect, and OnAlive when it is
	// heard again. A quiesced group wakes when its leader's node is
	// suspected (shard_quiesce.go): the beats are the node pair's one
	// heartbeat for every quiet group.
	BeatEvery, SuspectAfter time.Duration
	OnSuspect, OnAlive      func(peer uint64)
	// Now and AfterFunc are the link's clock (tests inject them).
	Now       func() time.Time
	AfterFunc func(time.Duration, func()) (stop func() bool)
	// Goroutines owns the link's dialer, reader and writer.
	Goroutines *Goroutines
	// Advertise is the client address this node advertises in its hello
	// ("" for none); OnAdvertised learns the one the peer advertises in
	// its answer (nil: nobody).
	Advertise    string
	OnAdvertised func(peer uint64, addr string)
}

// PeerSend asks the link to send msgs; ReplyTo (the group's actor) hears
// of those that could not go.
type PeerSend struct {
	Msgs []peerwire.Message
	// Snapshot marks the messages that carry a snapshot (by index in Msgs).
	Snapshot []bool
	ReplyTo  *actor.PID
}

// PeerSendFrame asks the link to send one Shard frame, encoded (a page of
// a shard's log, or a fetch of one). It waits behind the raft messages
// queued, is dropped while the link is down or past MaxQueuedBytes, and
// nobody is told: the fetching replica retries after its timeout.
type PeerSendFrame struct {
	Frame []byte
}

// PeerUndelivered tells a group that messages to Peer were dropped;
// Snapshot is set when one of them carried a snapshot.
type PeerUndelivered struct {
	Peer     uint64
	Group    peerwire.Group
	Snapshot bool
}

// PeerAccepted hands a link the connection its peer dialled, once the
// Hellos are exchanged.
type PeerAccepted struct {
	Conn   *quic.Conn
	Stream *quic.Stream
}

// PeerStatusRequest asks a link for its PeerStatus.
type PeerStatusRequest struct{}

// PeerStatus is a link's state, for `herald cluster status`.
type PeerStatus struct {
	Peer uint64
	Addr string
	Up   bool
	// Since is when the link last went up or down.
	Since time.Time
	// LastError is why it last went down (empty: never).
	LastError string
	// Frames and Messages count what was sent; Dropped the messages
	// dropped while down or over the queue bound; Received what arrived.
	Frames, Messages, Dropped, Received uint64
}

type (
	peerFlush     struct{}
	peerRedial    struct{ gen uint64 }
	peerConnected struct {
		gen    uint64
		conn   *quic.Conn
		stream *quic.Stream
		err    error
	}
	peerWritten struct {
		gen uint64
		err error
	}
	peerReadFailed struct {
		gen uint64
		err error
	}
	peerReceived struct{ n int }
	peerBeat     struct{}
)

type peerLink struct {
	cfg    PeerLinkConfig
	status PeerStatus
	// gen names the current connection (and dial): messages of an older
	// one are ignored.
	gen    uint64
	conn   *quic.Conn
	stream *quic.Stream
	// frames feeds the writer goroutine; busy while it writes one.
	frames chan []byte
	busy   bool
	// queue is what waits for the writer, queued bytes in all.
	queue     []peerwire.Message
	queueFrom []*actor.PID
	queueSnap []bool
	queued    int
	// frameQueue are Shard frames waiting for the writer; shardTurn is
	// set when one of them goes next (they alternate with raft frames).
	frameQueue  [][]byte
	shardTurn   bool
	flushQueued bool
	dialing     bool
	retry       time.Duration
	stopRetry   func() bool
	stopped     bool
	// wrote is set when a frame went since the last beat; alive while the
	// peer was heard within SuspectAfter, lastHeard when it last was.
	wrote     bool
	alive     bool
	lastHeard time.Time
	stopBeat  func() bool
	// life ends the dial on its way when the link stops.
	life   context.Context
	cancel context.CancelFunc
}

// NewPeerLinkProps returns the props of the link to one peer.
func NewPeerLinkProps(cfg PeerLinkConfig) *actor.Props {
	if cfg.MaxQueuedBytes <= 0 {
		cfg.MaxQueuedBytes = 8 << 20
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = peerwire.DefaultMaxFrameBytes
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 100 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(cfg.RetryMin, 2*time.Second)
	}
	if cfg.BeatEvery <= 0 {
		cfg.BeatEvery = 100 * time.Millisecond
	}
	if cfg.SuspectAfter <= 0 {
		cfg.SuspectAfter = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	// A link to a peer whose address changed is started again under its
	// old name, which the router may still send to: its mailbox holds what
	// comes until protoactor has set it up (guardedMailbox).
	return actor.PropsFromProducer(func() actor.Actor { return &peerLink{cfg: cfg} },
		actor.WithMailbox(guardedMailboxes(actor.Unbounded())))
}

// Receive dispatches.
func (l *peerLink) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		l.status = PeerStatus{Peer: l.cfg.Peer, Addr: l.cfg.Addr, Since: l.cfg.Now()}
		l.life, l.cancel = context.WithCancel(context.Background())
		l.retry = l.cfg.RetryMin
		if l.cfg.OnSuspect != nil {
			// A new link (a restart) has heard nothing yet, whatever the one
			// before it told the groups.
			l.cfg.OnSuspect(l.cfg.Peer)
		}
		l.armBeat(ctx)
		l.dial(ctx)
	case *PeerSend:
		l.onSend(ctx, m)
	case *PeerSendFrame:
		l.onSendFrame(ctx, m)
	case *peerFlush:
		l.flushQueued = false
		l.flush(ctx)
	case *peerWritten:
		l.onWritten(ctx, m)
	case *peerConnected:
		l.onConnected(ctx, m)
	case *PeerAccepted:
		if l.cfg.Self < l.cfg.Peer {
			// This node dials that peer: a connection from it breaks the
			// rule; refuse it rather than keep two.
			_ = m.Conn.CloseWithError(quic.ApplicationErrorCode(1), "the lower node id dials")
			return
		}
		l.gen++
		l.onConnected(ctx, &peerConnected{gen: l.gen, conn: m.Conn, stream: m.Stream})
	case *peerReadFailed:
		if m.gen == l.gen {
			l.down(ctx, m.err)
		}
	case *peerReceived:
		l.status.Received += uint64(m.n)
		l.lastHeard = l.cfg.Now()
		if !l.alive && l.conn != nil {
			l.alive = true
			if l.cfg.OnAlive != nil {
				l.cfg.OnAlive(l.cfg.Peer)
			}
		}
	case *peerBeat:
		l.onBeat(ctx)
	case *peerRedial:
		if m.gen == l.gen && !l.stopped {
			l.dial(ctx)
		}
	case *PeerStatusRequest:
		ctx.Respond(l.status)
	case *actor.Stopping, *actor.Restarting:
		// A restart makes a fresh link that dials (or waits) anew: this
		// instance's connection, goroutines and timer end here.
		l.stopped = true
		if l.cancel != nil {
			l.cancel()
		}
		if l.stopBeat != nil {
			l.stopBeat()
		}
		if l.stopRetry != nil {
			l.stopRetry()
		}
		l.close(errors.New("node stopping"))
		l.dropQueue(ctx)
	case *actor.Stopped:
	default:
		ctx.Logger().Warn("peer link: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

// dial starts a dial on its own goroutine, if this node dials the peer.
func (l *peerLink) dial(ctx actor.Context) {
	if l.cfg.Self > l.cfg.Peer || l.cfg.Dial == nil || l.dialing || l.conn != nil {
		return
	}
	l.dialing = true
	l.gen++
	gen, self, root, cfg, life := l.gen, ctx.Self(), ctx.ActorSystem().Root, l.cfg, l.life
	if !cfg.Goroutines.Go(func() {
		dctx, cancel := context.WithTimeout(life, cfg.HandshakeTimeout)
		defer cancel()
		conn, stream, err := dialPeer(dctx, cfg)
		root.Send(self, &peerConnected{gen: gen, conn: conn, stream: stream, err: err})
	}) {
		l.dialing = false
	}
}

// dialPeer dials the peer and exchanges Hellos.
func dialPeer(ctx context.Context, cfg PeerLinkConfig) (*quic.Conn, *quic.Stream, error) {
	conn, err := cfg.Dial(ctx, cfg.Addr)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*quic.Conn, *quic.Stream, error) {
		_ = conn.CloseWithError(0, err.Error())
		return nil, nil, err
	}
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = stream.SetDeadline(dl)
	}
	if _, err := stream.Write(peerwire.AppendHello(nil, peerwire.Hello{Version: peerwire.Version, From: cfg.Self, To: cfg.Peer, Advertise: cfg.Advertise})); err != nil {
		return fail(err)
	}
	h, err := readPeerHello(stream)
	if err != nil {
		return fail(err)
	}
	if h.From != cfg.Peer || h.To != cfg.Self {
		return fail(fmt.Errorf("peer at %s is node %d (speaking to node %d), --peers says node %d", cfg.Addr, h.From, h.To, cfg.Peer))
	}
	if cfg.CheckIdentity != nil {
		if err := cfg.CheckIdentity(conn.ConnectionState().TLS.PeerCertificates, cfg.Peer); err != nil {
			return fail(err)
		}
	}
	_ = stream.SetDeadline(time.Time{})
	if cfg.OnAdvertised != nil {
		cfg.OnAdvertised(cfg.Peer, h.Advertise)
	}
	return conn, stream, nil
}

// readPeerHello reads the Hello that opens a peer stream.
func readPeerHello(s *quic.Stream) (peerwire.Hello, error) {
	t, body, err := peerwire.ReadFrame(s, 2048)
	if err != nil {
		return peerwire.Hello{}, err
	}
	if t != peerwire.TypeHello {
		return peerwire.Hello{}, fmt.Errorf("peer opened with %s, not a hello", t)
	}
	h, err := peerwire.DecodeHello(body)
	if err != nil {
		return peerwire.Hello{}, err
	}
	if h.Version != peerwire.Version {
		return peerwire.Hello{}, fmt.Errorf("peer speaks peer protocol version %d, this node %d", h.Version, peerwire.Version)
	}
	return h, nil
}

// AcceptPeer exchanges Hellos on a connection a peer dialled to self:
// it returns the dialler's id and the client address it advertises, or an
// error (the caller closes the connection). advertise is this node's own;
// known reports whether an id is one of this node's peers; check, if set,
// that the dialler's certificate names the id it claims.
func AcceptPeer(ctx context.Context, conn *quic.Conn, self uint64, advertise string, known func(uint64) bool, check func([]*x509.Certificate, uint64) error) (uint64, string, *quic.Stream, error) {
	stream, err := conn.AcceptStream(ctx)
	if err != nil {
		return 0, "", nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = stream.SetDeadline(dl)
	}
	h, err := readPeerHello(stream)
	if err != nil {
		return 0, "", nil, err
	}
	switch {
	case h.To != self:
		return 0, "", nil, fmt.Errorf("node %d dialled node %d here, this is node %d: its --peers is wrong", h.From, h.To, self)
	case !known(h.From):
		return 0, "", nil, fmt.Errorf("node %d is not in this node's --peers", h.From)
	case h.From > self:
		return 0, "", nil, fmt.Errorf("node %d dialled node %d: the lower id dials", h.From, self)
	}
	if check != nil {
		if err := check(conn.ConnectionState().TLS.PeerCertificates, h.From); err != nil {
			return 0, "", nil, err
		}
	}
	if _, err := stream.Write(peerwire.AppendHello(nil, peerwire.Hello{Version: peerwire.Version, From: self, To: h.From, Advertise: advertise})); err != nil {
		return 0, "", nil, err
	}
	_ = stream.SetDeadline(time.Time{})
	return h.From, h.Advertise, stream, nil
}

// onConnected takes a new connection (or a failed dial).
func (l *peerLink) onConnected(ctx actor.Context, m *peerConnected) {
	if m.gen != l.gen || l.stopped {
		if m.conn != nil {
			_ = m.conn.CloseWithError(0, "superseded")
		}
		return
	}
	l.dialing = false
	if m.err != nil {
		l.down(ctx, m.err)
		return
	}
	l.close(errors.New("replaced by a new connection"))
	l.conn, l.stream, l.retry = m.conn, m.stream, l.cfg.RetryMin
	l.status.Up, l.status.Since, l.status.LastError = true, l.cfg.Now(), ""
	ctx.Logger().Info("peer link up", slog.Uint64("peer", l.cfg.Peer), slog.String("addr", l.cfg.Addr))
	frames := make(chan []byte, 1)
	l.frames, l.busy = frames, false
	gen, self, root, stream, cfg := l.gen, ctx.Self(), ctx.ActorSystem().Root, m.stream, l.cfg
	if !cfg.Goroutines.Go(func() {
		for f := range frames {
			_ = stream.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
			_, err := stream.Write(f)
			root.Send(self, &peerWritten{gen: gen, err: err})
			if err != nil {
				return
			}
		}
	}) {
		l.down(ctx, errors.New("node stopping")) // closes the connection and frames
		return
	}
	if !cfg.Goroutines.Go(func() {
		for {
			t, body, err := peerwire.ReadFrame(stream, cfg.MaxFrameBytes)
			if err == nil && t == peerwire.TypeShard {
				var sm peerwire.ShardMessage
				if sm, err = peerwire.DecodeShard(body); err == nil {
					if cfg.DeliverShard != nil {
						cfg.DeliverShard(cfg.Peer, sm)
					}
					root.Send(self, &peerReceived{n: 1})
					continue
				}
			}
			if err == nil && t != peerwire.TypeRaft {
				err = fmt.Errorf("peer sent %s after its hello", t)
			}
			var msgs []peerwire.Message
			if err == nil {
				msgs, err = peerwire.DecodeRaft(body)
			}
			if err != nil {
				root.Send(self, &peerReadFailed{gen: gen, err: err})
				return
			}
			cfg.Deliver(cfg.Peer, msgs)
			root.Send(self, &peerReceived{n: len(msgs)})
		}
	}) {
		l.down(ctx, errors.New("node stopping"))
		return
	}
	l.flush(ctx)
}

func (l *peerLink) armBeat(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	l.stopBeat = l.cfg.AfterFunc(l.cfg.BeatEvery, func() { root.Send(self, &peerBeat{}) })
}

// onBeat writes an empty frame if nothing went since the last beat, and
// suspects a peer silent for SuspectAfter.
func (l *peerLink) onBeat(ctx actor.Context) {
	if l.stopped {
		return
	}
	l.armBeat(ctx)
	if l.conn != nil && !l.wrote && !l.busy && len(l.queue) == 0 && len(l.frameQueue) == 0 {
		l.status.Frames++
		l.busy = true
		l.frames <- peerwire.AppendRaft(nil, nil)
	}
	l.wrote = false
	if l.alive && l.cfg.Now().Sub(l.lastHeard) > l.cfg.SuspectAfter {
		ctx.Logger().Warn("peer link: peer silent; suspected gone", slog.Uint64("peer", l.cfg.Peer), slog.Duration("silent", l.cfg.Now().Sub(l.lastHeard)))
		l.suspect()
	}
}

// suspect marks the peer as not heard from.
func (l *peerLink) suspect() {
	if !l.alive {
		return
	}
	l.alive = false
	if l.cfg.OnSuspect != nil {
		l.cfg.OnSuspect(l.cfg.Peer)
	}
}

// down closes the connection, drops what waits, and dials again later.
func (l *peerLink) down(ctx actor.Context, err error) {
	l.suspect()
	l.dialing = false
	wasUp := l.conn != nil
	l.close(err)
	l.dropQueue(ctx)
	if wasUp || l.status.LastError == "" {
		ctx.Logger().Warn("peer link down", slog.Uint64("peer", l.cfg.Peer), slog.String("addr", l.cfg.Addr), slog.Any("error", err))
	}
	if wasUp {
		l.status.Since = l.cfg.Now()
	}
	l.status.Up, l.status.LastError = false, err.Error()
	if l.stopped || l.cfg.Self > l.cfg.Peer || l.cfg.Dial == nil {
		return
	}
	l.gen++
	gen, self, root := l.gen, ctx.Self(), ctx.ActorSystem().Root
	wait := l.retry
	l.retry = min(2*l.retry, l.cfg.RetryMax)
	l.stopRetry = l.cfg.AfterFunc(wait, func() { root.Send(self, &peerRedial{gen: gen}) })
}

// close ends the current connection and its goroutines.
func (l *peerLink) close(err error) {
	if l.conn == nil {
		return
	}
	_ = l.conn.CloseWithError(0, err.Error())
	close(l.frames)
	l.conn, l.stream, l.frames = nil, nil, nil
	l.gen++ // what the old goroutines report is stale
}

func (l *peerLink) onSend(ctx actor.Context, m *PeerSend) {
	for i, msg := range m.Msgs {
		snap := i < len(m.Snapshot) && m.Snapshot[i]
		if l.conn == nil || l.queued+len(msg.Data) > l.cfg.MaxQueuedBytes {
			l.status.Dropped++
			if m.ReplyTo != nil {
				ctx.Send(m.ReplyTo, &PeerUndelivered{Peer: l.cfg.Peer, Group: msg.Group, Snapshot: snap})
			}
			continue
		}
		l.queue = append(l.queue, msg)
		l.queueFrom = append(l.queueFrom, m.ReplyTo)
		l.queueSnap = append(l.queueSnap, snap)
		l.queued += len(msg.Data)
	}
	if len(l.queue) > 0 && !l.flushQueued {
		l.flushQueued = true
		ctx.Send(ctx.Self(), &peerFlush{})
	}
}

func (l *peerLink) onSendFrame(ctx actor.Context, m *PeerSendFrame) {
	if l.conn == nil || l.queued+len(m.Frame) > l.cfg.MaxQueuedBytes || len(m.Frame) > int(l.cfg.MaxFrameBytes)+peerwire.HeaderSize {
		l.status.Dropped++
		return
	}
	l.frameQueue = append(l.frameQueue, m.Frame)
	l.queued += len(m.Frame)
	if !l.flushQueued {
		l.flushQueued = true
		ctx.Send(ctx.Self(), &peerFlush{})
	}
}

// flush hands the writer one frame of what queued, if it is idle: raft
// frames and Shard frames in turn, so neither waits long behind the
// other.
func (l *peerLink) flush(ctx actor.Context) {
	if l.conn == nil || l.busy {
		return
	}
	if len(l.queue) == 0 || (len(l.frameQueue) > 0 && l.shardTurn) {
		l.shardTurn = false
		if len(l.frameQueue) > 0 {
			f := l.frameQueue[0]
			l.frameQueue[0] = nil
			l.frameQueue = l.frameQueue[1:]
			l.queued -= len(f)
			l.status.Frames++
			l.status.Messages++
			l.busy, l.wrote = true, true
			l.frames <- f
		}
		return
	}
	// At most one frame's worth; the rest goes when this one is written.
	n, size := 0, 4
	for n < len(l.queue) && (n == 0 || size+16+len(l.queue[n].Data) <= int(l.cfg.MaxFrameBytes)) {
		size += 16 + len(l.queue[n].Data)
		n++
	}
	frame := peerwire.AppendRaft(nil, l.queue[:n])
	l.status.Frames++
	l.status.Messages += uint64(n)
	for _, msg := range l.queue[:n] {
		l.queued -= len(msg.Data)
	}
	clear(l.queue[:n])
	clear(l.queueFrom[:n])
	l.queue, l.queueFrom, l.queueSnap = l.queue[n:], l.queueFrom[n:], l.queueSnap[n:]
	l.busy, l.wrote = true, true
	l.shardTurn = true // a Shard frame waiting goes next, not after every raft frame
	l.frames <- frame
}

func (l *peerLink) onWritten(ctx actor.Context, m *peerWritten) {
	if m.gen != l.gen {
		return
	}
	l.busy = false
	if m.err != nil {
		l.down(ctx, m.err)
		return
	}
	l.flush(ctx)
}

// dropQueue tells the senders of what waits that it will not go.
func (l *peerLink) dropQueue(ctx actor.Context) {
	for i, msg := range l.queue {
		l.status.Dropped++
		if l.queueFrom[i] != nil {
			ctx.Send(l.queueFrom[i], &PeerUndelivered{Peer: l.cfg.Peer, Group: msg.Group, Snapshot: l.queueSnap[i]})
		}
	}
	l.status.Dropped += uint64(len(l.frameQueue))
	l.queue, l.queueFrom, l.queueSnap, l.frameQueue, l.queued = nil, nil, nil, nil, 0
}

// PeerDialer returns a Dial for links: QUIC over tr with the node's peer
// TLS.
func PeerDialer(tr *quic.Transport, conf *tls.Config, qc *quic.Config) func(ctx context.Context, addr string) (*quic.Conn, error) {
	return func(ctx context.Context, addr string) (*quic.Conn, error) {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("peer address %q: %w", addr, err)
		}
		return tr.Dial(ctx, ua, conf.Clone(), qc)
	}
}
