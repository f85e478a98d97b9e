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

// dispatcherWorkers is how many long-lived workers a node's dispatcher
// keeps: enough for the mailboxes that run at once on a few cores. Beyond
// them, helpers start and stay while there are runs to take.
const dispatcherWorkers = 16

// dispatcherThroughput is how many messages a mailbox run takes before it
// yields, as protoactor's default dispatcher.
const dispatcherThroughput = 300

// Dispatcher returns the dispatcher for the actors that run for every
// record (shards, subscriptions, lanes, connections and group
// coordinators): it runs their mailboxes on long-lived workers of g. The
// default dispatcher starts a goroutine for every mailbox run, and a run
// that goes deep (a lane writing to its QUIC stream) grows the new
// goroutine's stack every time: at fan-out 1000, stack growth was a
// quarter of the node's CPU. Runs queue, in order, for the workers, and a
// run never waits behind one that blocks (a lane may block on its
// stream): whenever a run is queued, or taken with more queued behind it,
// and no worker is idle, a helper goroutine starts unless one is already
// starting, and a helper takes runs until the queue is empty. So a burst
// of runs is taken by the workers and a few helpers instead of a goroutine
// each. The workers stop in CloseAndWait (each after its current run); runs
// still queued then, and runs scheduled after, get goroutines of their own.
// A nil g returns nil, protoactor's default.
func (g *Goroutines) Dispatcher() actor.Dispatcher {
	if g == nil {
		return nil
	}
	g.workersOnce.Do(func() {
		g.workers = newWorkerDispatcher()
		for range dispatcherWorkers {
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.workers.work(false)
			}()
		}
	})
	if g.workers == nil {
		return nil // closed before any start: the default
	}
	return g.workers
}

// workerDispatcher is Goroutines.Dispatcher's. Its rule, kept under mu:
// while the queue is not empty, some goroutine that runs nothing is on its
// way to take from it (a signalled worker or a starting helper), so no
// queued run waits for a run that blocks.
type workerDispatcher struct {
	mu sync.Mutex
	// wake signals idle workers; each Signal is for one counted in idle.
	wake sync.Cond
	// queue[head:] are the runs not yet taken, in order.
	queue []func()
	head  int
	// idle counts the workers waiting on wake that no Signal is for yet.
	idle int
	// starting counts the helpers started that have not yet taken mu.
	starting int
	// stopped is set by stop.
	stopped bool
}

func newWorkerDispatcher() *workerDispatcher {
	d := &workerDispatcher{}
	d.wake.L = &d.mu
	return d
}

// Schedule implements actor.Dispatcher.
func (d *workerDispatcher) Schedule(fn func()) {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		go fn()
		return
	}
	if d.head > 0 && len(d.queue) == cap(d.queue) {
		n := copy(d.queue, d.queue[d.head:])
		clear(d.queue[n:])
		d.queue, d.head = d.queue[:n], 0
	}
	d.queue = append(d.queue, fn)
	d.findTakerLocked()
	d.mu.Unlock()
}

// findTakerLocked makes sure a goroutine that runs nothing comes for the
// queue: an idle worker, or else a helper unless one is starting.
func (d *workerDispatcher) findTakerLocked() {
	switch {
	case d.idle > 0:
		d.idle--
		d.wake.Signal()
	case d.starting == 0:
		d.starting++
		go d.work(true)
	}
}

// Throughput implements actor.Dispatcher.
func (d *workerDispatcher) Throughput() int { return dispatcherThroughput }

// work takes and runs queued runs; a worker (helper false) then waits for
// more until stopped, a helper returns once the queue is empty.
func (d *workerDispatcher) work(helper bool) {
	d.mu.Lock()
	if helper {
		d.starting--
	}
	for {
		for d.head == len(d.queue) {
			if helper || d.stopped {
				d.mu.Unlock()
				return
			}
			d.idle++
			d.wake.Wait()
		}
		fn := d.queue[d.head]
		d.queue[d.head] = nil
		d.head++
		if d.head == len(d.queue) {
			d.queue, d.head = d.queue[:0], 0
		} else {
			d.findTakerLocked() // the rest must not wait for fn
		}
		d.mu.Unlock()
		fn()
		d.mu.Lock()
	}
}

// stop stops the workers once they finish their runs; what is still queued
// gets goroutines of its own.
func (d *workerDispatcher) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.stopped = true
	for _, fn := range d.queue[d.head:] {
		go fn()
	}
	clear(d.queue)
	d.queue, d.head = nil, 0
	d.idle = 0
	d.wake.Broadcast()
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
		g.workers.stop()
	}
	g.wg.Wait()
}
