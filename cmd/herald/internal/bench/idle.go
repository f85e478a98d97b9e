package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
)

// Defaults of `herald bench idle` (issue target: 10,000 idle subscriptions
// on one node cost ≤ 20 KiB of RSS each).
const (
	defaultIdleSubscriptions = 10_000
	// defaultIdlePerConnection spreads the subscriptions over connections:
	// each client.Client is one QUIC connection with its own actor system,
	// and the node accepts 1000 streams per connection.
	defaultIdlePerConnection = 500
	// defaultIdleTimeout bounds the whole run.
	defaultIdleTimeout = 5 * time.Minute
	// idleTargetBytes is the target per idle subscription.
	idleTargetBytes = 20 << 10
	// idleSettle bounds the wait for the node's subscription gauge to
	// reach its expected value, and for goroutines to end after closing.
	idleSettle = 10 * time.Second
	// idleMetric is the node's gauge of live subscriptions.
	idleMetric = "herald_subscriptions"
)

// idleNoteProcess and idleNoteInProcess say what the figures include; one
// is printed and in the JSON.
const (
	idleNoteProcess = "the node runs as its own process (herald node): the figures are that process's, " +
		"read from its /metrics (process_resident_memory_bytes, go_memstats_heap_alloc_bytes, " +
		"go_memstats_stack_inuse_bytes, go_goroutines) without forcing a collection, so the heap includes garbage; " +
		"the clients' own cost is shown apart"
	idleNoteInProcess = "node and clients share this process: every figure includes the client side " +
		"(one actor, one QUIC stream and one reader goroutine per subscription) as well as the node's; " +
		"one process cannot separate them"
)

// idleSnapshotOf measures n's memory now: a child node's through its
// /metrics, a node in this process with this process (clients included).
func idleSnapshotOf(ctx context.Context, n node) (idleSnapshot, error) {
	p, ok := n.(*processNode)
	if !ok {
		return takeIdleSnapshot(), nil
	}
	m, err := p.metrics(ctx)
	if err != nil {
		return idleSnapshot{}, err
	}
	for _, name := range []string{"process_resident_memory_bytes", "go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines"} {
		if _, ok := m[name]; !ok {
			return idleSnapshot{}, fmt.Errorf("%w: %s", errNoMetric, name)
		}
	}
	return idleSnapshot{RSS: int64(m["process_resident_memory_bytes"]), Heap: int64(m["go_memstats_heap_alloc_bytes"]),
		Stacks: int64(m["go_memstats_stack_inuse_bytes"]), Goroutines: int(m["go_goroutines"])}, nil
}

// idleResult is the idle scenario's machine-readable result.
type idleResult struct {
	Scenario string `json:"scenario"`
	// Subscriptions is how many idle subscriptions were opened, all to
	// shard 0 of one stream, from the tail (nothing is published).
	Subscriptions int `json:"subscriptions"`
	// PerConnection and Connections are how they were spread over clients.
	PerConnection int `json:"per_connection"`
	Connections   int `json:"connections"`
	// SubscribeSeconds is from the first Subscribe to the node's gauge
	// showing them all.
	SubscribeSeconds float64 `json:"subscribe_seconds"`
	// Baseline is the node with one control client; Connected adds the
	// idle clients; Subscribed adds the subscriptions; Closed is after
	// every subscription and idle client closed.
	Baseline   idleSnapshot `json:"baseline"`
	Connected  idleSnapshot `json:"connected"`
	Subscribed idleSnapshot `json:"subscribed"`
	Closed     idleSnapshot `json:"closed"`
	// PerSubscription is (Subscribed − Baseline) / Subscriptions: the
	// connections' cost shared among the subscriptions.
	PerSubscription idleCost `json:"per_subscription"`
	// PerSubscriptionOnly is (Subscribed − Connected) / Subscriptions: the
	// subscriptions alone.
	PerSubscriptionOnly idleCost `json:"per_subscription_excluding_connections"`
	// TargetBytes is the target of RSS per subscription; WithinTarget
	// compares PerSubscription.RSS (the larger figure) with it.
	TargetBytes  int64 `json:"target_rss_bytes_per_subscription"`
	WithinTarget bool  `json:"within_target"`
	// NodeSubscriptions is the node's gauge with all open and after close.
	NodeSubscriptions       float64 `json:"node_subscriptions_open"`
	NodeSubscriptionsClosed float64 `json:"node_subscriptions_after_close"`
	// NodeProcess is set when the node ran as its own process; the
	// snapshots above are then the node's alone and Clients* are this
	// process's (the clients') at the same points.
	NodeProcess            bool          `json:"node_process"`
	ClientsBaseline        *idleSnapshot `json:"clients_baseline,omitempty"`
	ClientsSubscribed      *idleSnapshot `json:"clients_subscribed,omitempty"`
	ClientsPerSubscription *idleCost     `json:"clients_per_subscription,omitempty"`
	// Note says what the figures include.
	Note string `json:"note"`
}

// idleSnapshot is the process's memory at one point, measured after two
// collections (the second empties sync.Pools' victim caches) and
// debug.FreeOSMemory (which returns free pages to the OS).
type idleSnapshot struct {
	// RSS is VmRSS from /proc/self/status.
	RSS int64 `json:"rss_bytes"`
	// Heap is the live Go heap (HeapAlloc after the collection).
	Heap int64 `json:"heap_bytes"`
	// Stacks is goroutine stack memory (StackInuse), not part of Heap.
	Stacks int64 `json:"stack_bytes"`
	// Goroutines is the number of goroutines.
	Goroutines int `json:"goroutines"`
}

// idleCost is a snapshot difference divided among subscriptions.
type idleCost struct {
	RSS        float64 `json:"rss_bytes"`
	Heap       float64 `json:"heap_bytes"`
	Stacks     float64 `json:"stack_bytes"`
	Goroutines float64 `json:"goroutines"`
}

// takeIdleSnapshot measures the process now.
func takeIdleSnapshot() idleSnapshot {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return idleSnapshot{RSS: processRSS(), Heap: int64(m.HeapAlloc), Stacks: int64(m.StackInuse),
		Goroutines: runtime.NumGoroutine()}
}

// idleCostOf returns (to − from) / n.
func idleCostOf(from, to idleSnapshot, n int) idleCost {
	d := float64(n)
	return idleCost{RSS: float64(to.RSS-from.RSS) / d, Heap: float64(to.Heap-from.Heap) / d,
		Stacks: float64(to.Stacks-from.Stacks) / d, Goroutines: float64(to.Goroutines-from.Goroutines) / d}
}

func runIdle(env *Env, args []string) int {
	f := newScenarioFlags("idle")
	subs := f.fs.Int("subscriptions", defaultIdleSubscriptions, "idle subscriptions to open")
	per := f.fs.Int("per-connection", defaultIdlePerConnection, "subscriptions per client connection (the node accepts 1000 streams per connection)")
	timeout := f.fs.Duration("timeout", defaultIdleTimeout, "bound on the whole run")
	memProfile := f.fs.String("memprofile", "", "write a heap profile with every subscription open to `file`")
	if code, ok := env.parse(f.fs, args); !ok {
		return code
	}
	if *subs < 1 || *per < 1 || *timeout <= 0 {
		return env.usageError("idle", errors.New("--subscriptions, --per-connection and --timeout must be positive"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	s, err := env.open(ctx, "idle", *f.inProcess)
	if err != nil {
		return env.fail("idle", err)
	}
	defer s.close()
	res, err := s.idle(ctx, *subs, *per, *memProfile)
	if err != nil {
		return s.fail(err)
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		kib := func(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }
		mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
		fmt.Fprintf(w, "idle: %d idle subscriptions to one shard over %d connections (%d each), opened in %.2fs\n",
			res.Subscriptions, res.Connections, res.PerConnection, res.SubscribeSeconds)
		fmt.Fprintf(w, "  %-12s %10s %10s %10s %11s\n", "", "RSS", "heap", "stacks", "goroutines")
		for _, sn := range []struct {
			name string
			s    idleSnapshot
		}{{"baseline", res.Baseline}, {"connected", res.Connected}, {"subscribed", res.Subscribed}, {"closed", res.Closed}} {
			fmt.Fprintf(w, "  %-12s %10s %10s %10s %11d\n", sn.name, mib(sn.s.RSS), mib(sn.s.Heap), mib(sn.s.Stacks), sn.s.Goroutines)
		}
		fmt.Fprintf(w, "  per subscription:                        RSS %s  heap %s  stacks %s  goroutines %.2f\n",
			kib(res.PerSubscription.RSS), kib(res.PerSubscription.Heap), kib(res.PerSubscription.Stacks), res.PerSubscription.Goroutines)
		fmt.Fprintf(w, "  per subscription, connections excluded:  RSS %s  heap %s  stacks %s  goroutines %.2f\n",
			kib(res.PerSubscriptionOnly.RSS), kib(res.PerSubscriptionOnly.Heap), kib(res.PerSubscriptionOnly.Stacks), res.PerSubscriptionOnly.Goroutines)
		if c := res.ClientsPerSubscription; c != nil {
			fmt.Fprintf(w, "  clients (this process), per subscription: RSS %s  heap %s  stacks %s  goroutines %.2f\n",
				kib(c.RSS), kib(c.Heap), kib(c.Stacks), c.Goroutines)
		}
		fmt.Fprintf(w, "  target: RSS <= %s per subscription: within=%t\n", kib(float64(res.TargetBytes)), res.WithinTarget)
		fmt.Fprintf(w, "  node gauge %s: %.0f open, %.0f after close\n", idleMetric, res.NodeSubscriptions, res.NodeSubscriptionsClosed)
		fmt.Fprintf(w, "  note: %s\n", res.Note)
	})
}

// errIdleSettle is returned when the node's subscription gauge does not
// reach its expected value in time.
var errIdleSettle = errors.New("node subscription gauge did not settle")

// idle measures the process before and after opening subs idle
// subscriptions on n, per per client, then closes them and measures again.
// With memProfile set it writes a heap profile there while they are open.
func (s *session) idle(ctx context.Context, subs, per int, memProfile string) (*idleResult, error) {
	n, progress := s.node, s.progress
	conns := (subs + per - 1) / per
	isProcess := s.nodeProcess()
	res := &idleResult{Scenario: "idle", Subscriptions: subs, PerConnection: per, Connections: conns,
		TargetBytes: idleTargetBytes, Note: idleNoteInProcess, NodeProcess: isProcess}
	if isProcess {
		res.Note = idleNoteProcess
	}
	stream := client.StreamName{Tenant: "bench", Namespace: "idle", Stream: "idle"}
	ctl, err := n.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	if _, err := ctl.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		return nil, err
	}
	progress.phase("idle: baseline", "", nil, 0)
	if res.Baseline, err = idleSnapshotOf(ctx, n); err != nil {
		return nil, err
	}
	clientsBaseline := takeIdleSnapshot()

	// clients and their subscriptions are closed on every path; the
	// success path closes them itself to measure what is left.
	clients := make([]*client.Client, 0, conns)
	subsByClient := make([][]*client.Subscription, conns)
	closeAll := func() {
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, s := range subsByClient[i] {
					_ = s.Close()
				}
				_ = c.Close()
			}()
		}
		wg.Wait()
		clients, subsByClient = nil, nil
	}
	defer func() { closeAll() }()
	var dialed atomic.Int64
	progress.phase("idle: dial", "connections", &dialed, 0)
	for range conns {
		c, err := n.dial(ctx)
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
		dialed.Add(1)
	}
	if res.Connected, err = idleSnapshotOf(ctx, n); err != nil {
		return nil, err
	}

	var opened atomic.Int64
	progress.phase("idle: subscribe", "subscriptions", &opened, 0)
	start := time.Now()
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i, c := range clients {
		k := min(per, subs-i*per)
		subsByClient[i] = make([]*client.Subscription, 0, k)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range k {
				s, err := c.Subscribe(ctx, stream, client.WithShard(0), client.WithStartLatest())
				if err != nil {
					errs[i] = fmt.Errorf("connection %d: %w", i, err)
					return
				}
				subsByClient[i] = append(subsByClient[i], s)
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if res.NodeSubscriptions, err = idleAwaitGauge(ctx, n, float64(subs)); err != nil {
		return nil, err
	}
	res.SubscribeSeconds = time.Since(start).Seconds()
	progress.phase("idle: measure", "", nil, 0)
	if res.Subscribed, err = idleSnapshotOf(ctx, n); err != nil {
		return nil, err
	}
	if isProcess {
		clientsSubscribed := takeIdleSnapshot()
		cost := idleCostOf(clientsBaseline, clientsSubscribed, subs)
		res.ClientsBaseline, res.ClientsSubscribed, res.ClientsPerSubscription = &clientsBaseline, &clientsSubscribed, &cost
	}
	res.PerSubscription = idleCostOf(res.Baseline, res.Subscribed, subs)
	res.PerSubscriptionOnly = idleCostOf(res.Connected, res.Subscribed, subs)
	res.WithinTarget = res.PerSubscription.RSS <= float64(res.TargetBytes)
	if memProfile != "" {
		if err := writeIdleHeapProfile(memProfile); err != nil {
			return nil, err
		}
	}

	progress.phase("idle: close", "", nil, 0)
	closeAll()
	if res.NodeSubscriptionsClosed, err = idleAwaitGauge(ctx, n, 0); err != nil {
		return nil, fmt.Errorf("after close: %w", err)
	}
	if !isProcess {
		idleAwaitGoroutines(ctx, res.Baseline.Goroutines)
	}
	if res.Closed, err = idleSnapshotOf(ctx, n); err != nil {
		return nil, err
	}
	return res, nil
}

// idleAwaitGauge polls the node's subscription gauge until it is want, and
// returns its last value; errIdleSettle if it is not want within
// idleSettle.
func idleAwaitGauge(ctx context.Context, n node, want float64) (float64, error) {
	deadline := time.Now().Add(idleSettle)
	for {
		got, err := n.metric(ctx, idleMetric)
		if err != nil {
			return got, err
		}
		if got == want {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("%w: %s is %.0f, want %.0f", errIdleSettle, idleMetric, got, want)
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// idleAwaitGoroutines waits, up to idleSettle, for the goroutine count to
// fall to want; the count left is reported in the Closed snapshot.
func idleAwaitGoroutines(ctx context.Context, want int) {
	deadline := time.Now().Add(idleSettle)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// writeIdleHeapProfile writes the heap profile to path.
func writeIdleHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
