package client

import "sync"

// goroutineGroup starts the client's goroutines and waits for them, the way
// nats-server's startGoRoutine does: once closed it refuses to start more, so
// Close can wait for every goroutine the client ever started.
type goroutineGroup struct {
	mu struct {
		sync.Mutex
		// closed is set by closeAndWait; Go refuses afterwards.
		closed bool
	}
	// wg counts running goroutines.
	wg sync.WaitGroup
}

// Go runs f on a new goroutine unless the group is closed; it reports whether
// f was started. A caller that is refused must clean up what f would have
// owned.
func (g *goroutineGroup) Go(f func()) bool {
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

// closeAndWait refuses new goroutines and waits for the running ones. The
// caller must first make them stop (the client closes the QUIC connection,
// which ends every reader).
func (g *goroutineGroup) closeAndWait() {
	g.mu.Lock()
	g.mu.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
