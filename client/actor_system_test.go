package client

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// A client's actor system has the small registry, still finds the
// processes the system registered before it shrank (its event stream),
// and registers, finds and forgets the actors spawned after.
func TestClientActorSystemHasASmallRegistry(t *testing.T) {
	sys := newActorSystem(slog.New(slog.DiscardHandler))
	defer sys.Shutdown()
	reg := sys.ProcessRegistry
	if n := len(reg.LocalPIDs.LocalPIDs); n != registryBuckets {
		t.Fatalf("registry has %d buckets, want %d", n, registryBuckets)
	}
	if _, ok := reg.Get(actor.NewPID(reg.Address, "eventstream")); !ok {
		t.Fatal("the system's event stream is not in the shrunk registry")
	}
	const actors = 100
	got := make(chan int, actors)
	pids := make([]*actor.PID, actors)
	for i := range pids {
		pids[i] = sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if n, ok := ctx.Message().(int); ok {
				got <- n
			}
		}))
	}
	for i, pid := range pids {
		sys.Root.Send(pid, i)
	}
	seen := make(map[int]bool)
	for range actors {
		select {
		case n := <-got:
			seen[n] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d actors answered", len(seen), actors)
		}
	}
	if len(seen) != actors {
		t.Fatalf("answers from %d distinct actors, want %d", len(seen), actors)
	}
	for _, pid := range pids {
		if err := sys.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	for i, pid := range pids {
		if _, ok := reg.Get(actor.NewPID(reg.Address, pid.Id)); ok {
			t.Fatalf("actor %d (%s) still registered after it stopped", i, fmt.Sprint(pid))
		}
	}
}
