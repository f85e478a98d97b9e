package client

import (
	"container/list"
	"context"
	"sync"
)

// byteBudget bounds the bytes of acked publishes in flight on a connection.
// A publisher acquires its frames' size before its publish is queued and the
// publish-stream actor releases it as the acks (or errors) arrive, so the
// bytes stay counted until the node has answered, not just until they were
// written.
//
// Waiters are served first come first served: a large request at the head
// is not overtaken by small ones behind it. A request larger than the whole
// limit is granted alone, when nothing else is held.
type byteBudget struct {
	// limit is the most bytes held at once (but see the alone rule).
	limit int64
	mu    struct {
		sync.Mutex
		// used is the bytes currently held.
		used int64
		// waiters holds *budgetWaiter in arrival order.
		waiters list.List
	}
}

// budgetWaiter is one acquire blocked on the budget.
type budgetWaiter struct {
	// n is the bytes asked for.
	n int64
	// ready is closed when the bytes were granted.
	ready chan struct{}
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit}
}

// acquire takes n bytes, waiting until they fit, ctx ends or stop is closed
// (then it returns ErrClosed). On an error nothing is held.
func (b *byteBudget) acquire(ctx context.Context, stop <-chan struct{}, n int64) error {
	b.mu.Lock()
	if b.mu.waiters.Len() == 0 && b.fitsLocked(n) {
		b.mu.used += n
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	elem := b.mu.waiters.PushBack(w)
	b.mu.Unlock()

	var err error
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = ErrClosed
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Granted while we were giving up: hand the bytes back.
		b.mu.used -= n
		b.grantLocked()
	default:
		front := b.mu.waiters.Front() == elem
		b.mu.waiters.Remove(elem)
		if front {
			// The head left; those behind it may fit now.
			b.grantLocked()
		}
	}
	return err
}

// release returns n bytes and wakes the waiters that now fit.
func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.used -= n
	if b.mu.used < 0 {
		panic("client: byte budget released more than was acquired")
	}
	b.grantLocked()
}

// fitsLocked reports whether n more bytes may be held now.
func (b *byteBudget) fitsLocked(n int64) bool {
	return b.mu.used == 0 || b.mu.used+n <= b.limit
}

// grantLocked grants waiters from the head while they fit.
func (b *byteBudget) grantLocked() {
	for e := b.mu.waiters.Front(); e != nil; e = b.mu.waiters.Front() {
		w := e.Value.(*budgetWaiter)
		if !b.fitsLocked(w.n) {
			return
		}
		b.mu.used += w.n
		b.mu.waiters.Remove(e)
		close(w.ready)
	}
}

// state returns the bytes held and the number of waiters (for tests).
func (b *byteBudget) state() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.used, b.mu.waiters.Len()
}
