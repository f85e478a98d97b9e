package actors

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// guardedMailbox wraps a mailbox so that nothing posted to it reaches its
// dispatcher before protoactor has given it one.
//
// protoactor adds a new process to the registry before it registers the
// mailbox's handlers (Props.spawn: ProcessRegistry.Add, then
// RegisterHandlers, then Started, then Start). A shard that the catalog
// starts again takes its old name, so the PIDs others hold stay valid (the
// storage writer's answers, subscriptions, connections), and a peer link
// started again for a peer's new address takes its old name too (the
// router may still hold it): a message sent to one of them in that window
// found the new mailbox without a dispatcher.
// The race detector caught it in TestReplicatedStreamReplicasGrowAndShrink
// (the storage writer answering as the catalog respawned a shard); had the
// read seen no dispatcher, the sender's goroutine would have panicked.
//
// Until Start, what is posted waits here in order; Start hands it on,
// system messages first, and from then on posts go straight through. Shards
// and peer links use it: the two actors the node spawns again under a name
// others hold.
type guardedMailbox struct {
	inner actor.Mailbox
	// ready is set by Start once everything held has been handed on.
	ready atomic.Bool
	mu    sync.Mutex
	// sys and user are what was posted before Start, in order.
	sys, user []any
}

// guardedMailboxes returns a producer of guarded mailboxes around inner's.
func guardedMailboxes(inner actor.MailboxProducer) actor.MailboxProducer {
	return func() actor.Mailbox { return &guardedMailbox{inner: inner()} }
}

// PostUserMessage implements actor.Mailbox.
func (g *guardedMailbox) PostUserMessage(m any) {
	if !g.ready.Load() && g.hold(m, false) {
		return
	}
	g.inner.PostUserMessage(m)
}

// PostSystemMessage implements actor.Mailbox.
func (g *guardedMailbox) PostSystemMessage(m any) {
	if !g.ready.Load() && g.hold(m, true) {
		return
	}
	g.inner.PostSystemMessage(m)
}

// hold keeps m for Start, unless Start has handed everything on since the
// caller looked: then it reports false and the caller posts m itself.
func (g *guardedMailbox) hold(m any, system bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ready.Load() {
		return false
	}
	if system {
		g.sys = append(g.sys, m)
	} else {
		g.user = append(g.user, m)
	}
	return true
}

// RegisterHandlers implements actor.Mailbox.
func (g *guardedMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	g.inner.RegisterHandlers(invoker, dispatcher)
}

// Start implements actor.Mailbox: it starts the inner mailbox, then hands
// on what was held (what is posted meanwhile is held and handed on after
// it, so each sender's order stands), then lets posts through.
func (g *guardedMailbox) Start() {
	g.inner.Start()
	for {
		g.mu.Lock()
		sys, user := g.sys, g.user
		g.sys, g.user = nil, nil
		if len(sys) == 0 && len(user) == 0 {
			g.ready.Store(true)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		// Not under mu: a dispatcher that runs the mailbox at once could
		// post to it again.
		for _, m := range sys {
			g.inner.PostSystemMessage(m)
		}
		for _, m := range user {
			g.inner.PostUserMessage(m)
		}
	}
}

// UserMessageCount implements actor.Mailbox.
func (g *guardedMailbox) UserMessageCount() int {
	g.mu.Lock()
	held := len(g.user)
	g.mu.Unlock()
	return g.inner.UserMessageCount() + held
}
