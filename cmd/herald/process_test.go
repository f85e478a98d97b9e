package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle goroutine ends by itself one
	// interval (1 s) after the last dead letter; see supervisors' TestMain.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// heraldBinary builds the herald binary once per test run.
func heraldBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "herald")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// nodeProcess is a real `herald node` process.
type nodeProcess struct {
	cmd       *exec.Cmd
	dataDir   string
	addr      string
	http      string
	done      chan struct{}
	exitState *os.ProcessState
	// logPath is the file the node's standard output and error go to.
	logPath string
}

func freePorts(t testing.TB) (udp, tcp string) {
	t.Helper()
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[string]bool{}
	}
	for {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		udp, tcp = u.LocalAddr().String(), l.Addr().String()
		u.Close()
		l.Close()
		// A port closed here may come back from the next call while the
		// process it was meant for has not bound it yet (two nodes of a
		// cluster on one port): never hand one out twice.
		if !handedOut.ports["u"+udp] && !handedOut.ports["t"+tcp] {
			handedOut.ports["u"+udp], handedOut.ports["t"+tcp] = true, true
			return udp, tcp
		}
	}
}

// handedOut are the ports freePorts returned, by "u" or "t" and address.
var handedOut struct {
	mu    sync.Mutex
	ports map[string]bool
}

// startNode starts `herald node` on dataDir, with env ("HERALD_KEY=value")
// added to the environment, and waits until /readyz answers.
func startNode(t testing.TB, dataDir string, env ...string) *nodeProcess {
	t.Helper()
	addr, httpAddr := freePorts(t)
	p := &nodeProcess{dataDir: dataDir, addr: addr, http: httpAddr, done: make(chan struct{})}
	p.cmd = exec.Command(heraldBinary(t), "node", "--data-dir", dataDir, "--listen", addr, "--http", httpAddr, "--log-level", "warn")
	p.cmd.Env = append(os.Environ(), env...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.logPath = logFile.Name()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.exitState = p.cmd.ProcessState
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("node log:\n%s", b)
			}
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("node exited during start: %v", p.exitState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("node did not become ready within 60 s")
		}
		time.Sleep(20 * time.Millisecond) // polling a process's start, not asserting time
	}
}

func (p *nodeProcess) dial(t testing.TB, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts = append([]client.Option{client.WithCAFile(filepath.Join(p.dataDir, "tls", "ca.pem"))}, opts...)
	c, err := client.Dial(ctx, p.addr, opts...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readAll subscribes from earliest and reads count records.
func readAll(t *testing.T, c *client.Client, name client.StreamName, count uint64) map[uint64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := c.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(map[uint64]string, count)
	for want := uint64(0); want < count; want++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("reading offset %d of %d: %v", want, count, err)
		}
		if ev.Offset != want {
			t.Fatalf("got offset %d, want %d", ev.Offset, want)
		}
		got[ev.Offset] = string(ev.Payload)
	}
	return got
}

// kill -9 in the middle of acked durable publishing, restart on the same
// data dir: every acknowledged record is there at its offset, and a
// subscriber from earliest reads them all. An ephemeral stream comes back
// empty.
func TestKillNineKeepsAcknowledgedRecords(t *testing.T) {
	dir := t.TempDir()
	node := startNode(t, dir)
	c := node.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	durable := client.StreamName{Tenant: "acme", Namespace: "crash", Stream: "durable"}
	scratch := client.StreamName{Tenant: "acme", Namespace: "crash", Stream: "scratch"}
	if _, err := c.CreateStream(ctx, durable, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateStream(ctx, scratch, client.StreamConfig{Shards: 1, Durable: false}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishBatch(ctx, scratch, [][]byte{[]byte("gone after restart")}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[uint64]string{}
	pubCtx, stopPublishing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	enough := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		futures := make(chan struct {
			f        *client.PublishFuture
			payloads []string
		}, 256)
		go func() {
			defer close(futures)
			for i := 0; pubCtx.Err() == nil; i++ {
				payloads := make([]string, 8)
				raw := make([][]byte, 8)
				for j := range payloads {
					payloads[j] = fmt.Sprintf("batch%d-rec%d", i, j)
					raw[j] = []byte(payloads[j])
				}
				f, err := c.PublishAsync(pubCtx, durable, raw)
				if err != nil {
					return
				}
				futures <- struct {
					f        *client.PublishFuture
					payloads []string
				}{f, payloads}
			}
		}()
		signalled := false
		for p := range futures {
			ack, err := p.f.Wait(pubCtx)
			if err != nil {
				continue // in flight when the node died: outcome unknown, not counted
			}
			mu.Lock()
			for j, payload := range p.payloads {
				acked[ack.Offset+uint64(j)] = payload
			}
			n := len(acked)
			mu.Unlock()
			if n >= 4000 && !signalled {
				signalled = true
				close(enough)
			}
		}
	}()
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("publishing too slow")
	}
	if err := node.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-node.done
	stopPublishing()
	wg.Wait()
	_ = c.Close()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d records acknowledged before kill -9", len(acked))

	restarted := startNode(t, dir)
	c2 := restarted.dial(t)
	info, err := c2.DescribeStream(ctx, durable)
	if err != nil {
		t.Fatal(err)
	}
	var maxAcked uint64
	for off := range acked {
		maxAcked = max(maxAcked, off)
	}
	if info.Tails[0] <= maxAcked {
		t.Fatalf("tail after restart %d, but offset %d was acknowledged", info.Tails[0], maxAcked)
	}
	got := readAll(t, c2, durable, info.Tails[0])
	for off, payload := range acked {
		if got[off] != payload {
			t.Fatalf("offset %d: acknowledged %q, found %q", off, payload, got[off])
		}
	}
	sinfo, err := c2.DescribeStream(ctx, scratch)
	if err != nil {
		t.Fatalf("the ephemeral stream's definition should survive: %v", err)
	}
	if sinfo.Tails[0] != 0 {
		t.Fatalf("ephemeral stream came back with tail %d, want empty", sinfo.Tails[0])
	}
}

// SIGTERM drains and exits 0; what was acknowledged is there after restart.
func TestSigtermShutsDownCleanly(t *testing.T) {
	dir := t.TempDir()
	node := startNode(t, dir)
	c := node.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := client.StreamName{Tenant: "default", Namespace: "default", Stream: "orders"}
	for i := range 20 {
		if _, err := c.Publish(ctx, name, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	if err := node.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-node.done:
	case <-time.After(30 * time.Second):
		t.Fatal("node did not exit after SIGTERM")
	}
	if code := node.exitState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	restarted := startNode(t, dir)
	got := readAll(t, restarted.dial(t), name, 20)
	for i := range 20 {
		if got[uint64(i)] != fmt.Sprint(i) {
			t.Fatalf("offset %d holds %q", i, got[uint64(i)])
		}
	}
}

// lineCollector is the stdout of a child process: exec copies the pipe
// into it. It signals each write so that a test can wait for lines, and can
// stop taking output (hold) so that the child fills its pipe and blocks
// writing.
type lineCollector struct {
	mu  sync.Mutex
	buf []byte
	// wrote receives a value after each write (at most one pending).
	wrote chan struct{}
	// holdAfter, when positive, makes Write block once the collector has
	// that many lines, until release is closed.
	holdAfter int
	release   chan struct{}
}

func newLineCollector() *lineCollector {
	return &lineCollector{wrote: make(chan struct{}, 1), release: make(chan struct{})}
}

func (w *lineCollector) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, p...)
	hold := w.holdAfter > 0 && bytes.Count(w.buf, []byte{'\n'}) >= w.holdAfter
	w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	if hold {
		<-w.release
	}
	return len(p), nil
}

// lines returns the complete lines written so far (a process killed in the
// middle of a write may leave a partial last line, which is left out).
func (w *lineCollector) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := bytes.LastIndexByte(w.buf, '\n')
	if end < 0 {
		return nil
	}
	return strings.Split(string(w.buf[:end]), "\n")
}

// subProcess is a `herald sub` child process.
type subProcess struct {
	cmd    *exec.Cmd
	out    *lineCollector
	stderr bytes.Buffer // read only once done is closed
	done   chan struct{}
}

// startSubProcess starts `herald sub ARGS...` against node. If holdAfter
// is positive, the test stops taking the process's output once it has that
// many lines, until the process is killed.
func startSubProcess(t *testing.T, node *nodeProcess, holdAfter int, args ...string) *subProcess {
	t.Helper()
	args = append(append([]string{"sub"}, args...), "--server", node.addr, "--ca", filepath.Join(node.dataDir, "tls", "ca.pem"))
	p := &subProcess{out: newLineCollector(), done: make(chan struct{})}
	p.out.holdAfter = holdAfter
	p.cmd = exec.Command(heraldBinary(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		p.releaseOutput()
		<-p.done
		if t.Failed() {
			t.Logf("%q: %v, stderr %q", args[:len(args)-4], p.cmd.ProcessState, p.stderr.String())
		}
	})
	return p
}

// releaseOutput lets the collector take the rest of the process's output.
func (p *subProcess) releaseOutput() {
	select {
	case <-p.out.release:
	default:
		close(p.out.release)
	}
}

// waitLines waits until the process printed at least n lines.
func (p *subProcess) waitLines(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	for len(p.out.lines()) < n {
		select {
		case <-p.out.wrote:
		case <-p.done:
			t.Fatalf("herald sub exited (%v) after %d lines: %q", p.cmd.ProcessState, len(p.out.lines()), p.stderr.String())
		case <-ctx.Done():
			t.Fatalf("herald sub printed %d lines, waiting for %d", len(p.out.lines()), n)
		}
	}
}

// waitGroup polls the group's description until ok accepts it.
func waitGroup(ctx context.Context, t *testing.T, c *client.Client, name client.StreamName, group, what string, ok func(client.GroupInfo) bool) client.GroupInfo {
	t.Helper()
	var info client.GroupInfo
	var err error
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err = c.Group(name, group).Describe(dctx)
		cancel()
		if err == nil && ok(info) {
			return info
		}
		if err != nil && !errors.Is(err, client.ErrGroupNotFound) {
			t.Fatalf("describe group: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: group is %+v (%v)", what, info, err)
		case <-time.After(50 * time.Millisecond): // polling the node, not asserting time
		}
	}
}

// Two `herald sub --group` processes share a 4-shard stream; one is killed
// with SIGKILL mid-stream. The node notices by its idle timeout, hands the
// dead member's shards to the survivor, and in the end the group has
// committed every record, each record was printed by some process, and the
// only records printed twice are ones the killed process printed (and died
// before acking). The survivor leaves on SIGTERM with exit status 0.
func TestSubGroupMemberKilled(t *testing.T) {
	// The idle timeout is how soon the node notices the killed member: the
	// shortest the node accepts (the clients' keep-alives go every 2.5 s).
	node := startNode(t, t.TempDir(), "HERALD_IDLE_TIMEOUT=5s")
	c := node.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "work"}
	const shards, total, batch = 4, 2000, 50
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: shards, Durable: true}); err != nil {
		t.Fatal(err)
	}
	// A key for each shard, so that every shard gets its share.
	keys := make([][]byte, shards)
	for i, found := 0, 0; found < shards; i++ {
		k := []byte(fmt.Sprint("k", i))
		if s := wire.ShardFor(k, shards, wire.RoutingHash); keys[s] == nil {
			keys[s] = k
			found++
		}
	}
	type rec struct {
		shard  uint32
		offset uint64
	}
	padding := strings.Repeat("x", 1024)
	published := make(map[rec]string, total)
	publish := func(from, to int) {
		t.Helper()
		for b := from / batch; b < to/batch; b++ {
			payloads := make([][]byte, batch)
			for i := range payloads {
				payloads[i] = []byte(fmt.Sprintf("rec-%04d-%s", b*batch+i, padding))
			}
			ack, err := c.PublishBatch(ctx, name, payloads, client.WithKey(keys[b%shards]))
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range payloads {
				published[rec{ack.Shard, ack.Offset + uint64(i)}] = string(p)
			}
		}
	}

	args := []string{name.String(), "--group", "g", "--window", "50"}
	survivor := startSubProcess(t, node, 0, append(args, "--member", "m1")...)
	// The test stops reading the doomed process after 20 lines: its pipe
	// fills (a record is a line of over 1 KiB) and it blocks printing a
	// delivery, so that it most likely dies having printed records it has
	// not acked.
	doomed := startSubProcess(t, node, 20, append(args, "--member", "m2")...)
	// Both join before any record exists, so that neither loses a shard,
	// and a delivery it holds, to the other's join.
	waitGroup(ctx, t, c, name, "g", "two members with two shards each", func(info client.GroupInfo) bool {
		return len(info.Members) == 2 && len(info.Members[0].Shards) == 2 && len(info.Members[1].Shards) == 2
	})
	publish(0, total/2)
	doomed.waitLines(ctx, t, 20)
	if err := doomed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// What it wrote to its pipe before it died counts as printed.
	doomed.releaseOutput()
	publish(total/2, total)

	waitGroup(ctx, t, c, name, "g", "every record committed, by the survivor alone", func(info client.GroupInfo) bool {
		sum := uint64(0)
		for _, s := range info.Shards {
			if s.Committed != s.Tail {
				return false
			}
			sum += s.Committed
		}
		return sum == total && len(info.Members) == 1 && info.Members[0].ID == "m1"
	})
	if err := survivor.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-survivor.done:
	case <-ctx.Done():
		t.Fatal("the survivor did not exit after SIGTERM")
	}
	if code := survivor.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the survivor exited with %d after SIGTERM: %q", code, survivor.stderr.String())
	}
	<-doomed.done

	// printed parses a process's lines, each record at most once.
	printed := func(who string, p *subProcess) map[rec]bool {
		t.Helper()
		got := map[rec]bool{}
		for _, line := range p.out.lines() {
			var r rec
			var payload string
			if _, err := fmt.Sscanf(line, "%d %d %s", &r.shard, &r.offset, &payload); err != nil {
				t.Fatalf("%s printed %q: %v", who, line, err)
			}
			if want, ok := published[r]; !ok || payload != want {
				t.Fatalf("%s printed %q; %d/%d holds %q", who, line, r.shard, r.offset, want)
			}
			if got[r] {
				t.Fatalf("%s printed %d/%d twice", who, r.shard, r.offset)
			}
			got[r] = true
		}
		return got
	}
	bySurvivor, byDoomed := printed("the survivor", survivor), printed("the killed member", doomed)
	twice := 0
	for r := range published {
		switch {
		case bySurvivor[r] && byDoomed[r]:
			twice++ // printed by the killed member, which died before acking it
		case !bySurvivor[r] && !byDoomed[r]:
			t.Errorf("record %d/%d was printed by neither process", r.shard, r.offset)
		}
	}
	t.Logf("%d records: %d printed by the survivor, %d by the killed member, %d of them again by the survivor",
		total, len(bySurvivor), len(byDoomed), twice)
}
