// Package fuzzseed keeps the checked-in seed corpora of fuzz targets
// current. A package's tests list their seeds, built from real encodings;
// Check compares each with its file under testdata/fuzz (or, when asked,
// rewrites them) and refuses corpus directories no seed belongs to. Only
// tests import it.
package fuzzseed

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Seed is one corpus file: testdata/fuzz/Target/Name holding Vals, the
// fuzz function's arguments after *testing.T.
type Seed struct {
	Target, Name string
	Vals         []any
}

// Marshal encodes vals as a `go test fuzz v1` corpus file, as the go
// command writes them.
func Marshal(vals ...any) []byte {
	b := bytes.NewBufferString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(b, "[]byte(%q)\n", v)
		case string:
			fmt.Fprintf(b, "string(%q)\n", v)
		case uint64:
			fmt.Fprintf(b, "uint64(%d)\n", v)
		case uint32:
			fmt.Fprintf(b, "uint32(%d)\n", v)
		case byte:
			fmt.Fprintf(b, "byte(%q)\n", v)
		default:
			panic(fmt.Sprintf("seed value of type %T", v))
		}
	}
	return b.Bytes()
}

// Check fails t for every seed whose file under testdata/fuzz is missing or
// differs from what Marshal writes now, and for every corpus directory that
// no seed's target names. With update it writes the files instead.
func Check(t testing.TB, seeds []Seed, update bool) {
	t.Helper()
	seeds = slices.Clone(seeds) // sorted, so failures read the same every run
	slices.SortFunc(seeds, func(a, b Seed) int { return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.Name, b.Name)) })
	targets := map[string]bool{}
	for _, s := range seeds {
		targets[s.Target] = true
		path := filepath.Join("testdata", "fuzz", s.Target, s.Name)
		want := Marshal(s.Vals...)
		if update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (rewrite with: go test -run TestFuzzSeedFilesCurrent . -args -update-seeds)", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: the encoders now write\n%s(rewrite with: go test -run TestFuzzSeedFilesCurrent . -args -update-seeds)", path, want)
		}
	}
	dirs, err := os.ReadDir(filepath.Join("testdata", "fuzz"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !targets[d.Name()] {
			t.Errorf("testdata/fuzz/%s has no seeds listed by the package's tests", d.Name())
		}
	}
}
