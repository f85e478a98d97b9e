package main

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// herald pub as a real process (bin/herald) or in this process against
// real nodes: its idempotent publisher (--producer-id), and its failure
// where no node runs.

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
	if took > 3*time.Second {
		t.Errorf("herald pub took %v to fail, want within 3 s", took)
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
