package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
)

// Defaults of `herald bench groups`.
const (
	// defaultGroupRecords is how many records each run consumes: as many
	// as JetStream's side consumes (herald-compare --messages), like with
	// like, and long enough that one stall of the disk does not halve a run.
	defaultGroupRecords = 300_000
	// groupPreloadBatch is the records per publish when preloading.
	groupPreloadBatch = 64
	// groupPollMax is the most records one Group.Poll returns: JetStream's
	// side pulls 500 at a time (herald-compare --pull), like with like.
	groupPollMax = 500
	// groupPollWait is how long one Group.Poll may wait for records.
	groupPollWait = time.Second
	// benchGroup is the consumer group's name.
	benchGroup = "bench"
)

// groupsResult is the groups scenario's machine-readable result.
type groupsResult struct {
	Scenario string `json:"scenario"`
	// RecordsPerRun is how many records each run pre-publishes and consumes.
	RecordsPerRun int `json:"records_per_run"`
	PayloadBytes  int `json:"payload_bytes"`
	// NodeProcess is true when the node ran as its own process (the
	// default): the runs' node_cpu_* figures are then its own.
	NodeProcess bool `json:"node_process"`
	// Runs are the push runs (by window), then the pull run.
	Runs []groupRun `json:"runs"`
}

// groupRun is one consumption of a pre-published durable one-shard stream
// by one group member.
type groupRun struct {
	// Mode is "push" (Group.Subscribe, an Ack per delivery, acks
	// concurrent) or "pull" (Group.Poll, a Group.AckAsync per record).
	Mode string `json:"mode"`
	// Window is the push credit window; 0 for pull.
	Window int `json:"window,omitempty"`
	// AcksInflight is the most Group.AckAsync acks unanswered at once (pull
	// only).
	AcksInflight int   `json:"acks_inflight,omitempty"`
	Records      int64 `json:"records"`
	// Seconds is from the subscription (or first poll) to the last ack.
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	// PreloadRecordsPerSec is the rate of the untimed preload (durable,
	// 64 per batch), for reference.
	PreloadRecordsPerSec float64 `json:"preload_records_per_sec"`
	// CPU is the node's and the clients' CPU over the consumption (not the
	// preload), per million records acked.
	CPU
}

// name labels the run in the summary.
func (r groupRun) name() string {
	if r.Mode == "push" {
		return fmt.Sprintf("push window %d", r.Window)
	}
	return fmt.Sprintf("pull ack/record (%d in flight)", r.AcksInflight)
}

func runGroups(env *Env, args []string) int {
	f := newScenarioFlags("groups")
	records := f.fs.Int("records", defaultGroupRecords, "records pre-published and consumed per run")
	size := f.fs.Int("payload", 128, "payload bytes per record")
	windows := f.fs.String("window", "100,1000", "comma-separated push credit windows (empty: no push run)")
	pull := f.fs.Bool("pull", true, "also run pull with an ack per record")
	acksInflight := f.fs.Int("acks-inflight", 1024, "most Group.AckAsync acks unanswered at once when pulling")
	if code, ok := env.parse(f.fs, args); !ok {
		return code
	}
	var pushWindows []int
	if strings.TrimSpace(*windows) != "" {
		for _, w := range strings.Split(*windows, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 2 {
				return env.usageError("groups", fmt.Errorf("invalid --window %q", w))
			}
			pushWindows = append(pushWindows, n)
		}
	}
	if *records < 1 || *size < 1 || *acksInflight < 1 {
		return env.usageError("groups", errors.New("--records, --payload and --acks-inflight must be positive"))
	}
	s, err := env.open(context.Background(), "groups", *f.inProcess)
	if err != nil {
		return env.fail("groups", err)
	}
	defer s.close()
	res := &groupsResult{Scenario: "groups", RecordsPerRun: *records, PayloadBytes: *size, NodeProcess: s.nodeProcess()}
	plans := pushWindows // 0: pull
	if *pull {
		plans = append(plans, 0)
	}
	for i, window := range plans {
		run, err := s.groupRun(i, window, *acksInflight, *records, *size)
		if err != nil {
			return s.fail(fmt.Errorf("%s: %w", run.name(), err))
		}
		res.Runs = append(res.Runs, run)
	}
	return s.report(*f.asJSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "groups: %d pre-published durable records of %d B per run, one member, one shard, %s\n", res.RecordsPerRun, res.PayloadBytes, s.nodeNote())
		fmt.Fprintf(w, "  %-32s %12s %s\n", "run", "records/s", cpuHeader)
		for _, r := range res.Runs {
			fmt.Fprintf(w, "  %-32s %12.0f %s\n", r.name(), r.RecordsPerSec, r.columns())
		}
	})
}

// groupRun pre-publishes records to a fresh durable stream and consumes
// them through group "bench": pushed within window when window > 0, else
// polled and acked per record with up to acksInflight acks in flight.
func (s *session) groupRun(i, window, acksInflight, records, size int) (groupRun, error) {
	run := groupRun{Mode: "pull", AcksInflight: acksInflight}
	if window > 0 {
		run = groupRun{Mode: "push", Window: window}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := s.node.dial(ctx)
	if err != nil {
		return run, err
	}
	defer c.Close()
	stream := client.StreamName{Tenant: "bench", Namespace: "groups", Stream: fmt.Sprintf("%s-%d", run.Mode, i)}
	drop, err := freshStream(ctx, c, stream, client.StreamConfig{Shards: 1, Durable: true})
	if err != nil {
		return run, err
	}
	defer drop()
	start := time.Now()
	if err := s.preloadGroup(ctx, c, stream, run.name(), records, size); err != nil {
		return run, fmt.Errorf("preload: %w", err)
	}
	run.PreloadRecordsPerSec = float64(records) / time.Since(start).Seconds()

	var count atomic.Int64
	s.progress.phase(run.name(), "records", &count, 0)
	m, err := s.startMeter()
	if err != nil {
		return run, err
	}
	var elapsed time.Duration
	if window > 0 {
		elapsed, err = consumePush(ctx, c, stream, window, records, &count)
	} else {
		elapsed, err = consumePull(ctx, c, stream, acksInflight, records, &count)
	}
	if err != nil {
		return run, err
	}
	if got := count.Load(); got != int64(records) {
		return run, fmt.Errorf("%w: %d of %d records acked", errLost, got, records)
	}
	if run.CPU, err = m.stop(int64(records)); err != nil {
		return run, err
	}
	run.Records = int64(records)
	run.Seconds = elapsed.Seconds()
	run.RecordsPerSec = float64(records) / elapsed.Seconds()
	return run, nil
}

// preloadGroup publishes n records of size bytes to stream in batches of
// 64, pipelined, and checks that all were acked.
func (s *session) preloadGroup(ctx context.Context, c *client.Client, stream client.StreamName, name string, n, size int) error {
	batch := randomPayloads(groupPreloadBatch, size)
	p := startPipeline(ctx, c, stream, defaultPublishInflight, nil)
	defer p.finish()
	s.progress.phase(name+": preload", "records", &p.acked, 0)
	for left := n; left > 0; left -= len(batch) {
		if err := p.publish(ctx, batch[:min(left, len(batch))]); err != nil {
			return err
		}
	}
	if err := p.finish(); err != nil {
		return err
	}
	if got := p.acked.Load(); got != int64(n) {
		return fmt.Errorf("%w: %d of %d records acked", errLost, got, n)
	}
	return nil
}

// consumePush joins the group with the given credit window and acks every
// delivery on its own goroutine until n records were acked.
func consumePush(ctx context.Context, c *client.Client, stream client.StreamName, window, n int, count *atomic.Int64) (time.Duration, error) {
	start := time.Now()
	m, err := c.Group(stream, benchGroup).Subscribe(ctx, client.WithWindow(window), client.WithMaxPerPush(window/2))
	if err != nil {
		return 0, err
	}
	defer m.Close()
	var acks sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	for got := 0; got < n; {
		d, err := m.Next(ctx)
		if err != nil {
			fail(err)
			break
		}
		got += len(d.Records)
		acks.Add(1)
		go func() {
			defer acks.Done()
			if err := m.Ack(ctx, d); err != nil {
				fail(err)
				return
			}
			count.Add(int64(len(d.Records)))
		}()
	}
	acks.Wait()
	return time.Since(start), firstErr
}

// consumePull polls shard 0 (up to groupPollMax records a poll, the next
// poll on its way while the loop acks the last one's records, as
// JetStream's Messages iterator keeps its next pull outstanding) and acks
// each record with its own Group.AckAsync from the loop, up to inflight
// unanswered at once (past it the loop waits for the oldest), until n
// records were acked: what a NATS consumer does with Msg.Ack, but every
// ack waited for, durable, before the run ends.
func consumePull(ctx context.Context, c *client.Client, stream client.StreamName, inflight, n int, count *atomic.Int64) (time.Duration, error) {
	start := time.Now()
	g := c.Group(stream, benchGroup)
	polls := startPoller(ctx, g, n)
	defer polls.stop()
	// pending is a FIFO of the acks on their way, oldest at head.
	pending := make([]*client.AckFuture, inflight)
	head, queued := 0, 0
	settle := func() error {
		f := pending[head]
		pending[head], head, queued = nil, (head+1)%inflight, queued-1
		k, err := f.Wait(ctx)
		if err != nil {
			return err
		}
		count.Add(int64(k))
		return nil
	}
	var firstErr error
	for got := 0; got < n && firstErr == nil; {
		p, ok := <-polls.out
		if !ok {
			firstErr = errors.New("the poller stopped early")
			break
		}
		if p.err != nil {
			firstErr = p.err
			break
		}
		got += len(p.recs)
		for _, r := range p.recs {
			if queued == inflight {
				if firstErr = settle(); firstErr != nil {
					break
				}
			}
			f, err := g.AckAsync(r)
			if err != nil {
				firstErr = err
				break
			}
			pending[(head+queued)%inflight] = f
			queued++
		}
	}
	for queued > 0 {
		if err := settle(); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil && count.Load() < int64(n) {
		firstErr = errors.New("fewer records acked than consumed")
	}
	return time.Since(start), firstErr
}

// poll is one Group.Poll's answer.
type poll struct {
	recs []client.GroupRecord
	err  error
}

// poller polls a group one request at a time on a goroutine of its own,
// one answer ahead of its reader, until it has polled n records or fails.
type poller struct {
	// out carries the answers; closed when the poller ends.
	out    chan poll
	cancel context.CancelFunc
	done   chan struct{}
}

func startPoller(ctx context.Context, g *client.Group, n int) *poller {
	ctx, cancel := context.WithCancel(ctx)
	p := &poller{out: make(chan poll, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer close(p.out)
		for got := 0; got < n; {
			recs, err := g.Poll(ctx, 0, groupPollMax, groupPollWait)
			select {
			case p.out <- poll{recs: recs, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
			got += len(recs)
		}
	}()
	return p
}

// stop ends the poller and waits for its goroutine.
func (p *poller) stop() {
	p.cancel()
	<-p.done
}
