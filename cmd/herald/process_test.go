package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldmq/herald/client"
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
func heraldBinary(t *testing.T) string {
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
}

func freePorts(t *testing.T) (udp, tcp string) {
	t.Helper()
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
	return udp, tcp
}

// startNode starts `herald node` on dataDir and waits until /readyz answers.
func startNode(t *testing.T, dataDir string) *nodeProcess {
	t.Helper()
	addr, httpAddr := freePorts(t)
	p := &nodeProcess{dataDir: dataDir, addr: addr, http: httpAddr, done: make(chan struct{})}
	p.cmd = exec.Command(heraldBinary(t), "node", "--data-dir", dataDir, "--listen", addr, "--http", httpAddr, "--log-level", "warn")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
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

func (p *nodeProcess) dial(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, p.addr, client.WithCAFile(filepath.Join(p.dataDir, "tls", "ca.pem")))
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
	sub, err := c.Subscribe(ctx, name, client.FromEarliest())
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
