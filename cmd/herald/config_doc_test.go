package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/heraldmq/herald/supervisors"
)

const configDoc = "../../docs/configuration.md"

// docKeyRows returns the rows of the key table in the configuration doc,
// by key: the rows whose second cell is a HERALD_ variable. Cells are
// trimmed.
func docKeyRows(t *testing.T, doc string) map[string][]string {
	t.Helper()
	rows := make(map[string][]string)
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) < 2 || !strings.HasPrefix(cells[1], "`HERALD_") {
			continue
		}
		key := strings.Trim(cells[0], "`")
		if _, dup := rows[key]; dup {
			t.Errorf("%s lists %s twice", configDoc, key)
		}
		rows[key] = cells
	}
	return rows
}

// TestConfigurationDoc keeps docs/configuration.md in step with
// supervisors.Config: every key the loader knows has a row with its
// environment variable, its flag and its default, the table names no key
// the loader does not know, and the example file parses to the defaults.
func TestConfigurationDoc(t *testing.T) {
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	rows := docKeyRows(t, doc)

	defaults := supervisors.DefaultConfig()
	schema := newConfigSchema(&defaults)
	flags := make(map[string]string)
	for _, f := range nodeFlagKeys {
		flags[f.key] = "`--" + f.flag + "`"
	}
	for _, f := range schema.fields {
		cells, ok := rows[f.key]
		if !ok {
			t.Errorf("%s: no row for key %s (%s)", configDoc, f.key, f.env)
			continue
		}
		// | Key | Environment variable | Flag | Type | Default | Meaning |
		if len(cells) != 6 {
			t.Errorf("%s: row for %s has %d cells, want 6", configDoc, f.key, len(cells))
			continue
		}
		if want := "`" + f.env + "`"; cells[1] != want {
			t.Errorf("%s: %s has environment variable %s, want %s", configDoc, f.key, cells[1], want)
		}
		wantFlag, hasFlag := flags[f.key]
		if !hasFlag {
			wantFlag = "—"
		}
		if cells[2] != wantFlag {
			t.Errorf("%s: %s has flag %q, want %q", configDoc, f.key, cells[2], wantFlag)
		}
		def := formatValue(f.value)
		if def == "" {
			def = `""`
		}
		if want := "`" + def + "`"; !strings.HasPrefix(cells[4], want) {
			t.Errorf("%s: %s has default %s, want it to start with %s", configDoc, f.key, cells[4], want)
		}
		if cells[5] == "" {
			t.Errorf("%s: %s has no meaning", configDoc, f.key)
		}
	}
	for key := range rows {
		if _, ok := schema.byKey[key]; !ok {
			t.Errorf("%s documents %s, which supervisors.Config does not have", configDoc, key)
		}
	}

	// The example file holds every key at its default.
	_, rest, ok := strings.Cut(doc, "```yaml\n")
	if !ok {
		t.Fatalf("%s has no yaml example", configDoc)
	}
	example, _, _ := strings.Cut(rest, "```")
	var cfg supervisors.Config
	s := newConfigSchema(&cfg)
	if err := s.applyYAML("example", []byte(example)); err != nil {
		t.Fatalf("%s example: %v", configDoc, err)
	}
	if !reflect.DeepEqual(cfg, supervisors.DefaultConfig()) {
		t.Errorf("%s example =\n%+v\nwant the defaults\n%+v", configDoc, cfg, supervisors.DefaultConfig())
	}
}
