package bench

import "testing"

// The idle scenario opens a few subscriptions over several connections (the
// last one short), sees the node count them, and sees them go away; the
// memory figures are a benchmark's, only checked for being measured.
func TestBenchIdleRuns(t *testing.T) {
	var res idleResult
	runJSON(t, &res, "idle", "--subscriptions", "200", "--per-connection", "75")
	if res.Scenario != "idle" || res.Subscriptions != 200 || res.PerConnection != 75 || res.Connections != 3 {
		t.Fatalf("unexpected result: %+v", res)
	}
	if res.NodeSubscriptions != 200 || res.NodeSubscriptionsClosed != 0 {
		t.Errorf("node gauge %v open, %v after close", res.NodeSubscriptions, res.NodeSubscriptionsClosed)
	}
	for name, s := range map[string]idleSnapshot{"baseline": res.Baseline, "connected": res.Connected, "subscribed": res.Subscribed, "closed": res.Closed} {
		if s.RSS <= 0 || s.Heap <= 0 || s.Stacks <= 0 || s.Goroutines <= 0 {
			t.Errorf("%s not measured: %+v", name, s)
		}
	}
	// Each idle subscription holds at least its client reader goroutine, and
	// closing ends them.
	if res.Subscribed.Goroutines < res.Connected.Goroutines+200 {
		t.Errorf("goroutines %d connected, %d subscribed", res.Connected.Goroutines, res.Subscribed.Goroutines)
	}
	if res.Closed.Goroutines >= res.Subscribed.Goroutines-200 {
		t.Errorf("goroutines %d subscribed, %d closed", res.Subscribed.Goroutines, res.Closed.Goroutines)
	}
	if res.SubscribeSeconds <= 0 || res.TargetBytes != 20<<10 || res.Note == "" {
		t.Errorf("incomplete result: %+v", res)
	}
}

// By default the node is a `herald node` child process, measured through
// its /metrics: its goroutines rise with the subscriptions and fall after
// they close, and the clients' side is reported apart.
func TestBenchIdleNodeProcess(t *testing.T) {
	var res idleResult
	runJSONNode(t, true, &res, "idle", "--subscriptions", "200", "--per-connection", "100")
	if !res.NodeProcess || res.ClientsPerSubscription == nil || res.NodeSubscriptions != 200 || res.NodeSubscriptionsClosed != 0 {
		t.Fatalf("unexpected result: %+v", res)
	}
	for name, s := range map[string]idleSnapshot{"baseline": res.Baseline, "subscribed": res.Subscribed, "closed": res.Closed} {
		if s.RSS <= 0 || s.Heap <= 0 || s.Stacks <= 0 || s.Goroutines <= 0 {
			t.Errorf("%s not measured: %+v", name, s)
		}
	}
	// The node's goroutines are its own: this process's clients are not
	// among them.
	if res.Subscribed.Goroutines < res.Baseline.Goroutines+200 || res.Subscribed.Goroutines > res.Baseline.Goroutines+2*200+50 {
		t.Errorf("node goroutines %d at baseline, %d subscribed", res.Baseline.Goroutines, res.Subscribed.Goroutines)
	}
}

// Bad flags are usage errors, before any node starts.
func TestBenchIdleFlags(t *testing.T) {
	checkUsageErrors(t, "idle", [][]string{{"--subscriptions", "0"}, {"--per-connection", "0"}, {"--timeout", "0s"}, {"--nope"}})
}
