// Package dispatch runs protoactor mailboxes on long-lived workers: those
// of the node's per-record actors (shards, subscriptions, lanes,
// connections, group coordinators).
//
// protoactor's default dispatcher starts a goroutine for every mailbox run,
// and a run that goes deep (a lane writing to its QUIC stream, a
// subscription handing sections to its lane) grows the new goroutine's
// stack every time: at fan-out 1000, stack growth was a fifth to a quarter
// of the node's CPU. A Pool queues runs, in order, for workers whose stacks
// have grown once, and never makes a run wait behind one that blocks (a
// lane may block on its stream): whenever a run is queued, or taken with
// more queued behind it, and no worker is idle, a helper goroutine starts
// unless one is already starting, and a helper takes runs until the queue
// is empty. A burst of runs is so taken by the workers and a few helpers
// instead of a goroutine each.
package dispatch

import "sync"

// Pool is a protoactor dispatcher (actor.Dispatcher). Its owner runs its
// workers (Work) on goroutines it tracks and stops them with Stop.
//
// Its rule, kept under mu: while the queue is not empty, some goroutine
// that runs nothing is on its way to take from it (a signalled worker or a
// starting helper), so no queued run waits for a run that blocks.
type Pool struct {
	// throughput is how many messages a mailbox run takes before yielding.
	throughput int

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
	// stopped is set by Stop.
	stopped bool
}

// New returns a pool whose mailbox runs take throughput messages each
// before yielding (protoactor's default is 300).
func New(throughput int) *Pool {
	p := &Pool{throughput: throughput}
	p.wake.L = &p.mu
	return p
}

// Schedule implements actor.Dispatcher. After Stop, fn gets a goroutine of
// its own.
func (p *Pool) Schedule(fn func()) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		go fn()
		return
	}
	if p.head > 0 && len(p.queue) == cap(p.queue) {
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	p.queue = append(p.queue, fn)
	p.findTakerLocked()
	p.mu.Unlock()
}

// Throughput implements actor.Dispatcher.
func (p *Pool) Throughput() int { return p.throughput }

// Work is a worker: it takes and runs queued runs, and waits for more,
// until Stop. The owner runs it on a goroutine of its own.
func (p *Pool) Work() { p.work(false) }

// Stop makes the workers return once they finish their current runs; what
// is still queued gets goroutines of its own, as does every later run.
func (p *Pool) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	for _, fn := range p.queue[p.head:] {
		go fn()
	}
	clear(p.queue)
	p.queue, p.head = nil, 0
	p.idle = 0
	p.wake.Broadcast()
}

// findTakerLocked makes sure a goroutine that runs nothing comes for the
// queue: an idle worker, or else a helper unless one is starting.
func (p *Pool) findTakerLocked() {
	switch {
	case p.idle > 0:
		p.idle--
		p.wake.Signal()
	case p.starting == 0:
		p.starting++
		go p.work(true)
	}
}

// work takes and runs queued runs; a worker then waits for more until
// stopped, a helper returns once the queue is empty.
func (p *Pool) work(helper bool) {
	p.mu.Lock()
	if helper {
		p.starting--
	}
	for {
		for p.head == len(p.queue) {
			if helper || p.stopped {
				p.mu.Unlock()
				return
			}
			p.idle++
			p.wake.Wait()
		}
		fn := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
		} else {
			p.findTakerLocked() // the rest must not wait for fn
		}
		p.mu.Unlock()
		fn()
		p.mu.Lock()
	}
}
