package actors

import "sync"

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
	g.wg.Wait()
}
