package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/actors/dispatch"
)

// Goroutines starts the goroutines that broker actors own (a connection's
// readers, a subscription's history reads, a coordinator's log reads) and
// waits for them, the way nats-server's startGoRoutine does. An actor never
// waits for its goroutines itself, not even in Stopped: it makes them stop
// (it cancels their context, closes their stream) and the node waits for
// all of them at once in Close, after the actors have stopped and before
// storage closes. Once closed it refuses to start more.
//
// A nil *Goroutines starts goroutines untracked (tests that build one actor
// alone); the node always passes one.
type Goroutines struct {
	mu struct {
		sync.Mutex
		// closed is set by CloseAndWait; Go refuses afterwards.
		closed bool
	}
	// wg counts running goroutines.
	wg sync.WaitGroup
	// workers runs the busiest actors' mailboxes (Dispatcher); started at
	// the first call.
	workers     *dispatch.Pool
	workersOnce sync.Once
}

// dispatcherWorkers is how many long-lived workers a node's dispatcher
// keeps: enough for the mailboxes that run at once on a few cores. Beyond
// them, helpers start and stay while there are runs to take.
const dispatcherWorkers = 16

// dispatcherThroughput is how many messages a mailbox run takes before it
// yields, as protoactor's default dispatcher.
const dispatcherThroughput = 300

// Dispatcher returns the dispatcher for the actors that run for every
// record (shards, subscriptions, lanes, connections and group
// coordinators): a dispatch.Pool with dispatcherWorkers workers owned by
// g, which runs their mailboxes on long-lived goroutines instead of one per
// run (see package dispatch: at fan-out 1000, the new goroutines' stack
// growth was a fifth of the node's CPU). The workers stop in CloseAndWait
// (each after its current run); runs still queued then, and runs scheduled
// after, get goroutines of their own. A nil g returns nil, protoactor's
// default.
func (g *Goroutines) Dispatcher() actor.Dispatcher {
	if g == nil {
		return nil
	}
	g.workersOnce.Do(func() {
		g.workers = dispatch.New(dispatcherThroughput)
		for range dispatcherWorkers {
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.workers.Work()
			}()
		}
	})
	if g.workers == nil {
		return nil // closed before any start: the default
	}
	return g.workers
}

// Go runs f on a new goroutine unless g is closed, and reports whether f was
// started. A caller that is refused must clean up what f would have owned
// (and answer what f would have answered).
func (g *Goroutines) Go(f func()) bool {
	if g == nil {
		go f()
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// CloseAndWait refuses new goroutines and waits for the running ones. The
// caller must first make them stop: the node stops the actors that own
// them, which cancel and close what the goroutines block on.
func (g *Goroutines) CloseAndWait() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.mu.closed = true
	g.mu.Unlock()
	g.workersOnce.Do(func() {}) // no workers start after this
	if g.workers != nil {
		g.workers.Stop()
	}
	g.wg.Wait()
}
