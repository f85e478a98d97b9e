package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/client"
)

// The scaffold every scenario shares: its flags, a session (the node, the
// progress line, the output), a meter for each measured cell, a publish
// pipeline, and the wait for subscribers to catch up. A scenario is then
// its own flags, its cells and its tables.

// scenarioFlags are a scenario's flag set with the flags every scenario
// has.
type scenarioFlags struct {
	// fs is the scenario's flag set, named "herald bench SCENARIO".
	fs *flag.FlagSet
	// asJSON is --json.
	asJSON *bool
	// inProcess is --in-process.
	inProcess *bool
}

// newScenarioFlags returns the flag set of scenario with --json and
// --in-process.
func newScenarioFlags(scenario string) *scenarioFlags {
	fs := flag.NewFlagSet("herald bench "+scenario, flag.ContinueOnError)
	return &scenarioFlags{fs: fs,
		asJSON:    fs.Bool("json", false, "print the result as JSON"),
		inProcess: fs.Bool("in-process", false, "run the node in this process (its CPU and memory are then the clients' too); by default it is a child herald node process"),
	}
}

// nodeInProcessByDefault makes --in-process default to true, with usage
// saying why, for a scenario whose figures are defined with the node in
// this process.
func (f *scenarioFlags) nodeInProcessByDefault(usage string) {
	fl := f.fs.Lookup("in-process")
	fl.DefValue, fl.Usage, *f.inProcess = "true", usage, true
}

// session is one run of a scenario: its node, its progress line and its
// output. It belongs to the scenario's goroutine.
type session struct {
	// env is the run's environment.
	env *Env
	// scenario names the scenario in errors.
	scenario string
	// node is the node the scenario runs against.
	node node
	// progress is the progress line on env.Stderr.
	progress *benchProgress
}

// open starts the node of a scenario's run (in this process with
// inProcess) and the progress line.
func (env *Env) open(ctx context.Context, scenario string, inProcess bool) (*session, error) {
	n, err := startNode(ctx, env, inProcess)
	if err != nil {
		return nil, err
	}
	return &session{env: env, scenario: scenario, node: n, progress: newBenchProgress(env.Stderr, env.Terminal)}, nil
}

// nodeProcess reports that the node runs in its own process.
func (s *session) nodeProcess() bool {
	_, ok := s.node.(*processNode)
	return ok
}

// close ends the progress line and stops the node.
func (s *session) close() {
	s.progress.close()
	s.node.close()
}

// fail prints a scenario's error and returns 1.
func (env *Env) fail(scenario string, err error) int {
	fmt.Fprintf(env.Stderr, "herald bench %s: %v\n", scenario, err)
	return 1
}

// fail ends the progress line, prints err and returns 1.
func (s *session) fail(err error) int {
	s.progress.close()
	return s.env.fail(s.scenario, err)
}

// report ends the progress line and prints res as JSON, or as the tables
// text writes.
func (s *session) report(asJSON bool, res any, text func(w io.Writer)) int {
	s.progress.close()
	return writeReport(s.env.Stdout, asJSON, res, text)
}

// writeReport prints res indented on w as JSON, or runs text on w.
func writeReport(w io.Writer, asJSON bool, res any, text func(w io.Writer)) int {
	if !asJSON {
		text(w)
		return 0
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return 1
	}
	return 0
}

// nodeNote says where the node ran, for the summaries' first line.
func (s *session) nodeNote() string {
	if s.nodeProcess() {
		return "node in its own process"
	}
	return "node in this process (client CPU includes it)"
}

// meter measures one cell's CPU, node and clients apart, from start to
// stop.
type meter struct {
	// node is the node measured.
	node node
	// start is the CPU at the cell's start.
	start cpuSample
}

// startMeter reads the CPU at a cell's start.
func (s *session) startMeter() (*meter, error) {
	c, err := sampleCPU(s.node)
	if err != nil {
		return nil, err
	}
	return &meter{node: s.node, start: c}, nil
}

// stop reads the CPU at the cell's end and divides it over records.
func (m *meter) stop(records int64) (CPU, error) {
	c, err := sampleCPU(m.node)
	if err != nil {
		return CPU{}, err
	}
	return cpuBetween(m.start, c, records), nil
}

// metric reads one of the node's metrics; a failed read is an error of
// the scenario.
func (s *session) metric(ctx context.Context, name string) (float64, error) {
	v, err := s.metrics(ctx, name)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// metrics reads the node's metrics names, in their order.
func (s *session) metrics(ctx context.Context, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	for i, name := range names {
		v, err := s.node.metric(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("node metric %s: %w", name, err)
		}
		out[i] = v
	}
	return out, nil
}

// freshStream creates stream on c; the returned func deletes it.
func freshStream(ctx context.Context, c *client.Client, stream client.StreamName, cfg client.StreamConfig) (func(), error) {
	if _, err := c.CreateStream(ctx, stream, cfg); err != nil {
		return nil, err
	}
	return func() { _ = c.DeleteStream(context.Background(), stream) }, nil
}

// randomPayloads returns n payloads of size random bytes.
func randomPayloads(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
		_, _ = rand.Read(out[i])
	}
	return out
}

// pipeline publishes to one stream with PublishAsync, at most inflight
// publishes unacked, and waits for their acks in issue order on its own
// goroutine (acks on one shard arrive in order, so each is seen when it
// lands). The scenario's goroutine calls publish; finish stops the waiter
// and waits for it, and must be called on every path (it is idempotent).
type pipeline struct {
	// c and stream are where records go.
	c      *client.Client
	stream client.StreamName
	// slots holds a token per unacked publish, taken before PublishAsync
	// and given back by the waiter.
	slots chan struct{}
	// queue hands each publish to the waiter, in issue order.
	queue chan pipelined
	// closeQueue closes queue once.
	closeQueue sync.Once
	// done is closed when the waiter has ended; err, its first error, is
	// read only after it.
	done chan struct{}
	err  error
	// sent counts records published; it belongs to the scenario's
	// goroutine.
	sent int64
	// acked counts records acked, for the progress line.
	acked atomic.Int64
}

// pipelined is one publish in flight.
type pipelined struct {
	// f is its future; sent is when PublishAsync was called.
	f    *client.PublishFuture
	sent time.Time
	// first is the number of records published on the pipeline before it;
	// n is its records.
	first int64
	n     int
}

// startPipeline starts the waiter of a pipeline to stream on c. onAck,
// when not nil, sees every successful ack on the waiter's goroutine, in
// issue order; an error it returns is the pipeline's. After the first
// error, later acks are only waited for.
func startPipeline(ctx context.Context, c *client.Client, stream client.StreamName, inflight int, onAck func(p pipelined, ack client.PublishAck) error) *pipeline {
	p := &pipeline{c: c, stream: stream, slots: make(chan struct{}, inflight),
		queue: make(chan pipelined, inflight), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for q := range p.queue {
			ack, err := q.f.Wait(ctx)
			<-p.slots
			if p.err != nil {
				continue
			}
			if err == nil && onAck != nil {
				err = onAck(q, ack)
			}
			if err != nil {
				p.err = err
				continue
			}
			p.acked.Add(int64(q.n))
		}
	}()
	return p
}

// publish waits for a free slot and publishes payloads as one batch, acked
// per batch. An error is PublishAsync's; then call finish.
func (p *pipeline) publish(ctx context.Context, payloads [][]byte) error {
	p.slots <- struct{}{}
	t0 := time.Now()
	f, err := p.c.PublishAsync(ctx, p.stream, payloads, client.WithAck(client.AckPerBatch))
	if err != nil {
		<-p.slots
		return err
	}
	p.queue <- pipelined{f: f, sent: t0, first: p.sent, n: len(payloads)}
	p.sent += int64(len(payloads))
	return nil
}

// finish waits for every ack and returns the pipeline's first error.
func (p *pipeline) finish() error {
	p.closeQueue.Do(func() { close(p.queue) })
	<-p.done
	return p.err
}

// errLost is returned when a scenario counts fewer (or more) records at
// its end than it published.
var errLost = errors.New("records lost or duplicated")

// drainQuiet is how long awaitCount waits without any growth before it
// gives up.
const drainQuiet = time.Second

// lateWait bounds how long a scenario waits, after awaitCount gave up, for
// records that QUIC may still deliver (a stream that lost packets waits for
// its retransmission): what arrives then is counted as late, what has not
// arrived by its end as missing.
const lateWait = 10 * time.Second

// awaitCount polls count until it reaches want, stops growing for
// drainQuiet, or ctx ends, and returns the last count and when it was
// first seen (to within the 1 ms poll).
func awaitCount(ctx context.Context, want int64, count func() int64) (int64, time.Time) {
	n := count()
	lastGrowth := time.Now()
	for n < want && time.Since(lastGrowth) < drainQuiet && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
		if m := count(); m > n {
			n, lastGrowth = m, time.Now()
		}
	}
	return n, lastGrowth
}

// awaitLate polls count until it reaches want, or bound passes, or ctx
// ends, and returns the last count and how long after the call it was
// first seen (0 when nothing came).
func awaitLate(ctx context.Context, want int64, count func() int64, bound time.Duration) (int64, time.Duration) {
	start := time.Now()
	n := count()
	var after time.Duration
	for n < want && time.Since(start) < bound && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
		if m := count(); m > n {
			n, after = m, time.Since(start)
		}
	}
	return n, after
}
