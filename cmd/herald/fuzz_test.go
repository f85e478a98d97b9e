package main

import (
	"errors"
	"flag"
	"hash/fnv"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/heraldmq/herald/supervisors"

	"github.com/heraldmq/herald/net/fuzzseed"
)

// The node's configuration file is fuzzed here, from the YAML to a
// validated supervisors.Config (FuzzLoadConfigFile, in config_test.go,
// checks that applying a file is idempotent), and each key's value syntax.
// A config that validates must round-trip: written back as a file, or as
// HERALD_<KEY> variables, every key of it reads back the same.
//
// The seed corpora under testdata/fuzz/<FuzzName>/ are built by
// fuzzSeedFiles; TestFuzzSeedFilesCurrent fails when one is stale, and
//
//	go test -run '^TestFuzzSeedFilesCurrent$' -update-seeds ./cmd/herald/
//
// rewrites them. Files the fuzzer adds (failing inputs, named by hash) are
// left alone.

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the seed files under testdata/fuzz from the encoders")

// fileSentinels are the errors a config file's *configError may wrap; a
// YAML syntax error wraps none of them and concerns the whole file.
var fileSentinels = []error{errUnknownKey, errDuplicateKey, errBadValue, errMultipleDocuments}

// checkFileErrors fails unless err is made of *configError values for the
// file name, each wrapping a sentinel of fileSentinels or, with no key, a
// YAML error about the whole file.
func checkFileErrors(t *testing.T, name string, err error) {
	t.Helper()
	ce := configErrors(err)
	if len(ce) == 0 {
		t.Fatalf("error %v is not a *configError", err)
	}
	for _, e := range ce {
		if e.kind != sourceFile || e.name != name {
			t.Fatalf("error %v has kind %d, name %q", e, e.kind, e.name)
		}
		if errors.Is(e, errUnsupportedType) {
			t.Fatalf("a Config field has a type the loader cannot set: %v", e)
		}
		known := false
		for _, s := range fileSentinels {
			known = known || errors.Is(e, s)
		}
		if !known && e.key != "" {
			t.Fatalf("error %v about key %s wraps none of the loader's errors", e, e.key)
		}
	}
}

// FuzzNodeConfig applies a YAML file over the defaults and validates the
// result, as loadNodeConfig does. A file is refused with *configError
// values, a bad combination by Validate; a config that validates writes
// back (renderConfigYAML) to a file that sets every key to the same value
// over a zero Config, and to HERALD_<KEY> variables that do the same.
func FuzzNodeConfig(f *testing.F) {
	// Every key at its default, written as renderConfigYAML writes it (not
	// a checked-in file: it changes with every new key).
	defaults := supervisors.DefaultConfig()
	f.Add(renderConfigYAML(f, &defaults))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := supervisors.DefaultConfig()
		if err := newConfigSchema(&cfg).applyYAML("fuzz.yaml", data); err != nil {
			checkFileErrors(t, "fuzz.yaml", err)
			return
		}
		if err := cfg.Validate(); err != nil {
			return
		}
		out := renderConfigYAML(t, &cfg)
		var fromFile supervisors.Config
		if err := newConfigSchema(&fromFile).applyYAML("rendered.yaml", out); err != nil {
			t.Fatalf("the rendered config does not load: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(fromFile, cfg) {
			t.Fatalf("the rendered config loads as\n%+v\nwant\n%+v\nfile:\n%s", fromFile, cfg, out)
		}
		if err := fromFile.Validate(); err != nil {
			t.Fatalf("the rendered config does not validate: %v", err)
		}
		vars := map[string]string{}
		for _, field := range newConfigSchema(&cfg).fields {
			vars[field.env] = formatValue(field.value)
		}
		var fromEnv supervisors.Config
		if err := newConfigSchema(&fromEnv).applyEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
			t.Fatalf("the config as environment variables does not load: %v", err)
		}
		if !reflect.DeepEqual(fromEnv, cfg) {
			t.Fatalf("the config as environment variables loads as\n%+v\nwant\n%+v", fromEnv, cfg)
		}
	})
}

// renderConfigYAML writes every key of cfg as a YAML file, nested by
// section, each value a double-quoted string in formatValue's syntax.
func renderConfigYAML(t testing.TB, cfg *supervisors.Config) []byte {
	t.Helper()
	root := &yaml.Node{Kind: yaml.MappingNode}
	section := func(m *yaml.Node, key string) *yaml.Node {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i+1]
			}
		}
		s := &yaml.Node{Kind: yaml.MappingNode}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, s)
		return s
	}
	for _, field := range newConfigSchema(cfg).fields {
		parts := strings.Split(field.key, ".")
		m := root
		for _, p := range parts[:len(parts)-1] {
			m = section(m, p)
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: parts[len(parts)-1]},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: formatValue(field.value)})
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}})
	if err != nil {
		t.Fatalf("render the config: %v", err)
	}
	return out
}

// FuzzConfigValue sets one key from text, as a file, a variable or a flag
// does (a name that is no key picks one by its hash): a refusal wraps
// errBadValue, and an accepted value formats (formatValue, the flags' shown
// defaults) to text that sets the same value and formats the same.
func FuzzConfigValue(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, text string) {
		var cfg supervisors.Config
		schema := newConfigSchema(&cfg)
		fd, ok := schema.byKey[key]
		if !ok {
			h := fnv.New32a()
			h.Write([]byte(key))
			fd = schema.fields[int(h.Sum32()%uint32(len(schema.fields)))]
		}
		if err := setValue(fd.value, text); err != nil {
			if !errors.Is(err, errBadValue) {
				t.Fatalf("%s = %q: error %v does not wrap errBadValue", fd.key, text, err)
			}
			return
		}
		formatted := formatValue(fd.value)
		var again supervisors.Config
		fd2 := newConfigSchema(&again).byKey[fd.key]
		if err := setValue(fd2.value, formatted); err != nil {
			t.Fatalf("%s = %q set, but its formatted value %q does not: %v", fd.key, text, formatted, err)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("%s = %q then %q: %v, want %v", fd.key, text, formatted, fd2.value, fd.value)
		}
		if f2 := formatValue(fd2.value); f2 != formatted {
			t.Fatalf("%s formats as %q, then as %q", fd.key, formatted, f2)
		}
	})
}

func fuzzSeedFiles(t *testing.T) []fuzzseed.Seed {
	var out []fuzzseed.Seed
	add := func(target, name string, vals ...any) {
		out = append(out, fuzzseed.Seed{Target: target, Name: name, Vals: vals})
	}

	files := map[string]string{
		"empty":            "",
		"small":            "listen: 127.0.0.1:7400\npublish_window: 256\nidle_timeout: 30s\n",
		"badger_section":   "badger:\n  mem_table_size: 16MiB\n  num_compactors: 2\n",
		"sizes_and_times":  "max_frame_bytes: 32 MiB\nread_max_bytes: 2MiB\nbadger:\n  value_log_file_size: 1GiB\ngroup_max_poll_wait: 1m30s\n",
		"anchor_alias":     "badger: &b {num_memtables: 2}\nx: *b\n",
		"alias_value":      "listen: &l 0.0.0.0:7400\nhttp: *l\n",
		"merge_key":        "badger:\n  <<: {num_memtables: 3}\n",
		"bad_values":       "max_frame_bytes: 4GiB\nauto_create_streams: maybe\n",
		"invalid_combo":    "max_frame_bytes: 64KiB\nread_max_bytes: 1MiB\n",
		"list_at_root":     "- a\n- b\n",
		"two_documents":    "listen: a\n---\nlisten: b\n",
		"nested_shapes":    "{listen: [1, {2: 3}], badger: ~, <<: {a: b}}\n",
		"duplicate_key":    "listen: a\nlisten: b\n",
		"unknown_key":      "lissen: a\nbadger:\n  mem_table: 1\n",
		"null_values":      "listen: ~\nbadger: null\ntls_cert: \"\"\n",
		"quoted_strings":   "log_level: \"debug\"\nlog_format: 'json'\ndata_dir: \"null\"\n",
		"overflow":         "publish_window: 99999999999999999999\nbadger:\n  mem_table_size: 9223372036854775807GiB\n",
		"negative":         "subscriber_queue_max_bytes: -1\nidle_timeout: -5s\n",
		"syntax_error":     "listen: [\n",
		"tabs":             "listen:\t127.0.0.1:1\n\tbadger: 1\n",
		"recursive_alias":  "a: &a [*a]\n",
		"utf16_bom":        "\xff\xfel\x00i\x00s\x00t\x00e\x00n\x00:\x00 \x00x\x00\n\x00",
		"trace":            "trace_exporter: otlp\ntrace_otlp_protocol: grpc\n",
		"deep_nesting":     strings.Repeat("[", 200) + strings.Repeat("]", 200) + "\n",
		"key_is_a_mapping": "? {a: b}\n: c\n",
	}
	for name, text := range files {
		add("FuzzNodeConfig", name, []byte(text))
		add("FuzzLoadConfigFile", name, []byte(text))
	}

	for name, v := range map[string]struct{ key, text string }{
		"string":            {"listen", "127.0.0.1:7400"},
		"string_empty":      {"tls_cert", ""},
		"bool":              {"auto_create_streams", "true"},
		"bool_spelling":     {"auto_create_streams", " F "},
		"bool_bad":          {"auto_create_streams", "maybe"},
		"uint32":            {"max_frame_bytes", "16MiB"},
		"uint32_overflow":   {"max_frame_bytes", "4GiB"},
		"uint32_negative":   {"max_frame_bytes", "-1"},
		"int":               {"publish_window", "256"},
		"int_suffix_space":  {"publish_window", "2 KiB"},
		"int_suffix_only":   {"publish_window", "KiB"},
		"int64_max":         {"subscriber_queue_max_bytes", "9223372036854775807"},
		"int64_min":         {"subscriber_queue_max_bytes", "-9223372036854775808"},
		"int64_overflow":    {"subscriber_queue_max_bytes", "8589934592GiB"},
		"int64_hex":         {"subscriber_queue_max_bytes", "0x10"},
		"duration":          {"idle_timeout", "1m30s"},
		"duration_unitless": {"idle_timeout", "30"},
		"duration_min":      {"idle_timeout", "-2562047h47m16.854775808s"},
		"duration_fraction": {"idle_timeout", "1.5h"},
		"badger_int64":      {"badger.mem_table_size", "16mib"},
	} {
		add("FuzzConfigValue", name, v.key, v.text)
	}
	return out
}
func TestFuzzSeedFilesCurrent(t *testing.T) {
	fuzzseed.Check(t, fuzzSeedFiles(t), *updateSeeds)
}
