package supervisors

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/heraldmq/herald/"

// TestLayoutDependencies enforces DESIGN.md's dependency direction:
// cmd → client, supervisors (and storage, for the bench's raw ceiling) →
// actors → storage; net knows no actors or
// storage; client shares only net/... with the broker; storage imports
// nothing of ours. Test files are exempt.
func TestLayoutDependencies(t *testing.T) {
	allowed := map[string][]string{
		"storage":     {},
		"net":         {"net/"},
		"actors":      {"storage", "net/"},
		"supervisors": {"actors", "storage", "net/"},
		"client":      {"net/"},
		// storage: `herald bench ceiling` measures the raw storage engine.
		"cmd":      {"client", "supervisors", "storage", "net/", "cmd/"},
		"examples": {"client", "net/"},
	}
	root := filepath.Join("..")
	for top, ok := range allowed {
		dir := filepath.Join(root, top)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p := strings.Trim(imp.Path.Value, `"`)
				if !strings.HasPrefix(p, module) {
					continue
				}
				rel := strings.TrimPrefix(p, module)
				if rel == top || strings.HasPrefix(rel, top+"/") {
					continue
				}
				okImport := false
				for _, a := range ok {
					if rel == a || strings.HasPrefix(rel, a) && strings.HasSuffix(a, "/") || strings.HasPrefix(rel, a+"/") {
						okImport = true
					}
				}
				if !okImport {
					t.Errorf("%s imports %s: %s may import only %v", path, rel, top, ok)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
