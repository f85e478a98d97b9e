package actors

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// listener is the parent of every connection actor. A connection that fails
// is stopped (closing its QUIC connection); the others never notice.
type listener struct {
	cfg      ConnectionConfig
	draining bool
}

// NewListenerProps returns the props of the listener actor; cfg is handed to
// every connection it spawns.
func NewListenerProps(cfg ConnectionConfig) *actor.Props {
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.Authenticated == nil {
		// One count for every connection the listener spawns.
		cfg.Authenticated = &atomic.Int64{}
	}
	return actor.PropsFromProducer(func() actor.Actor { return &listener{cfg: cfg} },
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(reason any) actor.Directive {
			return actor.StopDirective
		})))
}

// Receive dispatches.
func (l *listener) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *ConnectionAccepted:
		l.onConnectionAccepted(ctx, m)
	case *Drain:
		l.onDrain(ctx, m)
	case *ConnectionsRequest:
		l.onConnections(ctx)
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting, *actor.Terminated:
		// Nothing to do: the listener's only state is draining, and a
		// connection that stops leaves ctx.Children() by itself.
	default:
		ctx.Logger().Warn("listener: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

// onConnectionAccepted spawns a connection actor for a new QUIC
// connection, or closes it when the node is draining or has too many.
func (l *listener) onConnectionAccepted(ctx actor.Context, m *ConnectionAccepted) {
	if l.draining {
		_ = m.Conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeShuttingDown), "node shutting down")
		return
	}
	// Authenticated connections are bounded by max_connections (the
	// connection checks after its Hello); this bounds all of them,
	// those still in their handshake included, at twice that.
	if max := l.cfg.MaxConnections; max > 0 && len(ctx.Children()) >= 2*max {
		l.cfg.Stats.Limits.Connections.Add(1)
		_ = m.Conn.CloseWithError(quic.ApplicationErrorCode(wire.CodeOverloaded),
			fmt.Sprintf("the node has its maximum of %d connections (max_connections), and as many in their handshake", max))
		return
	}
	cfg := l.cfg
	cfg.relayAccept = m.Relay
	props := NewConnectionProps(m.Conn, cfg)
	if l.cfg.ConnectionProps != nil {
		props = l.cfg.ConnectionProps(props)
	}
	ctx.Spawn(props)
}

// onDrain refuses new connections from now on and passes the Drain to
// every connection.
func (l *listener) onDrain(ctx actor.Context, m *Drain) {
	l.draining = true
	for _, c := range ctx.Children() {
		ctx.Send(c, m)
	}
}

// onConnections answers with the connection actors.
func (l *listener) onConnections(ctx actor.Context) {
	// Children returns protoactor's own slice, which it changes as
	// children stop: hand out a copy.
	ctx.Respond(&ConnectionsResponse{Connections: append([]*actor.PID(nil), ctx.Children()...)})
}
