package bench

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/heraldmq/herald/client"
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
