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
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle goroutine ends by itself one
	// interval (1 s) after the last dead letter; see supervisors' TestMain.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// heraldBinary builds the herald binary once per test run, for the
// scenarios' child node.
func heraldBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bench-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "herald")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/heraldmq/herald/cmd/herald").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
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
