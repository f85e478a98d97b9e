package actors

import (
	"sync"
	"testing"
	"time"
)

// The node's dispatcher never makes a mailbox run wait for a worker: with
// every worker held by a run that blocks, more runs still start (on
// helpers), and after CloseAndWait its workers are gone
// (the package's leak check) while runs scheduled later still run.
func TestDispatcherNeverWaitsForAWorker(t *testing.T) {
	g := &Goroutines{}
	d := g.Dispatcher()
	if d == nil || d.Throughput() != dispatcherThroughput {
		t.Fatalf("dispatcher %v", d)
	}
	if g.Dispatcher() != d {
		t.Fatal("a second call returned another dispatcher")
	}
	release := make(chan struct{})
	var started sync.WaitGroup
	runs := 2*dispatcherWorkers + 3
	started.Add(runs)
	var done sync.WaitGroup
	done.Add(runs)
	for range runs {
		d.Schedule(func() {
			started.Done()
			<-release
			done.Done()
		})
	}
	waitOrFail(t, &started, "every run to start while the workers are held")
	close(release)
	waitOrFail(t, &done, "the runs to end")
	g.CloseAndWait()
	var after sync.WaitGroup
	after.Add(1)
	d.Schedule(after.Done)
	waitOrFail(t, &after, "a run scheduled after CloseAndWait")
}

// A nil Goroutines, or one closed before any dispatch, gives protoactor's
// default (a nil dispatcher), never a nil *dispatch.Pool in an
// interface.
func TestDispatcherDefaults(t *testing.T) {
	var g *Goroutines
	if d := g.Dispatcher(); d != nil {
		t.Fatalf("nil Goroutines: %v", d)
	}
	g = &Goroutines{}
	g.CloseAndWait()
	if d := g.Dispatcher(); d != nil {
		t.Fatalf("closed Goroutines: %#v", d)
	}
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
