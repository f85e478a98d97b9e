package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// awaitLate waits for records that come after a silence, and reports when
// the last of them came; it gives up at its bound.
func TestAwaitLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		n.Store(90)
		go func() {
			time.Sleep(3 * time.Second) // a retransmission after a long silence
			n.Add(5)
			time.Sleep(2 * time.Second)
			n.Add(5)
		}()
		start := time.Now()
		got, after := awaitLate(context.Background(), 100, n.Load, 10*time.Second)
		if got != 100 || after < 5*time.Second || after > 5*time.Second+10*time.Millisecond {
			t.Errorf("awaitLate = %d after %v, want 100 after 5s", got, after)
		}
		if took := time.Since(start); took > 5*time.Second+10*time.Millisecond {
			t.Errorf("awaitLate returned at %v, not when the count was reached", took)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		n.Store(90)
		start := time.Now()
		got, after := awaitLate(context.Background(), 100, n.Load, 10*time.Second)
		if got != 90 || after != 0 || time.Since(start) < 10*time.Second {
			t.Errorf("awaitLate = %d after %v at %v, want 90 after 0 at 10s", got, after, time.Since(start))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var n atomic.Int64
		start := time.Now()
		if got, _ := awaitLate(ctx, 1, n.Load, 10*time.Second); got != 0 || time.Since(start) > time.Second+10*time.Millisecond {
			t.Errorf("awaitLate = %d at %v, want 0 by the context's end", got, time.Since(start))
		}
	})
}
