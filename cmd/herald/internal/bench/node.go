package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/supervisors"
)

// node is the node a scenario runs against, on a temporary data dir: a
// child `herald node` process (processNode, the default), or one in this
// process (inProcessNode, --in-process). A node is used by one scenario's
// goroutine; dial and metric may be called from any.
type node interface {
	// dial connects a new client to the node.
	dial(ctx context.Context, opts ...client.Option) (*client.Client, error)
	// metric returns the node's metric family name with its samples summed
	// over their labels; 0 if the node has not recorded it yet.
	metric(ctx context.Context, name string) (float64, error)
	// cpu returns the CPU time (user and system) the node's process has
	// used so far; ok is false when the node shares this process, whose
	// CPU cannot be told apart from the clients'.
	cpu() (d time.Duration, ok bool, err error)
	// close stops the node and removes its data dir.
	close()
}

// startNode starts the node a scenario runs against: in this process with
// inProcess, else as a child `herald node` of env.NodeExecutable.
func startNode(ctx context.Context, env *Env, inProcess bool) (node, error) {
	if inProcess {
		return startInProcessNode(nil)
	}
	return startNodeProcess(ctx, env.NodeExecutable)
}

// inProcessNode is a node started in this process.
type inProcessNode struct {
	// node is the running node.
	node *supervisors.Node
	// dir is the temporary data dir, removed by close.
	dir string
}

// startInProcessNode starts a node in this process with the default
// configuration, changed by tweak when it is not nil, on a fresh temporary
// data dir, listening on loopback ports chosen by the kernel.
func startInProcessNode(tweak func(*supervisors.Config)) (*inProcessNode, error) {
	dir, err := os.MkdirTemp("", "herald-bench-")
	if err != nil {
		return nil, err
	}
	cfg := supervisors.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = dir, "127.0.0.1:0", "127.0.0.1:0"
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := supervisors.Start(cfg, supervisors.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &inProcessNode{node: n, dir: dir}, nil
}

func (n *inProcessNode) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	return client.Dial(ctx, n.node.Addr(), append([]client.Option{client.WithCAFile(n.node.CAFile())}, opts...)...)
}

func (n *inProcessNode) metric(_ context.Context, name string) (float64, error) {
	return n.node.Metric(name), nil
}

func (n *inProcessNode) cpu() (time.Duration, bool, error) { return 0, false, nil }

func (n *inProcessNode) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.node.Shutdown(ctx)
	_ = os.RemoveAll(n.dir)
}

// processNode is `herald node` run as a child process of the bench on a
// temporary data dir, so that what the node costs (its CPU and RSS) is
// measured apart from the clients driving it.
type processNode struct {
	cmd *exec.Cmd
	// dir is the temporary data dir, removed by close.
	dir string
	// addr is the node's QUIC address, httpAddr its HTTP address.
	addr, httpAddr string
	// log keeps the node's output, shown when it fails to start.
	log bytes.Buffer
	// done is closed once the process has exited.
	done chan struct{}
}

// benchNodeStartTimeout bounds the wait for the child's /readyz.
const benchNodeStartTimeout = time.Minute

// startNodeProcess starts executable (nil: this one) as `herald node` on
// loopback ports that were free a moment ago and waits until it is ready.
func startNodeProcess(ctx context.Context, executable func() (string, error)) (*processNode, error) {
	if executable == nil {
		executable = os.Executable
	}
	exe, err := executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "herald-bench-node-")
	if err != nil {
		return nil, err
	}
	addr, httpAddr, err := freeLoopbackPorts()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p := &processNode{dir: dir, addr: addr, httpAddr: httpAddr, done: make(chan struct{})}
	p.cmd = exec.Command(exe, "node", "--data-dir", dir, "--listen", addr, "--http", httpAddr, "--log-level", "warn")
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	// The node dies with the bench, even when a signal or a kill reaches
	// only the bench (Linux; elsewhere the bench's own clean-up stops it).
	p.cmd.SysProcAttr = childSysProcAttr()
	if err := p.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(benchNodeStartTimeout)
	// Each probe is bounded: a node that accepts and never answers must not
	// hold the loop past its deadline.
	probe := &http.Client{Timeout: time.Second}
	for {
		resp, err := probe.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			p.close()
			return nil, fmt.Errorf("node process exited before it was ready: %s", strings.TrimSpace(p.log.String()))
		case <-ctx.Done():
			p.close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.close()
			return nil, fmt.Errorf("node process not ready within %s", benchNodeStartTimeout)
		}
	}
}

// freeLoopbackPorts returns a UDP and a TCP loopback address that were
// free when asked.
func freeLoopbackPorts() (udp, tcp string, err error) {
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", "", err
	}
	defer u.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", err
	}
	defer l.Close()
	return u.LocalAddr().String(), l.Addr().String(), nil
}

// dial connects a new client to the node.
func (p *processNode) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	ca := filepath.Join(transport.DevCertificatesDir(p.dir), transport.CAFileName)
	return client.Dial(ctx, p.addr, append([]client.Option{client.WithCAFile(ca)}, opts...)...)
}

// metrics scrapes the node's /metrics and returns each family's samples
// summed (labels ignored).
func (p *processNode) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseMetricsText(resp.Body)
}

// parseMetricsText sums the samples of each metric in the Prometheus text
// format by name.
func parseMetricsText(r interface{ Read([]byte) (int, error) }) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if j := strings.LastIndexByte(rest, '}'); j >= 0 {
			rest = rest[j+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("/metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// metric returns one family of the node's /metrics, summed; 0 when the
// node has not recorded it yet.
func (p *processNode) metric(ctx context.Context, name string) (float64, error) {
	m, err := p.metrics(ctx)
	if err != nil {
		return 0, err
	}
	return m[name], nil
}

// cpu reads the node process's user and system time from /proc.
func (p *processNode) cpu() (time.Duration, bool, error) {
	d, err := processCPU(p.cmd.Process.Pid)
	return d, err == nil, err
}

// close stops the node (SIGTERM, then SIGKILL after 10 s) and removes its
// data dir.
func (p *processNode) close() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = os.RemoveAll(p.dir)
}

// errNoMetric is returned when /metrics lacks a family the bench reads.
var errNoMetric = errors.New("metric missing from /metrics")
