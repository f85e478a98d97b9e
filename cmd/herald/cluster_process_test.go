package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/supervisors"
)

// clusterNodeProcess is a `herald node` process of a dev cluster, started
// with exactly the cluster flags docs/operations.md shows.
type clusterNodeProcess struct {
	id                               uint64
	dir, listen, http, clusterListen string
	peers                            string
	// join starts it with --join (a node added to a running cluster).
	join bool
	// env is added to the node's environment (configuration keys).
	env     []string
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

func (p *clusterNodeProcess) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command(heraldBinary(t), "node", "--node-id", fmt.Sprint(p.id), "--listen", p.listen, "--http", p.http,
		"--cluster-listen", p.clusterListen, "--peers", p.peers, "--data-dir", p.dir)
	if p.join {
		p.cmd.Args = append(p.cmd.Args, "--join")
	}
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), fmt.Sprintf("node-%d.log", p.id)))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr, p.logPath = logFile, logFile, logFile.Name()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	p.done = done
	cmd := p.cmd
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("node %d log:\n%s", p.id, b)
			}
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get("http://" + p.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			t.Fatalf("node %d exited during start", p.id)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d not ready within 60 s", p.id)
		}
		time.Sleep(20 * time.Millisecond) // polling a process's start
	}
}

// status runs `herald cluster status --http ... -o json` against p.
func (p *clusterNodeProcess) status(t *testing.T) supervisors.ClusterStatus {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(heraldBinary(t), "cluster", "status", "--http", p.http, "-o", "json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("herald cluster status: %v: %s", err, errb.String())
	}
	var st supervisors.ClusterStatus
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("herald cluster status -o json: %v: %s", err, out.String())
	}
	return st
}

// waitUp polls p's status (a process's state, which nothing announces)
// until exactly the peers in up are up.
func (p *clusterNodeProcess) waitUp(t *testing.T, up map[uint64]bool) supervisors.ClusterStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := p.status(t)
		ok := len(st.Peers) == 2
		for _, peer := range st.Peers {
			ok = ok && peer.Up == up[peer.NodeID]
		}
		if ok {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d sees %+v, want up %v", p.id, st.Peers, up)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Three real node processes started with the dev cluster flags (no
// cluster CA) connect: `herald cluster status` on each shows the other
// two up, and each node logged that peer traffic is not authenticated.
// A node killed with SIGKILL is seen down by the others (its connections
// time out); restarted on its data dir and addresses, it is seen up again.
func TestDevClusterProcessesConnect(t *testing.T) {
	nodes := make([]*clusterNodeProcess, 3)
	var peers []string
	for i := range nodes {
		listen, httpAddr := freePorts(t)
		clusterListen, _ := freePorts(t)
		nodes[i] = &clusterNodeProcess{id: uint64(i + 1), dir: t.TempDir(), listen: listen, http: httpAddr, clusterListen: clusterListen}
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, clusterListen))
	}
	for _, n := range nodes {
		n.peers = strings.Join(peers, ",")
		n.start(t)
	}
	all := func(except uint64) map[uint64]bool {
		m := map[uint64]bool{}
		for _, n := range nodes {
			if n.id != except {
				m[n.id] = true
			}
		}
		return m
	}
	for _, n := range nodes {
		st := n.waitUp(t, all(n.id))
		if st.NodeID != n.id || st.Authenticated {
			t.Fatalf("node %d's status: %+v", n.id, st)
		}
		log, err := os.ReadFile(n.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "NOT authenticated") {
			t.Errorf("node %d did not warn that peer traffic is not authenticated:\n%s", n.id, log)
		}
	}
	// kill -9 node 2.
	if err := nodes[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-nodes[1].done
	nodes[0].waitUp(t, map[uint64]bool{3: true})
	nodes[2].waitUp(t, map[uint64]bool{1: true})
	nodes[1].start(t)
	for _, n := range nodes {
		n.waitUp(t, all(n.id))
	}
}

// `herald cluster status` against a node without peers says it is not a
// cluster; an error answer is shown with its status; a node that does
// not answer is an error naming the address.
func TestClusterStatusAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not a cluster", http.StatusNotFound)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, _, stderr := runCLI(t, "cluster", "status", "--http", addr)
	if code != 1 || !strings.Contains(stderr, "not part of a cluster") {
		t.Fatalf("a single node: %d %q", code, stderr)
	}
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "peers actor gone", http.StatusServiceUnavailable)
	}))
	defer broken.Close()
	code, _, stderr = runCLI(t, "cluster", "status", "--http", strings.TrimPrefix(broken.URL, "http://"))
	if code != 1 || !strings.Contains(stderr, "503") || !strings.Contains(stderr, "peers actor gone") {
		t.Fatalf("an error answer: %d %q", code, stderr)
	}
	_, tcp := freePorts(t)
	code, _, stderr = runCLI(t, "cluster", "status", "--http", tcp, "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, tcp) {
		t.Fatalf("nobody at the address: %d %q", code, stderr)
	}
}

// `herald cluster drain`, `undrain`, `add` and `remove` print a node's
// refusal with its code and send what they were asked; a node without
// peers is not a cluster; a token goes as a bearer token; --no-wait
// returns once the change is committed.
func TestClusterDrainAnswers(t *testing.T) {
	var gotAuth, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			gotAuth, gotBody = r.Header.Get("Authorization"), string(b)
		}
		switch r.URL.Path {
		case "/cluster/drain":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"code":"invalid_request","message":"node 9 is not a node of this cluster"}`)
		case "/cluster/undrain":
			_, _ = io.WriteString(w, `{"drained":[3]}`)
		case "/cluster/add":
			_, _ = io.WriteString(w, `{"members":[1,2,3,4],"leaving":[],"drained":[]}`)
		case "/cluster/remove":
			_, _ = io.WriteString(w, `{"members":[1,2,3,4],"leaving":[3],"drained":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, _, stderr := runCLI(t, "cluster", "drain", "9", "--http", addr, "--token", "tok-1")
	if code != 1 || !strings.Contains(stderr, "herald cluster drain: invalid_request: node 9 is not a node of this cluster") {
		t.Fatalf("a refusal: %d %q", code, stderr)
	}
	if gotAuth != "Bearer tok-1" || gotBody != `{"node":9}` {
		t.Fatalf("sent %q with %q", gotBody, gotAuth)
	}
	code, out, stderr := runCLI(t, "cluster", "undrain", "2", "--http", addr)
	if code != 0 || out != "node 2 undrained (drained nodes: 3)\n" || gotAuth != "" {
		t.Fatalf("undrain: %d %q %q (auth %q)", code, out, stderr, gotAuth)
	}
	code, out, stderr = runCLI(t, "cluster", "add", "4=10.0.0.4:7402", "--http", addr)
	if code != 0 || !strings.HasPrefix(out, "node 4 added at 10.0.0.4:7402 (members: 1, 2, 3, 4)\n") || gotBody != `{"node":4,"addr":"10.0.0.4:7402"}` {
		t.Fatalf("add: %d %q %q (sent %s)", code, out, stderr, gotBody)
	}
	code, out, stderr = runCLI(t, "cluster", "remove", "3", "--no-wait", "--http", addr)
	if code != 0 || out != "node 3 is leaving: its replicas move off it, then it leaves (members: 1, 2, 3, 4)\n" || gotBody != `{"node":3}` {
		t.Fatalf("remove: %d %q %q (sent %s)", code, out, stderr, gotBody)
	}
	if _, _, _ = runCLI(t, "cluster", "remove", "3", "--no-wait", "--force", "--http", addr); gotBody != `{"node":3,"force":true}` {
		t.Fatalf("remove --force sent %s", gotBody)
	}
	single := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"code":"invalid_request","message":"not a cluster: this node runs without peers"}`)
	}))
	defer single.Close()
	code, _, stderr = runCLI(t, "cluster", "drain", "1", "--no-wait", "--http", strings.TrimPrefix(single.URL, "http://"))
	if code != 1 || !strings.Contains(stderr, "not part of a cluster") {
		t.Fatalf("a single node: %d %q", code, stderr)
	}
}
