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
	// Template is the config of a link to a peer added later (PeersSet),
	// but for its Peer and Addr.
	Template PeerLinkConfig
	// OnLinks is told the links by peer id whenever they change (the
	// router's SetLinks; nil: nobody is told).
	OnLinks func(map[uint64]*actor.PID)
}

// PeersSet sets the node's peers, by id with their addresses: a link is
// started to each new one and stopped to each one no longer there (its
// node left the cluster); a peer whose address changed is linked again.
// Gen orders the sets: an older one than the last taken is ignored.
type PeersSet struct {
	Gen   uint64
	Addrs map[uint64]string
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
	// addrs are the links' addresses, gen the last PeersSet taken.
	addrs map[uint64]string
	gen   uint64
	// stopping are links being stopped, by actor id: a link to the same
	// peer waits until the old one is gone (the same actor name).
	stopping map[string]uint64
	// pending are peers whose link waits for an old one to stop.
	pending map[uint64]string
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
		p.links, p.addrs = map[uint64]*actor.PID{}, map[uint64]string{}
		p.stopping, p.pending = map[string]uint64{}, map[uint64]string{}
		for _, lc := range p.cfg.Links {
			p.spawn(ctx, lc)
		}
	case *PeersSet:
		p.onPeersSet(ctx, m)
	case *actor.Terminated:
		p.onTerminated(ctx, m)
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
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		ctx.Logger().Warn("peers: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

// spawn starts the link lc describes.
func (p *peers) spawn(ctx actor.Context, lc PeerLinkConfig) {
	pid, err := ctx.SpawnNamed(NewPeerLinkProps(lc), fmt.Sprintf("peer-%d", lc.Peer))
	if err != nil {
		ctx.Logger().Error("peers: spawning a link", slog.Uint64("peer", lc.Peer), slog.Any("error", err))
		return
	}
	p.links[lc.Peer], p.addrs[lc.Peer] = pid, lc.Addr
}

// onPeersSet starts and stops links to match the peers now.
func (p *peers) onPeersSet(ctx actor.Context, m *PeersSet) {
	if m.Gen <= p.gen {
		return
	}
	p.gen = m.Gen
	changed := false
	for id, pid := range p.links {
		if addr, ok := m.Addrs[id]; !ok || addr != p.addrs[id] {
			ctx.Logger().Info("peers: stopping the link to a node no longer a peer here (or at another address)", slog.Uint64("peer", id))
			delete(p.links, id)
			delete(p.addrs, id)
			p.stopping[pid.Id] = id
			ctx.Stop(pid)
			changed = true
		}
	}
	for id, addr := range m.Addrs {
		if _, ok := p.links[id]; ok || id == p.cfg.Template.Self {
			continue
		}
		if p.stoppingPeer(id) {
			p.pending[id] = addr // started once the old link is gone
			continue
		}
		lc := p.cfg.Template
		lc.Peer, lc.Addr = id, addr
		ctx.Logger().Info("peers: linking to a new peer", slog.Uint64("peer", id), slog.String("addr", addr))
		p.spawn(ctx, lc)
		changed = true
	}
	for id := range p.pending {
		if _, ok := m.Addrs[id]; !ok {
			delete(p.pending, id)
		}
	}
	if changed {
		p.tellLinks()
	}
}

// stoppingPeer reports whether a link to peer id is being stopped.
func (p *peers) stoppingPeer(id uint64) bool {
	for _, peer := range p.stopping {
		if peer == id {
			return true
		}
	}
	return false
}

// onTerminated starts the link that waited for an old one to stop.
func (p *peers) onTerminated(ctx actor.Context, m *actor.Terminated) {
	id, ok := p.stopping[m.Who.Id]
	if !ok {
		return
	}
	delete(p.stopping, m.Who.Id)
	if addr, ok := p.pending[id]; ok && !p.stoppingPeer(id) {
		delete(p.pending, id)
		lc := p.cfg.Template
		lc.Peer, lc.Addr = id, addr
		p.spawn(ctx, lc)
		p.tellLinks()
	}
}

// tellLinks tells the router the links now.
func (p *peers) tellLinks() {
	if p.cfg.OnLinks == nil {
		return
	}
	out := make(map[uint64]*actor.PID, len(p.links))
	for id, pid := range p.links {
		out[id] = pid
	}
	p.cfg.OnLinks(out)
}
