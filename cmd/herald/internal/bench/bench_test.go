package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Run refuses what is not a scenario, and a --cpuprofile without a file,
// as command-line errors.
func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"--json"}, {"--cpuprofile"}} {
		var out, errOut bytes.Buffer
		if code := Run(testEnv(t, &out, &errOut, false), args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if errOut.Len() == 0 {
			t.Errorf("%v: nothing said on stderr", args)
		}
	}
}

// --cpuprofile before the scenario writes a profile of the run; --help
// lists the scenario's flags, the shared ones included.
func TestRunCPUProfileAndHelp(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.out")
	var res replayResult
	runJSON(t, &res, "--cpuprofile", prof, "replay", "--records", "100")
	if !res.Verified {
		t.Fatalf("replay not verified: %+v", res)
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Fatalf("no profile at %s: %v", prof, err)
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
