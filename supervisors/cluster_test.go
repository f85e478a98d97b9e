package supervisors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/transport"
)

// freeUDP returns a loopback UDP address nothing listens on now.
func freeUDP(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// waitPeers waits until n sees exactly the peers in up as up.
func waitPeers(t *testing.T, n *Node, up map[uint64]bool) ClusterStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, ok, err := n.ClusterStatus(context.Background())
		if !ok || err != nil {
			t.Fatalf("cluster status: %v, %v", ok, err)
		}
		match := len(st.Peers) == 2
		for _, p := range st.Peers {
			match = match && p.Up == up[p.NodeID]
		}
		if match {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d sees %+v, want up %v", st.NodeID, st.Peers, up)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Three nodes started with each other as peers connect, one link per pair,
// under a cluster CA: each sees the other two up. One shut down is seen
// down by the others; started again on its data dir and address, it is
// seen up again. A node without peers is a single node: no cluster
// status, and /cluster answers 404.
func TestClusterPeersConnect(t *testing.T) {
	certs, err := transport.NewClusterCertificates(t.TempDir(), []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[uint64]string{1: freeUDP(t), 2: freeUDP(t), 3: freeUDP(t)}
	peers := fmt.Sprintf("1=%s,2=%s,3=%s", addrs[1], addrs[2], addrs[3])
	dirs := map[uint64]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	start := func(id uint64) *Node {
		return testNode(t, dirs[id], func(c *Config, _ *Options) {
			c.NodeID, c.Peers, c.ClusterListen = id, peers, addrs[id]
			c.ClusterCA, c.ClusterCert, c.ClusterKey = certs.CAFile, certs.Nodes[id][0], certs.Nodes[id][1]
		})
	}
	n1, n2, n3 := start(1), start(2), start(3)
	st := waitPeers(t, n1, map[uint64]bool{2: true, 3: true})
	if !st.Authenticated || st.NodeID != 1 || st.ClusterListen != addrs[1] {
		t.Fatalf("node 1's status: %+v", st)
	}
	waitPeers(t, n2, map[uint64]bool{1: true, 3: true})
	waitPeers(t, n3, map[uint64]bool{1: true, 2: true})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n3.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, n1, map[uint64]bool{2: true})
	st = waitPeers(t, n2, map[uint64]bool{1: true})
	for _, p := range st.Peers {
		if p.NodeID == 3 && p.LastError == "" {
			t.Errorf("node 2's link to the stopped node 3 says no error: %+v", p)
		}
	}
	n3 = start(3)
	waitPeers(t, n1, map[uint64]bool{2: true, 3: true})
	waitPeers(t, n3, map[uint64]bool{1: true, 2: true})

	resp, err := http.Get("http://" + n1.HTTPAddr() + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("/cluster: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}

	single := testNode(t, t.TempDir())
	if _, ok, _ := single.ClusterStatus(context.Background()); ok {
		t.Fatal("a single node has a cluster status")
	}
	resp, err = http.Get("http://" + single.HTTPAddr() + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/cluster of a single node: %s", resp.Status)
	}
}

// Cluster settings are checked at start: peers without this node's id,
// without a cluster listener, a half-given cluster CA, cluster settings
// without peers, and a malformed list.
func TestClusterConfigRefusals(t *testing.T) {
	base := func() Config {
		c := DefaultConfig()
		c.NodeID, c.Peers, c.ClusterListen = 1, "1=127.0.0.1:7402,2=127.0.0.1:7412", "127.0.0.1:7402"
		return c
	}
	for name, mutate := range map[string]func(*Config){
		"node id not in peers": func(c *Config) { c.NodeID = 3 },
		"no node id":           func(c *Config) { c.NodeID = 0 },
		"no cluster listen":    func(c *Config) { c.ClusterListen = "" },
		"half a cluster CA":    func(c *Config) { c.ClusterCA = "ca.pem" },
		"listen without peers": func(c *Config) { c.Peers = "" },
		"peer without address": func(c *Config) { c.Peers = "1=127.0.0.1:7402,2" },
		"peer id 0":            func(c *Config) { c.Peers = "0=127.0.0.1:7402,1=127.0.0.1:7412" },
		"peer twice":           func(c *Config) { c.Peers = "1=127.0.0.1:7402,1=127.0.0.1:7412" },
		"bad address":          func(c *Config) { c.Peers = "1=127.0.0.1,2=x:1" },
		"one address twice":    func(c *Config) { c.Peers = "1=127.0.0.1:7402,2=127.0.0.1:7402" },
	} {
		c := base()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if c := base(); c.Validate() != nil {
		t.Fatalf("the base config: %v", c.Validate())
	}
}

// A data directory that ran as cluster node 1 refuses to start as node 2
// (its raft votes and logs are node 1's), and starts again as node 1.
func TestClusterNodeIDBelongsToItsData(t *testing.T) {
	dir := t.TempDir()
	a1, a2 := freeUDP(t), freeUDP(t)
	peers := fmt.Sprintf("1=%s,2=%s", a1, a2)
	as := func(id uint64, addr string) func(*Config, *Options) {
		return func(c *Config, _ *Options) { c.NodeID, c.Peers, c.ClusterListen = id, peers, addr }
	}
	n := testNode(t, dir, as(1, a1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = dir, "127.0.0.1:0", ""
	as(2, a2)(&cfg, nil)
	if n2, err := Start(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err == nil {
		_ = n2.Shutdown(ctx)
		t.Fatal("node 1's data started as node 2")
	} else if !strings.Contains(err.Error(), "belongs to cluster node 1") {
		t.Fatalf("starting node 1's data as node 2: %v", err)
	}
	testNode(t, dir, as(1, a1))
}
