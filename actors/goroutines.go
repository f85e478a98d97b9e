package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
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
	workers     *workerDispatcher
	workersOnce sync.Once
}

// dispatcherWorkers is how many idle workers a node's dispatcher keeps:
// enough for the mailboxes that run at once on a few cores, beyond which
// runs get goroutines of their own.
const dispatcherWorkers = 16

// dispatcherThroughput is how many messages a mailbox run takes before it
// yields, as protoactor's default dispatcher.
const dispatcherThroughput = 300

// Dispatcher returns the dispatcher for the actors that run for every
// record (shards, subscriptions, lanes, connections and group
// coordinators): it runs their mailboxes on long-lived workers of g. The
// default dispatcher starts a goroutine for every mailbox run, and a run
// that goes deep (a lane writing to its QUIC stream) grew the new
// goroutine's stack every time: at fan-out 1000, stack growth was a
// quarter of the node's CPU. A run goes to an idle worker if there is
// one, and to a goroutine of its own otherwise (as with the default), so
// it never waits for a worker and an actor that blocks holds up no other.
// The workers stop in CloseAndWait; runs scheduled after that get
// goroutines of their own. A nil g returns nil, protoactor's default.
func (g *Goroutines) Dispatcher() actor.Dispatcher {
	if g == nil {
		return nil
	}
	g.workersOnce.Do(func() {
		g.workers = &workerDispatcher{work: make(chan func()), done: make(chan struct{})}
		for range dispatcherWorkers {
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.workers.run()
			}()
		}
	})
	if g.workers == nil {
		return nil // closed before any start: the default
	}
	return g.workers
}

// workerDispatcher is Goroutines.Dispatcher's.
type workerDispatcher struct {
	// work hands a mailbox run to an idle worker (unbuffered: a send
	// succeeds only when one waits).
	work chan func()
	// done stops the workers.
	done     chan struct{}
	stopOnce sync.Once
}

// Schedule implements actor.Dispatcher.
func (d *workerDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		go fn()
	}
}

// Throughput implements actor.Dispatcher.
func (d *workerDispatcher) Throughput() int { return dispatcherThroughput }

// run is a worker: it runs what it is handed until stopped.
func (d *workerDispatcher) run() {
	for {
		select {
		case fn := <-d.work:
			fn()
		case <-d.done:
			return
		}
	}
}

// stop stops the workers once they finish their runs.
func (d *workerDispatcher) stop() { d.stopOnce.Do(func() { close(d.done) }) }

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
		g.workers.stop()
	}
	g.wg.Wait()
}
