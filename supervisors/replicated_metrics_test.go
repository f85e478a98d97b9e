package supervisors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// series returns the values of metric name whose labels hold every one
// of labels (`key="value"`), by their full series.
func series(all map[string]float64, name string, labels ...string) map[string]float64 {
	out := map[string]float64{}
	for s, v := range all {
		if !strings.HasPrefix(s, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(s, l)
		}
		if ok {
			out[s] = v
		}
	}
	return out
}

// Each replicated shard held by a node has its own raft series on that
// node's /metrics: term, commit and applied index, leader, leader changes,
// snapshots sent, and on the leader each replica's lag.
func TestReplicatedGroupMetrics(t *testing.T) {
	tc := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, name := tc.replicatedStream(ctx, "metered", 1)
	publishRecords(t, ctx, cc.NewProducer(name, 4), 0, 20)
	lead := tc.leaderOf(name, 0)
	tc.describeAll(name, "every replica caught up", func(_ uint64, d StreamDescription) bool {
		return d.Shard[0].Tail == 20 && (d.Shard[0].Lag == nil || d.Shard[0].Lag[1]+d.Shard[0].Lag[2]+d.Shard[0].Lag[3] == 0)
	})
	group := []string{`stream="default/default/metered"`, `shard="0"`}
	deadline := time.Now().Add(20 * time.Second)
	for id, n := range tc.nodes {
		for {
			all := scrapeSeries(t, n)
			var problems []string
			one := func(metric string) float64 {
				s := series(all, metric, group...)
				if len(s) != 1 {
					problems = append(problems, fmt.Sprintf("%s: %d series", metric, len(s)))
					return -1
				}
				for _, v := range s {
					return v
				}
				return -1
			}
			// The commit index goes on moving (raft's own entries), so the
			// gauge is checked against a describe taken after the scrape:
			// it can only be at or below that.
			desc, err := n.DescribeStream(ctx, name)
			if err != nil {
				t.Fatalf("node %d: describe: %v", id, err)
			}
			d := desc.Shard[0]
			if v := one("herald_raft_group_commit"); v < 20 || v > float64(d.Commit) {
				problems = append(problems, fmt.Sprintf("commit %v, describe %d", v, d.Commit))
			}
			if v := one("herald_raft_group_applied"); v < 20 {
				problems = append(problems, fmt.Sprintf("applied %v", v))
			}
			if v := one("herald_raft_group_term"); v < 1 {
				problems = append(problems, fmt.Sprintf("term %v", v))
			}
			if v := one("herald_raft_group_leader"); v != float64(lead) {
				problems = append(problems, fmt.Sprintf("leader %v, want %d", v, lead))
			}
			if v := one("herald_raft_group_leader_changes_total"); v < 1 {
				problems = append(problems, fmt.Sprintf("leader changes %v", v))
			}
			one("herald_raft_group_snapshots_sent_total")
			lags := series(all, "herald_raft_group_lag", group...)
			if id == lead {
				for r := 1; r <= 3; r++ {
					if s := series(lags, "herald_raft_group_lag", fmt.Sprintf(`replica="%d"`, r)); len(s) != 1 {
						problems = append(problems, fmt.Sprintf("lag of replica %d: %v", r, s))
					}
				}
			} else if len(lags) != 0 {
				problems = append(problems, fmt.Sprintf("a follower exports lag: %v", lags))
			}
			if len(problems) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %v", id, problems)
			}
			time.Sleep(50 * time.Millisecond) // the gauges follow raft's ticks
		}
	}
}
