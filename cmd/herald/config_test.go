package main

import (
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/supervisors"
)

// loadTest runs registerNodeFlags, fs.Parse(args) and loadNodeConfig with
// the given environment. A non-empty yamlText is written to a file passed
// with --config before args.
func loadTest(t *testing.T, yamlText string, env map[string]string, args ...string) (supervisors.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nf := registerNodeFlags(fs)
	if yamlText != "" {
		path := filepath.Join(t.TempDir(), "herald.yaml")
		if err := os.WriteFile(path, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Parse(%q): %v", args, err)
	}
	return loadNodeConfig(fs, nf, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
}

func TestLoadNodeConfigPrecedence(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		args []string
		// want changes the defaults into the expected configuration.
		want func(c *supervisors.Config)
	}{
		{
			name: "defaults",
			want: func(*supervisors.Config) {},
		},
		{
			name: "file over defaults",
			yaml: `
listen: 0.0.0.0:7500
publish_window: 64
auto_create_streams: false
max_frame_bytes: 1MiB
read_max_bytes: 512KiB
idle_timeout: 1m
subscriber_queue_max_bytes: 0
badger:
  mem_table_size: 32MiB
  num_compactors: 3
`,
			want: func(c *supervisors.Config) {
				c.Listen = "0.0.0.0:7500"
				c.PublishWindow = 64
				c.AutoCreateStreams = false
				c.MaxFrameBytes = 1 << 20
				c.ReadMaxBytes = 512 << 10
				c.IdleTimeout = time.Minute
				c.SubscriberQueueMaxBytes = 0
				c.Badger.MemTableSize = 32 << 20
				c.Badger.NumCompactors = 3
			},
		},
		{
			name: "environment over file",
			yaml: "listen: 0.0.0.0:7500\npublish_window: 64\n",
			env: map[string]string{
				"HERALD_LISTEN":                "127.0.0.1:7600",
				"HERALD_BADGER_MEM_TABLE_SIZE": "8 MiB",
				"HERALD_SHUTDOWN_TIMEOUT":      "1m30s",
				"HERALD_AUTO_CREATE_STREAMS":   "false",
				"HERALD_TLS_CERT":              "/etc/herald/cert.pem",
				"HERALD_TLS_KEY":               "/etc/herald/key.pem",
				"UNRELATED":                    "ignored",
			},
			want: func(c *supervisors.Config) {
				c.Listen = "127.0.0.1:7600"
				c.PublishWindow = 64
				c.Badger.MemTableSize = 8 << 20
				c.ShutdownTimeout = 90 * time.Second
				c.AutoCreateStreams = false
				c.TLSCert = "/etc/herald/cert.pem"
				c.TLSKey = "/etc/herald/key.pem"
			},
		},
		{
			name: "flags over environment",
			yaml: "listen: 0.0.0.0:7500\nlog_level: warn\n",
			env:  map[string]string{"HERALD_LISTEN": "127.0.0.1:7600", "HERALD_DATA_DIR": "/env"},
			args: []string{"--listen", "127.0.0.1:7700", "-data-dir=/flag", "--log-format", "json"},
			want: func(c *supervisors.Config) {
				c.Listen = "127.0.0.1:7700"
				c.DataDir = "/flag"
				c.LogLevel = "warn"
				c.LogFormat = "json"
			},
		},
		{
			name: "unset flags do not override",
			yaml: "listen: 0.0.0.0:7500\nhttp: 0.0.0.0:7501\n",
			args: []string{"--log-level", "debug"},
			want: func(c *supervisors.Config) {
				c.Listen = "0.0.0.0:7500"
				c.HTTP = "0.0.0.0:7501"
				c.LogLevel = "debug"
			},
		},
		{
			name: "a flag set to the built-in default still overrides",
			yaml: "listen: 0.0.0.0:7500\n",
			args: []string{"--listen", "127.0.0.1:7400"},
			want: func(*supervisors.Config) {},
		},
		{
			name: "empty values",
			yaml: "tls_cert: \"\"\nhttp: ''\n",
			env:  map[string]string{"HERALD_TLS_KEY": ""},
			want: func(c *supervisors.Config) { c.HTTP = "" },
		},
		{
			name: "TLS pair from flags",
			args: []string{"--tls-cert", "c.pem", "--tls-key", "k.pem"},
			want: func(c *supervisors.Config) { c.TLSCert, c.TLSKey = "c.pem", "k.pem" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadTest(t, tt.yaml, tt.env, tt.args...)
			if err != nil {
				t.Fatalf("loadNodeConfig: %v", err)
			}
			want := supervisors.DefaultConfig()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestLoadNodeConfigYAMLForms(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want func(c *supervisors.Config)
	}{
		{name: "comments only", yaml: "# nothing here\n", want: func(*supervisors.Config) {}},
		{name: "explicit empty document", yaml: "---\n", want: func(*supervisors.Config) {}},
		{name: "null document", yaml: "~\n", want: func(*supervisors.Config) {}},
		{name: "empty section", yaml: "badger:\n# all defaults\n", want: func(*supervisors.Config) {}},
		{
			name: "quoted and flow forms",
			yaml: "{listen: \"[::1]:7400\", publish_window: '128', badger: {num_memtables: 3}}\n",
			want: func(c *supervisors.Config) {
				c.Listen = "[::1]:7400"
				c.PublishWindow = 128
				c.Badger.NumMemtables = 3
			},
		},
		{
			name: "anchors and aliases",
			yaml: "badger:\n  block_cache_size: &cache 8MiB\n  index_cache_size: *cache\n",
			want: func(c *supervisors.Config) {
				c.Badger.BlockCacheSize = 8 << 20
				c.Badger.IndexCacheSize = 8 << 20
			},
		},
		{
			name: "durations and sizes",
			yaml: "handshake_timeout: 1500ms\nreplay_ring_max_bytes: 1GiB\nephemeral_shard_max_bytes: 512kib\nbadger:\n  value_threshold: 2048\n",
			want: func(c *supervisors.Config) {
				c.HandshakeTimeout = 1500 * time.Millisecond
				c.ReplayRingMaxBytes = 1 << 30
				c.EphemeralShardMaxBytes = 512 << 10
				c.Badger.ValueThreshold = 2048
			},
		},
		{
			name: "YAML booleans",
			yaml: "auto_create_streams: false\n",
			want: func(c *supervisors.Config) { c.AutoCreateStreams = false },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadTest(t, tt.yaml, nil)
			if err != nil {
				t.Fatalf("loadNodeConfig: %v", err)
			}
			want := supervisors.DefaultConfig()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// configErrors returns every *configError in err's tree.
func configErrors(err error) []*configError {
	var out []*configError
	var walk func(error)
	walk = func(err error) {
		if ce, ok := err.(*configError); ok {
			out = append(out, ce)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

func TestLoadNodeConfigErrors(t *testing.T) {
	// wantErr is one expected *configError; err is matched with errors.Is
	// when set.
	type wantErr struct {
		kind sourceKind
		name string // for sourceFile: only checked to be non-empty
		line int    // checked when not 0
		key  string
		err  error
	}
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		args []string
		want []wantErr
	}{
		{
			name: "unknown key",
			yaml: "listen: x\npublish_windo: 3\n",
			want: []wantErr{{kind: sourceFile, line: 2, key: "publish_windo", err: errUnknownKey}},
		},
		{
			name: "unknown nested key",
			yaml: "badger:\n  mem_tabel_size: 1\n",
			want: []wantErr{{kind: sourceFile, line: 2, key: "badger.mem_tabel_size", err: errUnknownKey}},
		},
		{
			name: "nested key at the top level",
			yaml: "mem_table_size: 1MiB\n",
			want: []wantErr{{kind: sourceFile, line: 1, key: "mem_table_size", err: errUnknownKey}},
		},
		{
			name: "every error at once",
			yaml: "a: 1\nb: 2\npublish_window: many\n",
			want: []wantErr{
				{kind: sourceFile, line: 1, key: "a", err: errUnknownKey},
				{kind: sourceFile, line: 2, key: "b", err: errUnknownKey},
				{kind: sourceFile, line: 3, key: "publish_window", err: errBadValue},
			},
		},
		{
			name: "duplicate key",
			yaml: "listen: a\nlisten: b\n",
			want: []wantErr{{kind: sourceFile, line: 2, key: "listen", err: errDuplicateKey}},
		},
		{
			name: "list for a scalar",
			yaml: "listen: [a, b]\n",
			want: []wantErr{{kind: sourceFile, line: 1, key: "listen", err: errBadValue}},
		},
		{
			name: "scalar for a section",
			yaml: "badger: 5\n",
			want: []wantErr{{kind: sourceFile, line: 1, key: "badger", err: errBadValue}},
		},
		{
			name: "top level is a list",
			yaml: "- listen\n",
			want: []wantErr{{kind: sourceFile, line: 1, err: errBadValue}},
		},
		{
			name: "key without value",
			yaml: "listen:\n",
			want: []wantErr{{kind: sourceFile, line: 1, key: "listen", err: errBadValue}},
		},
		{
			name: "duration without unit",
			yaml: "idle_timeout: 30\n",
			want: []wantErr{{kind: sourceFile, line: 1, key: "idle_timeout", err: errBadValue}},
		},
		{
			name: "fractional size",
			yaml: "badger:\n  mem_table_size: 1.5MiB\n",
			want: []wantErr{{kind: sourceFile, line: 2, key: "badger.mem_table_size", err: errBadValue}},
		},
		{
			name: "two documents",
			yaml: "listen: a\n---\nlisten: b\n",
			want: []wantErr{{kind: sourceFile, err: errMultipleDocuments}},
		},
		{
			name: "syntax error",
			yaml: "listen: [\n",
			want: []wantErr{{kind: sourceFile}},
		},
		{
			name: "missing file",
			args: []string{"--config", filepath.Join(os.TempDir(), "herald-no-such-file.yaml")},
			want: []wantErr{{kind: sourceFile, err: fs.ErrNotExist}},
		},
		{
			name: "bad environment integer",
			env:  map[string]string{"HERALD_PUBLISH_WINDOW": "lots"},
			want: []wantErr{{kind: sourceEnv, name: "HERALD_PUBLISH_WINDOW", key: "publish_window", err: errBadValue}},
		},
		{
			name: "bad environment values, all reported",
			env: map[string]string{
				"HERALD_IDLE_TIMEOUT":               "30",
				"HERALD_AUTO_CREATE_STREAMS":        "maybe",
				"HERALD_BADGER_VALUE_LOG_FILE_SIZE": "64MB",
			},
			want: []wantErr{
				{kind: sourceEnv, name: "HERALD_AUTO_CREATE_STREAMS", key: "auto_create_streams", err: errBadValue},
				{kind: sourceEnv, name: "HERALD_IDLE_TIMEOUT", key: "idle_timeout", err: errBadValue},
				{kind: sourceEnv, name: "HERALD_BADGER_VALUE_LOG_FILE_SIZE", key: "badger.value_log_file_size", err: errBadValue},
			},
		},
		{
			name: "environment value out of range for uint32",
			env:  map[string]string{"HERALD_MAX_FRAME_BYTES": "4GiB"},
			want: []wantErr{{kind: sourceEnv, name: "HERALD_MAX_FRAME_BYTES", key: "max_frame_bytes", err: errBadValue}},
		},
		{
			name: "negative environment value for uint32",
			env:  map[string]string{"HERALD_MAX_FRAME_BYTES": "-1"},
			want: []wantErr{{kind: sourceEnv, name: "HERALD_MAX_FRAME_BYTES", key: "max_frame_bytes", err: errBadValue}},
		},
		{
			name: "file errors stop before the environment",
			yaml: "nope: 1\n",
			env:  map[string]string{"HERALD_PUBLISH_WINDOW": "lots"},
			want: []wantErr{{kind: sourceFile, key: "nope", err: errUnknownKey}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadTest(t, tt.yaml, tt.env, tt.args...)
			if err == nil {
				t.Fatalf("loadNodeConfig = %+v, want an error", cfg)
			}
			if !reflect.DeepEqual(cfg, supervisors.Config{}) {
				t.Errorf("config on error = %+v, want the zero value", cfg)
			}
			got := configErrors(err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d config errors, want %d: %v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.kind != w.kind || g.key != w.key || (w.line != 0 && g.line != w.line) {
					t.Errorf("error %d = {kind %d line %d key %q}, want {kind %d line %d key %q}: %v",
						i, g.kind, g.line, g.key, w.kind, w.line, w.key, g)
				}
				if w.name != "" && g.name != w.name || g.name == "" {
					t.Errorf("error %d names %q, want %q: %v", i, g.name, w.name, g)
				}
				if w.err != nil && !errors.Is(g, w.err) {
					t.Errorf("error %d = %v, want it to wrap %v", i, g, w.err)
				}
			}
		})
	}
}

func TestLoadNodeConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		args []string
	}{
		{name: "window from the environment", env: map[string]string{"HERALD_PUBLISH_WINDOW": "0"}},
		{name: "log level from a flag", args: []string{"--log-level", "verbose"}},
		{name: "certificate without key", args: []string{"--tls-cert", "c.pem"}},
		{name: "small memtable from the file", yaml: "badger:\n  mem_table_size: 1KiB\n"},
		{name: "empty listen from the file", yaml: "listen: ''\n"},
		{name: "zero timeout", env: map[string]string{"HERALD_HANDSHAKE_TIMEOUT": "0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadTest(t, tt.yaml, tt.env, tt.args...)
			if !errors.Is(err, errInvalidConfig) {
				t.Fatalf("err = %v, want one wrapping errInvalidConfig", err)
			}
			if ce := configErrors(err); len(ce) != 0 {
				t.Errorf("Validate failure carries source errors %v", ce)
			}
		})
	}
}

func TestLoadNodeConfigUnparsed(t *testing.T) {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	nf := registerNodeFlags(fs)
	if _, err := loadNodeConfig(fs, nf, nil); err == nil {
		t.Error("loadNodeConfig before Parse succeeded, want an error")
	}
}

func TestConfigErrorMessage(t *testing.T) {
	tests := []struct {
		err  *configError
		want string
	}{
		{
			&configError{kind: sourceEnv, name: "HERALD_PUBLISH_WINDOW", key: "publish_window", err: errBadValue},
			"HERALD_PUBLISH_WINDOW: invalid value",
		},
		{
			&configError{kind: sourceFile, name: "x.yaml", line: 3, key: "badger.num_memtables", err: errUnknownKey},
			"config file x.yaml: line 3: badger.num_memtables: unknown key",
		},
		{
			&configError{kind: sourceFile, name: "x.yaml", err: errMultipleDocuments},
			"config file x.yaml: more than one YAML document",
		},
		{
			&configError{kind: sourceFlag, name: "listen", key: "listen", err: errBadValue},
			"flag --listen: invalid value",
		},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// valueKinds has one field of every type Config uses.
type valueKinds struct {
	S   string
	B   bool
	I   int
	I64 int64
	U32 uint32
	D   time.Duration
	F   float64
	C   complex128 // unsupported
}

func TestSetValue(t *testing.T) {
	tests := []struct {
		field string
		text  string
		want  any // nil: an error wrapping errBadValue
	}{
		{"S", " any text ", " any text "},
		{"S", "", ""},
		{"B", "true", true},
		{"B", "0", false},
		{"B", " FALSE ", false},
		{"B", "yes", nil},
		{"I", "42", 42},
		{"I", "-7", -7},
		{"I", "+7", 7},
		{"I", "1KiB", 1024},
		{"I", "", nil},
		{"I", "0x10", nil},
		{"I", "1e3", nil},
		{"I", "1_000", nil},
		{"I64", "16MiB", int64(16 << 20)},
		{"I64", "16 mib", int64(16 << 20)},
		{"I64", " 2GiB ", int64(2 << 30)},
		{"I64", "-1KiB", int64(-1024)},
		{"I64", "9223372036854775807", int64(1<<63 - 1)},
		{"I64", "9223372036854775808", nil},
		{"I64", "8589934592GiB", nil},
		{"I64", "16MB", nil},
		{"I64", "MiB", nil},
		{"I64", "1.5GiB", nil},
		{"U32", "4294967295", uint32(1<<32 - 1)},
		{"U32", "3GiB", uint32(3 << 30)},
		{"U32", "4GiB", nil},
		{"U32", "-1", nil},
		{"D", "10s", 10 * time.Second},
		{"D", "1m30s", 90 * time.Second},
		{"D", " 250ms ", 250 * time.Millisecond},
		{"D", "0", time.Duration(0)},
		{"D", "10", nil},
		{"D", "ten seconds", nil},
		{"D", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.field+"="+tt.text, func(t *testing.T) {
			var v valueKinds
			f := reflect.ValueOf(&v).Elem().FieldByName(tt.field)
			err := setValue(f, tt.text)
			if tt.want == nil {
				if !errors.Is(err, errBadValue) {
					t.Fatalf("setValue(%q) = %v, want errBadValue (value %v)", tt.text, err, f.Interface())
				}
				return
			}
			if err != nil {
				t.Fatalf("setValue(%q): %v", tt.text, err)
			}
			if got := f.Interface(); got != tt.want {
				t.Errorf("setValue(%q) set %v (%T), want %v (%T)", tt.text, got, got, tt.want, tt.want)
			}
		})
	}
	var v valueKinds
	if err := setValue(reflect.ValueOf(&v).Elem().FieldByName("C"), "1"); !errors.Is(err, errUnsupportedType) {
		t.Errorf("setValue on a complex128 = %v, want errUnsupportedType", err)
	}
	if err := setValue(reflect.ValueOf(&v).Elem().FieldByName("F"), "0.25"); err != nil || v.F != 0.25 {
		t.Errorf("setValue on a float64 = %v, %v", err, v.F)
	}
	if err := setValue(reflect.ValueOf(&v).Elem().FieldByName("F"), "a quarter"); !errors.Is(err, errBadValue) {
		t.Errorf("setValue of a bad float64 = %v, want errBadValue", err)
	}
}

// TestConfigSchema checks the walk of supervisors.Config: keys and
// environment variables are unique and well formed, every field's default
// survives formatValue and setValue (so every field type is supported),
// and the flags name real keys.
func TestConfigSchema(t *testing.T) {
	defaults := supervisors.DefaultConfig()
	s := newConfigSchema(&defaults)
	var zero supervisors.Config
	z := newConfigSchema(&zero)
	if len(s.fields) == 0 || len(s.fields) != len(z.fields) {
		t.Fatalf("schema has %d fields, zero schema %d", len(s.fields), len(z.fields))
	}
	envs := make(map[string]bool)
	for i, f := range s.fields {
		if envs[f.env] {
			t.Errorf("environment variable %s is used twice", f.env)
		}
		envs[f.env] = true
		if want := "HERALD_" + strings.ToUpper(strings.ReplaceAll(f.key, ".", "_")); f.env != want {
			t.Errorf("key %s has environment variable %s, want %s", f.key, f.env, want)
		}
		if err := setValue(z.fields[i].value, formatValue(f.value)); err != nil {
			t.Errorf("key %s: default %q does not parse back: %v", f.key, formatValue(f.value), err)
		}
	}
	if !reflect.DeepEqual(zero, defaults) {
		t.Errorf("round trip of the defaults =\n%+v\nwant\n%+v", zero, defaults)
	}
	if f := s.byKey["badger.mem_table_size"]; f == nil || f.env != "HERALD_BADGER_MEM_TABLE_SIZE" {
		t.Errorf("badger.mem_table_size = %+v, want HERALD_BADGER_MEM_TABLE_SIZE", f)
	}
	if !s.sections["badger"] {
		t.Error("badger is not a section")
	}

	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	registerNodeFlags(fs) // panics on a flag naming an unknown key
	for _, name := range []string{"config", "data-dir", "listen", "http", "tls-cert", "tls-key", "log-level", "log-format"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s is not registered", name)
		}
	}
	for _, f := range nodeFlagKeys {
		if got, want := fs.Lookup(f.flag).DefValue, formatValue(s.byKey[f.key].value); got != want {
			t.Errorf("flag --%s shows default %q, want %q", f.flag, got, want)
		}
	}
}

func FuzzLoadConfigFile(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("listen: 127.0.0.1:7400\npublish_window: 256\nidle_timeout: 30s\n"))
	f.Add([]byte("badger:\n  mem_table_size: 16MiB\n  num_compactors: 2\n"))
	f.Add([]byte("badger: &b {num_memtables: 2}\nx: *b\n"))
	f.Add([]byte("max_frame_bytes: 4GiB\nauto_create_streams: maybe\n"))
	f.Add([]byte("- a\n- b\n---\nc: d\n"))
	f.Add([]byte("{listen: [1, {2: 3}], badger: ~, <<: {a: b}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := supervisors.DefaultConfig()
		err := newConfigSchema(&cfg).applyYAML("fuzz.yaml", data)
		if err == nil {
			// Applying the same file twice changes nothing more.
			again := cfg
			if err := newConfigSchema(&again).applyYAML("fuzz.yaml", data); err != nil {
				t.Fatalf("second apply failed: %v", err)
			}
			if !reflect.DeepEqual(again, cfg) {
				t.Fatalf("second apply changed the config:\n%+v\n%+v", cfg, again)
			}
			return
		}
		ce := configErrors(err)
		if len(ce) == 0 {
			t.Fatalf("error %v is not a *configError", err)
		}
		for _, e := range ce {
			if e.kind != sourceFile || e.name != "fuzz.yaml" {
				t.Fatalf("error %v has kind %d, name %q", e, e.kind, e.name)
			}
		}
	})
}
