package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// leakOptions are what goleak accepts as left running: protoactor's
// dead-letter throttle goroutine ends by itself one interval (1 s) after
// the last dead letter (see supervisors' TestMain).
var leakOptions = []goleak.Option{goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")}

// TestMain runs the tests, checks that they left no goroutine behind, and
// removes the herald binary if one was built.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	if bin, err := builtHerald(); err == nil && bin != "" {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// built is set once heraldBinary first asks for the binary.
var built atomic.Bool

// buildHerald builds cmd/herald into a temporary directory, once.
var buildHerald = sync.OnceValues(func() (string, error) {
	built.Store(true)
	dir, err := os.MkdirTemp("", "herald-bench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "herald")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/heraldmq/herald/cmd/herald").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// builtHerald is the binary built, if a test asked for one.
func builtHerald() (string, error) {
	if !built.Load() {
		return "", nil
	}
	return buildHerald()
}

// heraldBinary is the herald binary the scenarios' child node runs,
// built on first use.
func heraldBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildHerald()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// testEnv is the environment of a test run: output in buffers, the child
// node a built herald when processNode is set (else nil: a test that
// forgets --in-process fails to start the node).
func testEnv(t *testing.T, out, errOut *bytes.Buffer, processNode bool) Env {
	env := Env{Stdout: out, Stderr: errOut, NodeExecutable: func() (string, error) {
		return "", fmt.Errorf("test %s runs no node process", t.Name())
	}}
	if processNode {
		bin := heraldBinary(t)
		env.NodeExecutable = func() (string, error) { return bin, nil }
	}
	return env
}

// runJSON runs `herald bench args... --json` with the node in this process
// and decodes the result.
func runJSON(t *testing.T, res any, args ...string) {
	t.Helper()
	runJSONNode(t, false, res, append(args, "--in-process")...)
}

// runJSONNode runs `herald bench args... --json`, with a child node when
// processNode is set, and decodes the result.
func runJSONNode(t *testing.T, processNode bool, res any, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Run(testEnv(t, &out, &errOut, processNode), append(args, "--json")); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
}

// runText runs `herald bench args...` and returns its summary.
func runText(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Run(testEnv(t, &out, &errOut, false), args); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	return out.String()
}

// checkUsageErrors fails t unless each args of scenario is a command-line
// error (exit 2), refused before any node starts.
func checkUsageErrors(t *testing.T, scenario string, bad [][]string) {
	t.Helper()
	for _, args := range bad {
		var out, errOut bytes.Buffer
		if code := Run(testEnv(t, &out, &errOut, false), append([]string{scenario}, args...)); code != 2 {
			t.Errorf("%s %v: exit %d, want 2 (%s)", scenario, args, code, errOut.String())
		}
	}
}

// checkLatency fails t unless s holds samples with ordered percentiles.
func checkLatency(t *testing.T, what string, s latencySummary) {
	t.Helper()
	if s.Count <= 0 || s.P50 <= 0 {
		t.Errorf("%s: no samples: %+v", what, s)
	}
	if !slices.IsSorted([]float64{s.P50, s.P90, s.P99, s.P999, s.Max}) {
		t.Errorf("%s: percentiles out of order: %+v", what, s)
	}
}

// checkCPU fails t unless c was measured over records, with the node's own
// CPU exactly when the node ran as its own process.
func checkCPU(t *testing.T, what string, c CPU, records int64, nodeProcess bool) {
	t.Helper()
	if c.CPURecords != records || c.ClientCPUSeconds <= 0 || c.ClientCPUMsPerMillion <= 0 {
		t.Errorf("%s: client CPU not measured over %d records: %+v", what, records, c)
	}
	if (c.NodeCPUSeconds != nil) != nodeProcess || (c.NodeCPUMsPerMillion != nil) != nodeProcess {
		t.Errorf("%s: node CPU present=%t, node process=%t", what, c.NodeCPUSeconds != nil, nodeProcess)
	}
	if nodeProcess && (*c.NodeCPUSeconds <= 0 || *c.NodeCPUMsPerMillion <= 0) {
		t.Errorf("%s: node CPU not measured: %v s, %v ms/M", what, *c.NodeCPUSeconds, *c.NodeCPUMsPerMillion)
	}
}
