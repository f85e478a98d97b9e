package actors

import (
	"errors"
	"os"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// acceptStreams accepts the client's data streams, each served by its own
// goroutine, until the connection ends.
func (cs *connSession) acceptStreams() {
	for {
		s, err := cs.conn.AcceptStream(cs.ctx)
		if err != nil {
			return
		}
		started := cs.cfg.Goroutines.Go(func() {
			if err := cs.serveStream(s); err != nil {
				_ = cs.closeWith(err)
			}
		})
		if !started {
			_ = cs.closeWith(errSessionShutdown)
			return
		}
	}
}

// serveStream reads a data stream's first frame: a Publish makes it a
// publish stream, a Subscribe a subscription stream, a GroupSubscribe a
// group push stream. An error it returns closes the connection.
func (cs *connSession) serveStream(s *quic.Stream) error {
	// A stream that never says what it is for holds a goroutine: bound how
	// long it may go without sending, not how long its first frame takes,
	// so that a large first publish on a slow or busy link still arrives.
	f, err := wire.ReadFrame(&progressReader{s: s, idle: cs.cfg.HandshakeTimeout}, cs.cfg.MaxFrameBytes)
	_ = s.SetReadDeadline(time.Time{})
	if err != nil {
		var werr *wire.Error
		if errors.As(err, &werr) {
			return err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			cs.cfg.Stats.Limits.Handshake.Add(1)
		}
		s.CancelRead(quic.StreamErrorCode(wire.CodeProtocolViolation))
		s.CancelWrite(quic.StreamErrorCode(wire.CodeProtocolViolation))
		return nil // the stream ended or idled before a whole frame: nothing to answer
	}
	switch f.Header.Type {
	case wire.TypeSubscribe:
		return cs.subscribeStream(s, f)
	case wire.TypePublish:
		return cs.publishLoop(s, f)
	case wire.TypeGroupSubscribe:
		return cs.groupStream(s, f)
	default:
		return wire.Errorf(wire.CodeProtocolViolation, "a stream cannot start with a %s frame", f.Header.Type)
	}
}

// subscribeStream hands a stream whose first frame f is Subscribe to the
// actor, which starts its subscription, or refuses it. Only a framing error
// is returned.
func (cs *connSession) subscribeStream(s *quic.Stream, f wire.Frame) error {
	req, err := wire.DecodeSubscribe(f.Body)
	if err != nil {
		werr := wire.RequestError(err)
		if werr == nil {
			return err
		}
		refuseStream(s, f.Header.RequestID, werr)
		return nil
	}
	if werr := cs.allow(PermSubscribe, req.Name); werr != nil {
		refuseStream(s, f.Header.RequestID, werr)
		return nil
	}
	if cs.draining.Load() {
		refuseStream(s, f.Header.RequestID, wire.Errorf(wire.CodeShuttingDown, "node is draining"))
		return nil
	}
	cs.root.Send(cs.self, &openSubscription{stream: s, reqID: f.Header.RequestID, req: req, principal: cs.principal.Name})
	return nil
}

// refuseStream answers the request that opened s (reqID) with werr and ends
// the stream: the Error frame, then the end of the send side, and the read
// side cancelled with werr's code. The connection goes on. The write is the
// first on a fresh stream, which has room for it: it does not block.
func refuseStream(s *quic.Stream, reqID uint64, werr *wire.Error) {
	_, _ = s.Write(wire.AppendError(nil, reqID, werr))
	_ = s.Close()
	s.CancelRead(quic.StreamErrorCode(werr.Code))
}

// quicSubStream adapts a QUIC stream to SubscriberStream.
type quicSubStream struct{ *quic.Stream }

func (s quicSubStream) Abort(code wire.Code) {
	s.CancelRead(quic.StreamErrorCode(code))
	s.CancelWrite(quic.StreamErrorCode(code))
}

func (s quicSubStream) StopReading(code wire.Code) { s.CancelRead(quic.StreamErrorCode(code)) }

// progressReader reads a stream with a deadline that each read renews: the
// stream may take as long as it likes, as long as it never goes idle longer
// than idle.
type progressReader struct {
	s    *quic.Stream
	idle time.Duration
}

func (r *progressReader) Read(p []byte) (int, error) {
	_ = r.s.SetReadDeadline(time.Now().Add(r.idle))
	return r.s.Read(p)
}
