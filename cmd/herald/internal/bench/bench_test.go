package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Run refuses what is not a scenario, and a --cpuprofile or --memprofile
// without a file, as command-line errors.
func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"--json"}, {"--cpuprofile"}, {"--memprofile"}, {"--cpuprofile", "c.out", "--memprofile"}} {
		var out, errOut bytes.Buffer
		if code := Run(testEnv(t, &out, &errOut, false), args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if errOut.Len() == 0 {
			t.Errorf("%v: nothing said on stderr", args)
		}
	}
}

// --cpuprofile and --memprofile before the scenario write profiles of the
// run (gzipped protobufs, as pprof reads them); --help lists the
// scenario's flags, the shared ones included.
func TestRunProfilesAndHelp(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.out"), filepath.Join(dir, "mem.out")
	var res replayResult
	runJSON(t, &res, "--cpuprofile", cpu, "--memprofile", mem, "replay", "--records", "100")
	if !res.Verified {
		t.Fatalf("replay not verified: %+v", res)
	}
	for _, prof := range []string{cpu, mem} {
		if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("no profile at %s (%d bytes): %v", prof, len(b), err)
		}
	}
	if n := ProfileArgs([]string{"--memprofile", "m", "-cpuprofile", "c", "replay", "--cpuprofile", "x"}); n != 4 {
		t.Fatalf("ProfileArgs = %d, want the 4 before the scenario", n)
	}
	out := runText(t, "fanout", "--help")
	// A bool flag's line is the flag alone: a backquoted word in its usage
	// would show as an argument it does not take.
	for _, want := range []string{"-in-process\n", "-json\n", "-fanouts string"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %s:\n%s", want, out)
		}
	}
}

// Every scenario runs through Run, under its own name.
func TestScenariosNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range Scenarios {
		if sc.Name == "" || sc.Short == "" || sc.run == nil || seen[sc.Name] {
			t.Errorf("scenario %+v", sc)
		}
		seen[sc.Name] = true
	}
}
