package storage

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports enforces the layout rule: storage imports only the standard
// library and Badger, nothing of Herald (test files are exempt).
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			stdlib := !strings.Contains(strings.Split(path, "/")[0], ".")
			if !stdlib && !strings.HasPrefix(path, "github.com/dgraph-io/badger/v4") {
				t.Errorf("%s imports %s: storage may import only the standard library and Badger", name, path)
			}
		}
	}
}
