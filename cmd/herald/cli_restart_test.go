package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// The CLI as real processes (bin/herald) against real nodes: herald sub, a
// group member and an idempotent herald pub running while the node under
// them is killed with SIGKILL and restarted; and pub's idempotent publisher
// (--producer-id) and its failure where no node runs.

// cliProcess is a running herald CLI process whose output the test reads
// as it comes.
type cliProcess struct {
	// what names the process in failures.
	what string
	cmd  *exec.Cmd
	// stdin is the process's standard input, nil unless asked for.
	stdin io.WriteCloser
	// out and errOut collect standard output and standard error.
	out, errOut *lineCollector
	// done is closed once the process has exited.
	done chan struct{}
}

// startCLI starts `herald args... --server ADDR --ca CA` against the node at
// addr with its CA in dataDir; with stdin set, the process's standard input
// is a pipe the test writes (cliProcess.stdin), else it is empty. The
// process is killed when the test ends.
func startCLI(t *testing.T, what, addr, dataDir string, stdin bool, args ...string) *cliProcess {
	t.Helper()
	args = append(args, "--server", addr, "--ca", filepath.Join(dataDir, "tls", "ca.pem"))
	p := &cliProcess{what: what, out: newLineCollector(), errOut: newLineCollector(), done: make(chan struct{})}
	p.cmd = exec.Command(heraldBinary(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
	if stdin {
		w, err := p.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = w
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s (herald %s): %v; stderr:\n%s", p.what, strings.Join(args, " "), p.cmd.ProcessState, p.stderr())
		}
	})
	return p
}

// stderr returns what the process wrote to standard error so far.
func (p *cliProcess) stderr() string {
	p.errOut.mu.Lock()
	defer p.errOut.mu.Unlock()
	return string(p.errOut.buf)
}

// running reports whether the process has not exited.
func (p *cliProcess) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitRunning polls cond until it holds, failing the test as soon as one
// of procs exits, or when ctx ends.
func waitRunning(ctx context.Context, t *testing.T, what string, procs []*cliProcess, cond func() bool) {
	t.Helper()
	for !cond() {
		for _, p := range procs {
			if !p.running() {
				t.Fatalf("waiting for %s: %s exited: %v; stderr %q", what, p.what, p.cmd.ProcessState, p.stderr())
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling processes, not asserting time
		}
	}
}

// hasLines returns a condition of waitRunning: p printed at least n lines.
func (p *cliProcess) hasLines(n int) func() bool {
	return func() bool { return len(p.out.lines()) >= n }
}

// stop ends the process with sig (or, for sig nil, by closing its standard
// input) and waits for it to exit with status 0.
func (p *cliProcess) stop(ctx context.Context, t *testing.T, sig os.Signal) {
	t.Helper()
	how := "closing its standard input"
	if sig == nil {
		if err := p.stdin.Close(); err != nil {
			t.Fatal(err)
		}
	} else {
		how = sig.String()
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("%s did not exit after %s", p.what, how)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited with %v after %s; stderr %q", p.what, p.cmd.ProcessState, how, p.stderr())
	}
}

// TestCLIRestartKillNine is issue 15's end-to-end test: a node killed with
// SIGKILL and restarted (on the same port and data dir) twice under a
// running `herald sub --from earliest`, a group member (`herald sub
// --group`) and an idempotent publisher (`herald pub --producer-id`, fed
// on standard input), each time with the publisher mid-stream. In the
// end:
//   - the publisher acked every line it was fed, in order, each at the
//     next offset: the stream holds each line exactly once;
//   - the subscriber printed every record exactly once, in offset order:
//     the lines in the order they were fed;
//   - the group member printed every record at least once and the group
//     committed the whole stream, under the member's own id;
//   - none of the three exited by itself: each was running when the test
//     stopped it, and then exited 0 (the publisher at the end of its input,
//     the subscriber on SIGINT, the member on SIGTERM).
func TestCLIRestartKillNine(t *testing.T) {
	const (
		kills = 2
		// perCycle is how many more records the publisher gets acked
		// before each kill; total is how many it is fed.
		perCycle = 600
		total    = (kills + 1) * perCycle
		stream   = "acme/cli/orders"
		group    = "workers"
		member   = "m1"
	)
	// A delivery in flight at a kill goes back to the group after the
	// visibility timeout (the default is 30 s).
	node := newFixedNode(t, "HERALD_GROUP_VISIBILITY_TIMEOUT=2s", "HERALD_GROUP_MAX_ATTEMPTS=1000000")
	node.start()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	create := startCLI(t, "stream create", node.addr, node.dataDir, false, "stream", "create", stream, "--shards", "1", "-o", "json")
	<-create.done
	var info streamInfoJSON
	if err := json.Unmarshal([]byte(strings.Join(create.out.lines(), "\n")), &info); create.cmd.ProcessState.ExitCode() != 0 || err != nil || !info.Durable || info.Shards != 1 {
		t.Fatalf("stream create: %v %q %q %v", create.cmd.ProcessState, create.out.lines(), create.stderr(), err)
	}

	sub := startCLI(t, "the subscriber", node.addr, node.dataDir, false, "sub", stream, "--from", "earliest", "-o", "json")
	grp := startCLI(t, "the group member", node.addr, node.dataDir, false, "sub", stream, "--group", group, "--member", member, "-o", "json")
	pub := startCLI(t, "the publisher", node.addr, node.dataDir, true, "pub", stream, "--producer-id", "7", "-o", "json")
	line := func(i int) string { return fmt.Sprintf("rec-%05d", i) }
	fed := make(chan error, 1)
	go func() {
		for i := range total {
			if _, err := io.WriteString(pub.stdin, line(i)+"\n"); err != nil {
				fed <- fmt.Errorf("feeding line %d: %w", i, err)
				return
			}
		}
		fed <- nil
	}()

	all := []*cliProcess{pub, sub, grp}
	for k := 1; k <= kills; k++ {
		waitRunning(ctx, t, fmt.Sprintf("%d acks", k*perCycle), all, pub.hasLines(k*perCycle))
		node.kill()
		killedAt := time.Now()
		fmt.Fprintf(node.log, "--- killed (SIGKILL %d) at %s ---\n", k, killedAt.Format(time.StampMilli))
		ready := node.start()
		t.Logf("kill %d after %d acks; the node was ready %v after the kill (its start took %v)",
			k, len(pub.out.lines()), time.Since(killedAt).Round(time.Millisecond), ready.Round(time.Millisecond))
	}
	waitRunning(ctx, t, "every line acked", all, pub.hasLines(total))
	if err := <-fed; err != nil {
		t.Fatal(err)
	}
	waitRunning(ctx, t, "the subscriber to print every record", all, sub.hasLines(total))
	admin, _ := node.dial(t)
	name := client.StreamName{Tenant: "acme", Namespace: "cli", Stream: "orders"}
	var g client.GroupInfo
	waitRunning(ctx, t, "the group to commit the stream, with its member", all, func() bool {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		if g, err = admin.Group(name, group).Describe(dctx); err != nil {
			t.Logf("describe group: %v", err)
			return false
		}
		return len(g.Shards) == 1 && g.Shards[0].Committed == total && g.Shards[0].Tail == total &&
			len(g.Members) == 1 && g.Members[0].ID == member
	})
	pub.stop(ctx, t, nil)
	sub.stop(ctx, t, syscall.SIGINT)
	grp.stop(ctx, t, syscall.SIGTERM)

	// The publisher acked line i at offset i of shard 0: no line was
	// written twice, none was skipped.
	acks := pub.out.lines()
	if len(acks) != total {
		t.Fatalf("the publisher printed %d acks for %d lines", len(acks), total)
	}
	duplicates := 0
	for i, l := range acks {
		var a ackJSON
		if err := json.Unmarshal([]byte(l), &a); err != nil || a.Shard != 0 || a.Offset != uint64(i) {
			t.Fatalf("the publisher's ack of line %d is %q (%v), want shard 0 offset %d", i, l, err, i)
		}
		if a.Duplicate {
			duplicates++ // a re-send the node had written before the kill
		}
	}
	// The subscriber printed offsets 0 to total-1, once each, in order,
	// each the line fed at that place.
	printed := sub.out.lines()
	if len(printed) != total {
		t.Fatalf("the subscriber printed %d records, the stream holds %d", len(printed), total)
	}
	for i, l := range printed {
		var ev eventJSON
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("the subscriber printed %q: %v", l, err)
		}
		if ev.Shard != 0 || ev.Offset != uint64(i) || ev.Payload == nil || *ev.Payload != line(i) {
			t.Fatalf("the subscriber's record %d is %q, want offset %d holding %q", i, l, i, line(i))
		}
	}
	// The group member printed every record, some of them more than once
	// (a delivery it printed and whose ack a kill cut off is delivered
	// again).
	seen := make(map[uint64]int, total)
	for _, l := range grp.out.lines() {
		var rec groupRecordJSON
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("the group member printed %q: %v", l, err)
		}
		if rec.Offset >= total || rec.Payload == nil || *rec.Payload != line(int(rec.Offset)) {
			t.Fatalf("the group member printed %q", l)
		}
		seen[rec.Offset]++
	}
	again := 0
	for off := range uint64(total) {
		switch n := seen[off]; {
		case n == 0:
			t.Errorf("the group member never printed offset %d", off)
		case n > 1:
			again++
		}
	}
	t.Logf("%d kills under %d records: the publisher's acks included %d answers to re-sends; the subscriber printed each record once; "+
		"the group member printed %d records, %d of them more than once", kills, total, duplicates, len(grp.out.lines()), again)
	for _, p := range all {
		if s := p.stderr(); s != "" {
			t.Logf("%s's stderr:\n%s", p.what, s)
		}
	}
}

// TestCLIRestartPubNoNode: `herald pub` to an address where no node runs
// fails within about the client's 2 s dial timeout (the bound is generous:
// 3 s), with exit status 1 and a message that names the address.
func TestCLIRestartPubNoNode(t *testing.T) {
	addr, _ := freePorts(t)
	bin := heraldBinary(t)
	cmd := exec.Command(bin, "pub", "orders", "x", "--server", addr, "--insecure")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("herald pub to nothing: %v, want exit status 1; stderr %q", err, stderr.String())
	}
	t.Logf("herald pub --server %s: exit status 1 after %v: %s", addr, took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	if !strings.Contains(stderr.String(), addr) {
		t.Errorf("the message does not name %s: %q", addr, stderr.String())
	}
	// The dial timeout (2 s by default) makes it fail in about 2 s; the
	// bound leaves room for a loaded machine and still catches the 5 s a
	// dial took before it had a timeout of its own.
	if took > 4*time.Second {
		t.Errorf("herald pub took %v to fail, want about 2 s (the dial timeout)", took)
	}
}

// TestCLIRestartPubProducerID: `herald pub --producer-id` publishes MESSAGE
// arguments, standard input lines and --count records through an
// idempotent producer, and a second run with the same id goes on from the
// producer's last sequence on the node: its records are written, not
// answered as duplicates of the first run's.
func TestCLIRestartPubProducerID(t *testing.T) {
	for _, args := range [][]string{
		{"orders", "x", "--producer-id", "0"},
		{"orders", "x", "--producer-id", "7", "--ack", "none"},
		{"orders", "x", "--producer-id", "7", "--ack", "message"},
		{"orders", "x", "--producer-id", "7", "--if-offset", "3"},
	} {
		if _, err := parsePubCmd(args, io.Discard, func(string) string { return "" }); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if cmd, err := parsePubCmd([]string{"orders", "--producer-id", "7", "--ack", "batch", "--batch", "3"}, io.Discard, func(string) string { return "" }); err != nil || cmd.producerID != 7 {
		t.Fatalf("--producer-id 7: %+v, %v", cmd, err)
	}

	node := startNode(t, t.TempDir())
	none := strings.NewReader("")
	const name = "acme/idem/orders"
	for _, step := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"a", "b"}, "0 0\n0 1\n"},
		// Sequences 1 and 2 again would be answered with offsets 0 and 1.
		{"", []string{"c", "d"}, "0 2\n0 3\n"},
		{"e\nf\ng\n", []string{"--batch", "2"}, "0 4\n0 5\n0 6\n"},
		{"", []string{"h", "-o", "json"}, `{"shard":0,"offset":7}` + "\n"},
		{"", []string{"--count", "10", "--batch", "3", "--size", "4"}, "published 10 records (40 payload bytes)"},
	} {
		args := append([]string{"pub", name, "--producer-id", "7"}, step.args...)
		code, out, errOut := nodeCLI(t, node, strings.NewReader(step.stdin), args...)
		if code != 0 || !strings.HasPrefix(out, step.want) {
			t.Fatalf("herald %s: exit %d, %q %q; want %q", strings.Join(args, " "), code, out, errOut, step.want)
		}
	}
	// Another producer id has sequences of its own.
	if code, out, errOut := nodeCLI(t, node, none, "pub", name, "--producer-id", "8", "i"); code != 0 || out != "0 18\n" {
		t.Fatalf("--producer-id 8: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut := nodeCLI(t, node, none, "read", name, "--shard", "0", "--from", "0")
	want := []string{"0 0 a", "0 1 b", "0 2 c", "0 3 d", "0 4 e", "0 5 f", "0 6 g", "0 7 h"}
	for i := range 10 {
		want = append(want, fmt.Sprintf("0 %d %s", 8+i, generatedPayload(i+1, 4)))
	}
	want = append(want, "0 18 i")
	if code != 0 || out != strings.Join(want, "\n")+"\n" {
		t.Fatalf("read: exit %d, %q %q; want %q", code, out, errOut, want)
	}
}
