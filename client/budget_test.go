package client

import (
	"context"
	"errors"
	"testing"
)

func TestByteBudget(t *testing.T) {
	ctx := context.Background()
	stop := make(chan struct{})
	b := newByteBudget(100)

	mustAcquire := func(n int64) {
		t.Helper()
		if err := b.acquire(ctx, stop, n); err != nil {
			t.Fatalf("acquire(%d): %v", n, err)
		}
	}
	// waiter starts an acquire that must wait, and returns its result channel.
	waiter := func(ctx context.Context, n int64) chan error {
		t.Helper()
		_, before := b.state()
		res := make(chan error, 1)
		go func() { res <- b.acquire(ctx, stop, n) }()
		waitFor(t, "the acquire to wait", func() bool { _, w := b.state(); return w == before+1 })
		return res
	}
	wantState := func(used int64, waiting int) {
		t.Helper()
		if u, w := b.state(); u != used || w != waiting {
			t.Fatalf("state = %d held, %d waiting; want %d, %d", u, w, used, waiting)
		}
	}

	mustAcquire(60)
	mustAcquire(40)
	wantState(100, 0)

	// FIFO: a big waiter at the head is not overtaken by a small one.
	big := waiter(ctx, 70)
	small := waiter(ctx, 10)
	b.release(40) // 60 held: 70 does not fit, so 10 must wait behind it
	wantState(60, 2)
	b.release(60) // 0 held: 70 then 10 fit
	if err := <-big; err != nil {
		t.Fatal(err)
	}
	if err := <-small; err != nil {
		t.Fatal(err)
	}
	wantState(80, 0)

	// A waiter whose context ends leaves, and those behind it move up.
	cctx, cancel := context.WithCancel(ctx)
	blocked := waiter(cctx, 50)
	behind := waiter(ctx, 20)
	cancel()
	if err := <-blocked; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	if err := <-behind; err != nil {
		t.Fatal(err)
	}
	wantState(100, 0)
	b.release(100)

	// More than the limit is granted alone.
	mustAcquire(1)
	huge := waiter(ctx, 500)
	b.release(1)
	if err := <-huge; err != nil {
		t.Fatal(err)
	}
	wantState(500, 0)
	next := waiter(ctx, 1)
	b.release(500)
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	b.release(1)
	wantState(0, 0)

	// Closing the client ends waits with ErrClosed.
	mustAcquire(100)
	closed := waiter(ctx, 1)
	close(stop)
	if err := <-closed; !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	wantState(100, 0)
}
