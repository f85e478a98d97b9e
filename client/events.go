package client

import (
	"fmt"
	"sync"
	"time"
)

// ConnectionEventKind says what happened to a Client's connection.
type ConnectionEventKind int

// Connection event kinds.
const (
	// ConnectionDisconnected: the connection was lost (Err says why). With
	// reconnecting on (the default), the client is now trying to connect
	// again; calls made meanwhile wait (see Client).
	ConnectionDisconnected ConnectionEventKind = iota + 1
	// ConnectionReconnected: the client connected again (Addr, NodeID,
	// Attempts, Downtime), and resumes its subscriptions, group members and
	// publishes there.
	ConnectionReconnected
	// ConnectionClosed: the client will not connect again: Close was called
	// (Err nil), reconnecting gave up (Err is a *ReconnectError), or the
	// connection was lost WithoutReconnect (Err is the loss). It is the
	// last event.
	ConnectionClosed
)

// String returns "disconnected", "reconnected" or "closed".
func (k ConnectionEventKind) String() string {
	switch k {
	case ConnectionDisconnected:
		return "disconnected"
	case ConnectionReconnected:
		return "reconnected"
	case ConnectionClosed:
		return "closed"
	}
	return fmt.Sprintf("ConnectionEventKind(%d)", int(k))
}

// ConnectionEvent is one change of a Client's connection, as
// WithConnectionEvents delivers it.
type ConnectionEvent struct {
	// Kind is what happened.
	Kind ConnectionEventKind
	// Addr is the node's address: the one lost (ConnectionDisconnected),
	// the one connected (ConnectionReconnected).
	Addr string
	// NodeID is the node's id from its Welcome: the one lost, or the one
	// connected.
	NodeID string
	// Err is why the connection was lost (ConnectionDisconnected), or why
	// the client will not connect again (ConnectionClosed; nil after Close).
	Err error
	// Attempts is how many attempts the reconnect took
	// (ConnectionReconnected) or made before it gave up (ConnectionClosed).
	Attempts int
	// Downtime is how long the client was disconnected
	// (ConnectionReconnected).
	Downtime time.Duration
}

// WithConnectionEvents calls fn with every change of the connection
// (ConnectionDisconnected, ConnectionReconnected, ConnectionClosed), in
// order, one at a time, on a goroutine of the client's (never on the caller's
// or an actor's). fn must return promptly and must not call Close: Close
// delivers ConnectionClosed and waits for fn to return.
func WithConnectionEvents(fn func(ConnectionEvent)) Option {
	return func(o *options) { o.events = fn }
}

// eventDispatcher queues connection events and hands them to the
// application's callback on its own goroutine (run), so that no actor ever
// waits for the application. Emitting never blocks; once closed (after
// ConnectionClosed) it drops later events.
type eventDispatcher struct {
	fn func(ConnectionEvent)
	mu struct {
		sync.Mutex
		// queue holds the events not yet delivered, oldest first.
		queue []ConnectionEvent
		// closed is set once ConnectionClosed was queued.
		closed bool
	}
	// wake has a value when the queue may have grown (capacity 1).
	wake chan struct{}
}

func newEventDispatcher(fn func(ConnectionEvent)) *eventDispatcher {
	return &eventDispatcher{fn: fn, wake: make(chan struct{}, 1)}
}

// emit queues ev, unless ConnectionClosed was queued already; a
// ConnectionClosed event closes the dispatcher. A nil dispatcher drops
// every event.
func (d *eventDispatcher) emit(ev ConnectionEvent) {
	if d == nil {
		return
	}
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return
	}
	d.mu.queue = append(d.mu.queue, ev)
	d.mu.closed = ev.Kind == ConnectionClosed
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run delivers the queued events until it has delivered ConnectionClosed.
func (d *eventDispatcher) run() {
	for {
		<-d.wake
		d.mu.Lock()
		evs := d.mu.queue
		d.mu.queue = nil
		d.mu.Unlock()
		for _, ev := range evs {
			d.fn(ev)
			if ev.Kind == ConnectionClosed {
				return
			}
		}
	}
}
