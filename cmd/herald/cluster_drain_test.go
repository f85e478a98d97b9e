package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/cmd/herald/internal/history"
)

// drainNode runs `herald cluster drain ID -o json` against node id itself
// and returns what it printed.
func (dc *devCluster) drainNode(t *testing.T, id uint64) drainResult {
	t.Helper()
	code, out, errOut := runCLI(t, "cluster", "drain", fmt.Sprint(id), "--http", dc.nodes[id-1].http, "-o", "json")
	if code != 0 {
		t.Fatalf("herald cluster drain %d: exit %d: %s", id, code, errOut)
	}
	var res drainResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("herald cluster drain -o json: %v: %s", err, out)
	}
	return res
}

// waitBalanced waits until every running node sees every shard of each
// stream led by its preferred leader, and returns how long that took.
func (dc *devCluster) waitBalanced(t *testing.T, streams ...string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for {
		var last error
		for _, stream := range streams {
			for _, n := range dc.nodes {
				d, err := nodeDescribe(n, stream)
				if err == nil {
					for _, s := range d.Shard {
						if s.Leader == 0 || s.Leader != s.Preferred {
							err = fmt.Errorf("shard %d led by %d, preferred %d", s.Shard, s.Leader, s.Preferred)
							break
						}
					}
				}
				if err != nil {
					last = fmt.Errorf("node %d, %s: %w", n.id, stream, err)
					break
				}
			}
		}
		if last == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders did not return to their preferred replicas: %v", last)
		}
		time.Sleep(50 * time.Millisecond) // polling other processes' state
	}
}

// A rolling restart by drains, on node processes under the kill runs'
// workload (two `herald pub` processes, a Go ClusterProducer, a reader, two
// racing conditional writers): each node in turn is drained with `herald
// cluster drain` (which waits until it leads nothing), stopped (SIGTERM for
// the first, kill -9 for the others: a drained node leads nothing, so even
// a kill costs no election), started again, seen to come back drained and
// leading nothing, undrained with `herald cluster undrain` through another
// node, and given back its preferred leaderships before the next. The
// history checker then runs as after the kills: no idempotent publish
// failed or is unknown, none acknowledged is lost or duplicated. Each
// drain's duration and each return of the leaderships are logged.
func TestClusterDrainedRollingRestart(t *testing.T) {
	dc := startDevCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := startWorkload(t, ctx, dc)
	dc.waitBalanced(t, "orders", "ledger")
	for i, n := range dc.nodes {
		time.Sleep(500 * time.Millisecond) // publishing goes on between restarts
		res := dc.drainNode(t, n.id)
		if !res.Done || !slices.Equal(res.Drained, []uint64{n.id}) || len(res.Kept) != 0 {
			t.Fatalf("herald cluster drain %d: %+v", n.id, res)
		}
		st := n.status(t)
		for _, g := range st.Groups {
			if g.Leader == n.id {
				t.Fatalf("node %d drained but leads %s shard %d", n.id, g.Stream, g.Shard)
			}
		}
		how := "kill -9"
		if i == 0 {
			how = "SIGTERM"
			if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			<-n.done
			if code := n.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("node %d exited %d after SIGTERM", n.id, code)
			}
		} else {
			dc.kill(t, n.id)
		}
		stopped := time.Now()
		shard, _ := w.leaderOtherThan(n.id)
		took := w.probe(fmt.Sprintf("probe-%d", n.id), shard, stopped)
		t.Logf("node %d drained in %d ms (as herald cluster drain measured it), stopped with %s; a fresh producer's publish was acknowledged %v after the stop",
			n.id, res.TookMillis, how, took.Round(time.Millisecond))
		n.start(t)
		dc.waitCaughtUp(t, "orders")
		dc.waitCaughtUp(t, "ledger")
		st = n.status(t)
		if !slices.Equal(st.Drained, []uint64{n.id}) {
			t.Fatalf("node %d came back with drained nodes %v", n.id, st.Drained)
		}
		for _, g := range st.Groups {
			if g.Leader == n.id {
				t.Fatalf("node %d came back drained but leads %s shard %d", n.id, g.Stream, g.Shard)
			}
		}
		other := dc.nodes[(i+1)%len(dc.nodes)]
		out := dc.cliHTTP(t, "cluster", "undrain", fmt.Sprint(n.id), "--http", other.http)
		if !strings.Contains(out, fmt.Sprintf("node %d undrained", n.id)) {
			t.Fatalf("herald cluster undrain: %q", out)
		}
		t.Logf("node %d undrained: every shard led by its preferred replica again %v later", n.id, dc.waitBalanced(t, "orders", "ledger").Round(time.Millisecond))
	}
	w.finish(*clusterHistoryDuration)
	sum := history.Summarize(w.rec.History(), nil)
	if sum.Failed != 0 || sum.Unknown != 0 {
		t.Errorf("orders: %d publishes failed and %d are unknown across a rolling restart by drains", sum.Failed, sum.Unknown)
	}
}

// cliHTTP runs a CLI command that talks to a node's HTTP listener (no
// --server or --ca).
func (dc *devCluster) cliHTTP(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("herald %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}
