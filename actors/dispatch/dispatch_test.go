package dispatch

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startWorkers runs n workers of p and returns a wait for their return.
func startWorkers(p *Pool, n int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Work()
		}()
	}
	return &wg
}

// TestRunsNeverWaitBehindBlockedRuns schedules bursts of runs, from outside
// and from inside runs, among which some block until the end: every other
// run must still finish while they hold, however many workers they take.
func TestRunsNeverWaitBehindBlockedRuns(t *testing.T) {
	const workers = 4
	p := New(300)
	wg := startWorkers(p, workers)
	rng := rand.New(rand.NewPCG(7, 8))
	release := make(chan struct{})
	var quick, blocked sync.WaitGroup
	var schedule func(depth int)
	schedule = func(depth int) {
		quick.Add(1)
		p.Schedule(func() {
			defer quick.Done()
			if depth > 0 {
				schedule(depth - 1) // an actor sending to another
			}
		})
	}
	for burst := range 20 {
		for i := range 200 {
			if rng.IntN(20) == 0 || (burst == 0 && i < 2*workers) {
				blocked.Add(1)
				p.Schedule(func() {
					defer blocked.Done()
					<-release
				})
				continue
			}
			schedule(rng.IntN(3))
		}
		waitOrFail(t, &quick, "the runs that do not block, beside the blocked ones")
	}
	close(release)
	waitOrFail(t, &blocked, "the blocked runs once released")
	p.Stop()
	waitOrFail(t, wg, "the workers to return after Stop")
}

// TestEveryRunRunsOnce queues a thousand runs behind one that holds the
// only worker: each runs exactly once (a queue that lost or repeated runs
// would show here).
func TestEveryRunRunsOnce(t *testing.T) {
	p := New(1)
	if p.Throughput() != 1 {
		t.Fatalf("throughput %d", p.Throughput())
	}
	hold := make(chan struct{})
	var order []int
	var mu sync.Mutex
	var done sync.WaitGroup
	done.Add(1001)
	// The first run holds the only worker (and, behind it, a helper takes
	// the rest), so the later ones queue up.
	p.Schedule(func() { <-hold; done.Done() })
	for i := range 1000 {
		p.Schedule(func() {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			done.Done()
		})
	}
	wg := startWorkers(p, 1)
	close(hold)
	waitOrFail(t, &done, "every run")
	// Helpers may run queued runs side by side; each takes them in queue
	// order, so every run ran once.
	seen := make([]bool, 1000)
	for _, i := range order {
		if seen[i] {
			t.Fatalf("run %d ran twice", i)
		}
		seen[i] = true
	}
	if len(order) != 1000 {
		t.Fatalf("%d of 1000 runs ran", len(order))
	}
	p.Stop()
	waitOrFail(t, wg, "the worker to return")
}

// TestStop: runs queued when Stop is called, and runs scheduled after it,
// still run; the workers return after their current runs.
func TestStop(t *testing.T) {
	p := New(300)
	wg := startWorkers(p, 2)
	hold := make(chan struct{})
	var held, rest sync.WaitGroup
	held.Add(2)
	for range 2 {
		p.Schedule(func() { held.Done(); <-hold })
	}
	waitOrFail(t, &held, "both workers to be held")
	rest.Add(3)
	p.Schedule(rest.Done) // queued, or taken by a helper
	p.Stop()
	p.Stop() // idempotent
	p.Schedule(rest.Done)
	p.Schedule(rest.Done)
	waitOrFail(t, &rest, "the runs queued at and scheduled after Stop")
	close(hold)
	waitOrFail(t, wg, "the workers to return after their runs")
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
