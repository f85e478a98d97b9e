package bench

import (
	"errors"
	"os"
	"testing"
	"time"
)

// parseProcStat counts fields from the last ')' (a command name may hold
// spaces and parentheses) and adds utime and stime, in ticks of 10 ms.
func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
	}{
		{"plain", "1234 (herald) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 40 0 0 20 0 12 0 5000 0 0", 2900 * time.Millisecond},
		{"odd name", "77 (a) b (c)) R 1 77 77 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 0 0 0", 70 * time.Millisecond},
		{"zero", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 0 0 0", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.in))
			if err != nil || got != tc.want {
				t.Fatalf("parseProcStat = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	for _, in := range []string{"", "1 herald S 1 2 3", "1 (x) S 1 2 3", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 zz 0 0 0", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 -5 0 0 0"} {
		if _, err := parseProcStat([]byte(in)); !errors.Is(err, errProcStat) {
			t.Errorf("parseProcStat(%q) = %v, want errProcStat", in, err)
		}
	}
}

// This process's /proc stat parses, and its CPU only grows.
func TestProcessCPUOfSelf(t *testing.T) {
	a, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3_000_000; i++ { // some CPU to count
		_ = time.Now()
	}
	b, err := processCPU(os.Getpid())
	if err != nil || b < a {
		t.Fatalf("CPU went from %v to %v (%v)", a, b, err)
	}
	if _, err := processCPU(-1); err == nil {
		t.Fatal("no process -1, no error")
	}
}

// cpuBetween divides each process's CPU over the records, and leaves the
// node's out when either sample lacks it (a node in this process).
func TestCPUBetween(t *testing.T) {
	from := cpuSample{node: time.Second, nodeOK: true, self: 2 * time.Second}
	to := cpuSample{node: 1500 * time.Millisecond, nodeOK: true, self: 2250 * time.Millisecond}
	c := cpuBetween(from, to, 2_000_000)
	if c.CPURecords != 2_000_000 || c.NodeCPUSeconds == nil || *c.NodeCPUSeconds != 0.5 || *c.NodeCPUMsPerMillion != 250 ||
		c.ClientCPUSeconds != 0.25 || c.ClientCPUMsPerMillion != 125 {
		t.Fatalf("cpuBetween = %+v", c)
	}
	if got := c.columns(); got != "       250        125" {
		t.Errorf("columns = %q", got)
	}
	shared := cpuBetween(cpuSample{self: time.Second}, cpuSample{self: 3 * time.Second}, 1_000_000)
	if shared.NodeCPUSeconds != nil || shared.NodeCPUMsPerMillion != nil || shared.ClientCPUMsPerMillion != 2000 || shared.nodeMs() != "-" {
		t.Fatalf("shared process: %+v", shared)
	}
	if none := cpuBetween(from, to, 0); none.ClientCPUMsPerMillion != 0 || *none.NodeCPUMsPerMillion != 0 {
		t.Fatalf("no records: %+v", none)
	}
}
