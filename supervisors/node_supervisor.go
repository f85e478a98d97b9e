package supervisors

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/actors"
)

// nodeChildren are the node supervisor's children.
type nodeChildren struct {
	Writer, Groups, Catalog, Listener *actor.PID
}

// childrenRequest asks the node supervisor for its children; answered with
// *nodeChildren.
type childrenRequest struct{}

// nodeSupervisor is the root of the broker's actor tree. It spawns the
// storage writer first (everything durable goes through it), then the
// catalog (which spawns the shards) and the listener (which spawns
// connections). A child that fails is restarted on its own (one-for-one), at
// most 10 times in 10 seconds; after that it is stopped and the node reports
// itself not ready. A storage failure is not a panic: the writer refuses
// every later write and tells the node (OnFailure), which turns unready.
type nodeSupervisor struct {
	writer   actors.StorageWriterConfig
	catalog  actors.CatalogConfig
	listener actors.ConnectionConfig
	groups   actors.GroupsConfig
	// onChildStopped is told when a child stopped for good.
	onChildStopped func(name string)
	// wrapCatalog and wrapWriter, if set, wrap those children's props
	// (tests inject failures).
	wrapCatalog, wrapWriter func(*actor.Props) *actor.Props
	children                nodeChildren
	stopping                bool
}

func newNodeSupervisorProps(s *nodeSupervisor) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		c := *s
		return &c
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, 10*time.Second, func(reason any) actor.Directive {
		return actor.RestartDirective
	})))
}

// Receive dispatches.
func (n *nodeSupervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		n.onStarted(ctx)
	case *childrenRequest:
		c := n.children
		ctx.Respond(&c)
	case *actor.Terminated:
		if !n.stopping && n.onChildStopped != nil {
			n.onChildStopped(m.Who.Id)
		}
	case *actor.Stopping:
		n.stopping = true
	case *actor.Stopped, *actor.Restarting:
	default:
		ctx.Logger().Warn("node supervisor: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

func (n *nodeSupervisor) onStarted(ctx actor.Context) {
	spawn := func(p *actor.Props, name string) *actor.PID {
		pid, err := ctx.SpawnNamed(p, name)
		if err != nil {
			panic(fmt.Errorf("node supervisor: spawn %s: %w", name, err))
		}
		return pid
	}
	wrap := func(p *actor.Props, w func(*actor.Props) *actor.Props) *actor.Props {
		if w != nil {
			return w(p)
		}
		return p
	}
	n.children.Writer = spawn(wrap(actors.NewStorageWriterProps(n.writer), n.wrapWriter), "storage-writer")
	n.catalog.Writer = n.children.Writer
	n.groups.Writer = n.children.Writer
	n.children.Groups = spawn(actors.NewGroupsProps(n.groups), "groups")
	n.catalog.Groups = n.children.Groups
	n.listener.Groups = n.children.Groups
	n.children.Catalog = spawn(wrap(actors.NewCatalogProps(n.catalog), n.wrapCatalog), "catalog")
	n.listener.Catalog = n.children.Catalog
	// Every stored group's coordinator starts, so its lag is published
	// whether or not anyone consumes.
	ctx.Send(n.children.Groups, &actors.GroupsStartAll{Catalog: n.children.Catalog})
	n.children.Listener = spawn(actors.NewListenerProps(n.listener), "listener")
}
