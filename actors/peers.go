package actors

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// PeersConfig configures the parent of a node's peer links.
type PeersConfig struct {
	// Links are the configs of the links, one per peer (this node
	// excluded).
	Links []PeerLinkConfig
}

// PeerAcceptedFrom hands the link to From a connection it dialled.
type PeerAcceptedFrom struct {
	From uint64
	PeerAccepted
}

// PeerLinksRequest asks for the links; the answer is a *PeerLinks (ask
// each for its PeerStatus).
type PeerLinksRequest struct{}

// PeerLinks are the links by peer id.
type PeerLinks struct {
	Links map[uint64]*actor.PID
}

// peers supervises the node's peer links: a link that fails restarts
// (its connection is dialled or accepted again); the node's other actors
// never notice.
type peers struct {
	cfg   PeersConfig
	links map[uint64]*actor.PID
}

// NewPeersProps returns the props of the peer links' parent.
func NewPeersProps(cfg PeersConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &peers{cfg: cfg} },
		actor.WithSupervisor(actor.NewOneForOneStrategy(10, 10*time.Second, func(any) actor.Directive {
			return actor.RestartDirective
		})))
}

// Receive dispatches.
func (p *peers) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.links = map[uint64]*actor.PID{}
		for _, lc := range p.cfg.Links {
			pid, err := ctx.SpawnNamed(NewPeerLinkProps(lc), fmt.Sprintf("peer-%d", lc.Peer))
			if err != nil {
				ctx.Logger().Error("peers: spawning a link", slog.Uint64("peer", lc.Peer), slog.Any("error", err))
				continue
			}
			p.links[lc.Peer] = pid
		}
	case *PeerAcceptedFrom:
		pid := p.links[m.From]
		if pid == nil {
			_ = m.Conn.CloseWithError(1, "unknown peer")
			return
		}
		ctx.Send(pid, &m.PeerAccepted)
	case *PeerLinksRequest:
		out := &PeerLinks{Links: map[uint64]*actor.PID{}}
		for id, pid := range p.links {
			out.Links[id] = pid
		}
		ctx.Respond(out)
	case *actor.Stopping, *actor.Stopped, *actor.Restarting, *actor.Terminated:
	default:
		ctx.Logger().Warn("peers: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}
