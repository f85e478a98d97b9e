package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// runCLI runs `herald args...` in this process with an empty stdin and
// returns the exit status, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// walk calls f for every command of the tree under c, c included.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// Every command's --help (and -h, and `herald help CMD`) exits 0 and prints
// its usage to stdout; every command but the completion scripts' shows
// examples.
func TestHelpEverywhere(t *testing.T) {
	root := newRootCmd(processEnv(strings.NewReader(""), io.Discard, io.Discard))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var paths [][]string
	walk(root, func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		paths = append(paths, path)
	})
	if len(paths) < 35 {
		t.Fatalf("walked %d commands, want the whole tree", len(paths))
	}
	for _, path := range paths {
		name := strings.Join(append([]string{"herald"}, path...), " ")
		for _, flag := range []string{"--help", "-h"} {
			code, out, errOut := runCLI(t, append(path, flag)...)
			if code != 0 || out == "" {
				t.Errorf("%s %s: exit %d, stdout %d bytes, stderr %q", name, flag, code, len(out), errOut)
				continue
			}
			if !strings.Contains(out, "Usage:") {
				t.Errorf("%s %s prints no usage:\n%s", name, flag, out)
			}
			if !strings.Contains(out, "Example") && (len(path) == 0 || path[0] != "completion") {
				t.Errorf("%s %s shows no examples:\n%s", name, flag, out)
			}
		}
		if code, out, _ := runCLI(t, append([]string{"help"}, path...)...); code != 0 || out == "" {
			t.Errorf("herald help %s: exit %d", strings.Join(path, " "), code)
		}
	}
}

// A usage error is the line that is wrong and a hint, not the flags.
func TestUsageErrorIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pub", "orders", "--batch", "0"}, "herald pub: --batch must be at least 1"},
		{[]string{"pub", "orders", "--bogus"}, "herald pub: unknown flag: --bogus"},
		{[]string{"stream", "create", "orders", "--retention-age", "soon"}, `herald stream create: invalid argument "soon" for "--retention-age" flag`},
		{[]string{"stream"}, "herald stream: missing subcommand: create, delete, describe, edit or list"},
		{[]string{"stream", "edit", "orders"}, "herald stream edit: --replicas must be between 1 and 255"},
		{[]string{"stream", "craete", "orders"}, `herald stream: unknown command "craete"`},
		{[]string{"sub"}, "herald sub: missing STREAM"},
		{[]string{"group", "poll", "orders", "--shard", "0"}, "herald group poll: --group is required"},
		{[]string{"nonsense"}, `herald: unknown command "nonsense"`},
		{[]string{"bench", "publish", "--nope"}, "herald bench publish: flag provided but not defined: -nope"},
		{[]string{"node", "--nope"}, "herald node: flag provided but not defined: -nope"},
		{[]string{"token", "new"}, "herald token new: --name and --tenant are required"},
		{[]string{"version", "-o", "xml"}, `herald version: --output "xml": want table, json or yaml`},
		{[]string{"cluster", "drain"}, "herald cluster drain: want exactly one NODE (a node id), got 0 arguments"},
		{[]string{"cluster", "undrain", "two"}, `herald cluster undrain: NODE "two": want a node id`},
		{[]string{"cluster", "bogus"}, `herald cluster: unknown command "bogus": want add, drain, remove, status or undrain`},
		{[]string{"cluster", "add", "4"}, `herald cluster add: "4": want ID=ADDR`},
		{[]string{"cluster", "remove"}, "herald cluster remove: want exactly one NODE"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		cmd := strings.SplitN(tc.want, ":", 2)[0]
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], tc.want) || lines[1] != "Run '"+cmd+" --help' for usage." {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q plus a hint", tc.args, code, out, errOut, tc.want)
		}
	}
	// A bare herald prints the help on stderr and exits 2, as before.
	if code, out, errOut := runCLI(t); code != 2 || out != "" || !strings.Contains(errOut, "Client commands:") {
		t.Errorf("herald: exit %d, %q %q", code, out, errOut)
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := runCLI(t, "completion", shell)
		if code != 0 || !strings.Contains(out, "herald") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes, %q", shell, code, len(out), errOut)
		}
	}
	// The dynamic completions: --output's values.
	code, out, _ := runCLI(t, "__complete", "stream", "list", "--output", "")
	if code != 0 || !strings.Contains(out, "json\n") || !strings.Contains(out, "yaml\n") {
		t.Errorf("completing --output: %d %q", code, out)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "herald ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, again, _ := runCLI(t, "--version"); code != 0 || again != out {
		t.Fatalf("--version: %d %q, want %q", code, again, out)
	}
	code, out, _ = runCLI(t, "version", "-o", "json")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.GoVersion != runtime.Version() || v.Version == "" {
		t.Fatalf("version -o json: %d %q %v", code, out, err)
	}
	code, out, _ = runCLI(t, "version", "-o", "yaml")
	var y map[string]any
	if err := yaml.Unmarshal([]byte(out), &y); code != 0 || err != nil || y["go_version"] != runtime.Version() {
		t.Fatalf("version -o yaml: %d %q %v", code, out, err)
	}
	if got := versionLine(buildVersion{Version: "v1.2.0", Revision: "0123456789abcdef", Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64"}); got !=
		"herald v1.2.0 revision 0123456789ab (modified) go1.26.8 linux/amd64" {
		t.Fatalf("versionLine: %q", got)
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"7d", 7 * day}, {"1d12h", 36 * time.Hour}, {"1.5d", 36 * time.Hour}, {"72h", 72 * time.Hour},
		{"90s", 90 * time.Second}, {" 1m30s ", 90 * time.Second}, {"0", 0}, {"-1d", -day}, {"-1d12h", -36 * time.Hour},
	} {
		if got, err := parseDuration(tc.in); err != nil || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "d", "7", "7days", "1d-1h", "xd", "1e3d", "1d 2h", "1h1d", "999999999999d"} {
		if _, err := parseDuration(bad); !errors.Is(err, errBadValue) {
			t.Errorf("parseDuration(%q) = %v, want errBadValue", bad, err)
		}
	}
	for d, want := range map[time.Duration]string{7 * day: "7d", 36 * time.Hour: "36h0m0s", 0: "0s", 90 * time.Minute: "1h30m0s"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{10 << 30: "10GiB", 512 << 20: "512MiB", 4096: "4KiB", 1000: "1000", 0: "0", 1536: "1536"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := parseSize(formatSize(n)); err != nil || back != n {
			t.Errorf("parseSize(formatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

// The units of the config file work in the flags, and docs/streams.md's
// example parses.
func TestStreamCreateUnits(t *testing.T) {
	cmd, err := parseStreamCmd([]string{"create", "acme/shop/orders", "--shards", "4", "--routing", "jump",
		"--retention-age", "168h", "--retention-bytes", "10GiB", "--queue-max-bytes", "64MiB"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.config.RetentionAge != 7*day || cmd.config.RetentionBytes != 10<<30 || cmd.config.QueueMaxBytes != 64<<20 {
		t.Fatalf("config %+v", cmd.config)
	}
	cmd, err = parseStreamCmd([]string{"create", "orders", "--retention-age", "7d"}, io.Discard, env(nil))
	if err != nil || cmd.config.RetentionAge != 7*day {
		t.Fatalf("--retention-age 7d: %+v %v", cmd, err)
	}
	if _, err := parseStreamCmd([]string{"create", "orders", "--retention-bytes", "10GB"}, io.Discard, env(nil)); !errors.Is(err, errBadFlag) {
		t.Fatalf("--retention-bytes 10GB: %v, want a flag error", err)
	}
	if _, err := parsePubCmd([]string{"orders", "--count", "3", "--size", "1KiB"}, io.Discard, env(nil)); err != nil {
		t.Fatalf("--size 1KiB: %v", err)
	}
}

func TestOutputFlagsAndYAML(t *testing.T) {
	cmd, err := parseSubCmd([]string{"orders", "--json"}, io.Discard, env(nil))
	if err != nil || !cmd.json || cmd.yaml {
		t.Fatalf("--json: %+v %v", cmd, err)
	}
	cmd, err = parseSubCmd([]string{"orders", "-o", "yaml"}, io.Discard, env(nil))
	if err != nil || cmd.json || !cmd.yaml {
		t.Fatalf("-o yaml: %+v %v", cmd, err)
	}
	if _, err := parseSubCmd([]string{"orders", "-o", "yaml", "--json"}, io.Discard, env(nil)); !errors.Is(err, errUsage) {
		t.Fatalf("-o yaml --json: %v", err)
	}
	if _, err := parseSubCmd([]string{"orders", "-o", "json", "--json"}, io.Discard, env(nil)); err != nil {
		t.Fatalf("-o json --json: %v", err)
	}
	// YAML keeps the JSON keys in order and quotes what would read as
	// another type.
	var buf bytes.Buffer
	v := struct {
		B  string   `json:"b"`
		A  int      `json:"a"`
		N  string   `json:"n"`
		L  []uint64 `json:"l"`
		No *string  `json:"no"`
	}{B: "text", A: 3, N: "12", L: []uint64{1, 2}}
	if err := writeYAMLDoc(&buf, v, true); err != nil {
		t.Fatal(err)
	}
	if want := "---\nb: text\na: 3\nn: \"12\"\nl:\n  - 1\n  - 2\nno: null\n"; buf.String() != want {
		t.Fatalf("yaml:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestRenderProgress(t *testing.T) {
	got := renderProgress(50, 200, 5e6, 2*time.Second, 20)
	if want := "[#####...............]  25.0%  50/200 records  25 rec/s  2.5 MB/s  ETA 6s  "; got != want {
		t.Fatalf("progress %q\nwant     %q", got, want)
	}
	if got := renderProgress(200, 200, 0, time.Second, 4); !strings.HasPrefix(got, "[####] 100.0%") || !strings.Contains(got, "ETA 0s") {
		t.Fatalf("done: %q", got)
	}
	if got := renderProgress(0, 10, 0, 0, 4); !strings.Contains(got, "ETA --") {
		t.Fatalf("start: %q", got)
	}
	// Drawn on the terminal's writer, then ended with a newline.
	var buf syncBuffer
	bar := startProgress(&buf, 10, time.Millisecond)
	bar.add(10, 100)
	bar.finish()
	if s := buf.String(); !strings.HasSuffix(s, "\n") || !strings.Contains(s, "10/10 records") {
		t.Fatalf("bar wrote %q", s)
	}
}

func TestPubLinesAndRaw(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // over bufio.Scanner's default token size
	cmd := &pubCmd{}
	next := cmd.source(strings.NewReader("a\r\n" + long + "\nlast"))
	var got []string
	for {
		p, ok, err := next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, string(p))
	}
	if len(got) != 3 || got[0] != "a" || got[1] != long || got[2] != "last" {
		t.Fatalf("lines: %d, first %q", len(got), got[0])
	}
	next = lineSource(strings.NewReader("ok\n"+strings.Repeat("y", 1000)+"\n"), 100)
	if _, ok, err := next(); !ok || err != nil {
		t.Fatalf("short line: %v %v", ok, err)
	}
	if _, _, err := next(); err == nil || !strings.Contains(err.Error(), "line 2 is longer than the frame limit") {
		t.Fatalf("long line: %v", err)
	}
	bin := []byte{0, 1, '\n', 0xff, '\r', '\n', 2}
	cmd = &pubCmd{raw: true}
	next = cmd.source(bytes.NewReader(bin))
	if p, ok, err := next(); !ok || err != nil || !bytes.Equal(p, bin) {
		t.Fatalf("raw: %q %v %v", p, ok, err)
	}
	if _, ok, _ := next(); ok {
		t.Fatal("raw gives one record")
	}
	for _, args := range [][]string{{"orders", "m", "--raw"}, {"orders", "--raw", "--count", "3"}, {"orders", "-H", "novalue"}, {"orders", "-H", "=v"}} {
		if _, err := parsePubCmd(args, io.Discard, env(nil)); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	p, err := parsePubCmd([]string{"orders", "-H", "a=1", "--header", "b=x=y", "m"}, io.Discard, env(nil))
	if err != nil || len(p.headers) != 2 || p.headers[1].Key != "b" || string(p.headers[1].Value) != "x=y" {
		t.Fatalf("headers: %+v %v", p, err)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The contexts file: add, use, ls and rm, its permissions, and that a
// token is never printed.
func TestContextCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cfg")
	t.Setenv("HERALD_CONFIG_DIR", dir)
	t.Setenv("HERALD_CONTEXT", "")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("not checked here"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "context", "ls"); code != 0 || !strings.HasPrefix(out, "No contexts") {
		t.Fatalf("ls of nothing: %d %q %q", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "context", "add", "dev", "--server", "127.0.0.1:7400", "--ca", ca)
	if code != 0 || !strings.Contains(out, "it is the current context") {
		t.Fatalf("add dev: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = runCLI(t, "context", "add", "prod", "-s", "a:7400,b:7400", "--token", "s3cr3t", "--tenant", "acme"); code != 0 || strings.Contains(out, "current") {
		t.Fatalf("add prod: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = runCLI(t, "context", "add", "prod", "--server", "c:7400"); code != 2 || !strings.Contains(errOut, "--force") {
		t.Fatalf("add prod again: %d %q", code, errOut)
	}
	if code, _, errOut = runCLI(t, "context", "add", "bad", "--ca", "/no/such/ca.pem"); code != 2 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("add with a missing CA: %d %q", code, errOut)
	}
	st, err := os.Stat(filepath.Join(dir, contextsFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("contexts file: %v, mode %v", err, st.Mode())
	}
	code, out, _ = runCLI(t, "context", "ls")
	if code != 0 || strings.Contains(out, "s3cr3t") || !strings.Contains(out, "*        dev") || !strings.Contains(out, "acme") {
		t.Fatalf("ls:\n%s", out)
	}
	code, out, _ = runCLI(t, "context", "ls", "-o", "json")
	var list []contextLsJSON
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 || !list[0].Current || list[0].CA != ca ||
		!list[1].TokenSet || strings.Contains(out, "s3cr3t") {
		t.Fatalf("ls -o json: %d %q %v", code, out, err)
	}
	// A stream name follows the context's tenant; flags and environment
	// beat the context.
	parse := func(e map[string]string, args ...string) *subCmd {
		t.Helper()
		e["HERALD_CONFIG_DIR"] = dir
		cmd, err := parseSubCmd(args, io.Discard, env(e))
		if err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	if cmd := parse(map[string]string{}, "orders"); cmd.name.String() != "default/default/orders" || cmd.conn.server != "127.0.0.1:7400" || cmd.conn.ca != ca {
		t.Fatalf("with dev: %v %+v", cmd.name, cmd.conn)
	}
	if code, out, _ = runCLI(t, "context", "use", "prod"); code != 0 || out != "using context prod\n" {
		t.Fatalf("use prod: %d %q", code, out)
	}
	cmd := parse(map[string]string{}, "orders")
	if cmd.name.String() != "acme/default/orders" || cmd.conn.server != "a:7400,b:7400" || cmd.conn.ctxToken != "s3cr3t" {
		t.Fatalf("with prod: %v %+v", cmd.name, cmd.conn)
	}
	if cmd := parse(map[string]string{}, "shop/orders"); cmd.name.String() != "acme/shop/orders" {
		t.Fatalf("two parts: %v", cmd.name)
	}
	if cmd := parse(map[string]string{}, "globex/shop/orders"); cmd.name.String() != "globex/shop/orders" {
		t.Fatalf("three parts: %v", cmd.name)
	}
	if cmd := parse(map[string]string{"HERALD_SERVER": "env:1"}, "orders"); cmd.conn.server != "env:1" {
		t.Fatalf("env over context: %+v", cmd.conn)
	}
	if cmd := parse(map[string]string{"HERALD_SERVER": "env:1"}, "orders", "--server", "flag:2"); cmd.conn.server != "flag:2" {
		t.Fatalf("flag over env: %+v", cmd.conn)
	}
	if cmd := parse(map[string]string{}, "orders", "--context", "dev"); cmd.name.Tenant != "default" || cmd.conn.server != "127.0.0.1:7400" {
		t.Fatalf("--context dev: %v %+v", cmd.name, cmd.conn)
	}
	if cmd := parse(map[string]string{"HERALD_CONTEXT": "dev"}, "orders"); cmd.conn.server != "127.0.0.1:7400" {
		t.Fatalf("HERALD_CONTEXT=dev: %+v", cmd.conn)
	}
	if _, err := parseSubCmd([]string{"orders", "--context", "nope"}, io.Discard, env(map[string]string{"HERALD_CONFIG_DIR": dir})); !errors.Is(err, errUsage) {
		t.Fatalf("--context nope: %v", err)
	}
	if code, out, _ = runCLI(t, "context", "rm", "prod"); code != 0 || out != "removed context prod\n" {
		t.Fatalf("rm prod: %d %q", code, out)
	}
	if cmd := parse(map[string]string{}, "orders"); cmd.conn.context != nil {
		t.Fatalf("the current context was removed, but %+v is used", cmd.conn.context)
	}
	if code, _, _ = runCLI(t, "context", "rm", "prod"); code != 2 {
		t.Fatalf("rm of a removed context: %d", code)
	}
	if code, _, _ = runCLI(t, "context", "use", "--none"); code != 0 {
		t.Fatalf("use --none: %d", code)
	}
}

// Every command that prints a result takes --output and --json; those
// that print only a confirmation sentence (ack, nack, redrive, discard,
// context add/use/rm) and the ones that run something (node, bench,
// completion) do not.
func TestOutputFlagOnPrintingCommands(t *testing.T) {
	root := newRootCmd(processEnv(strings.NewReader(""), io.Discard, io.Discard))
	want := map[string]bool{}
	for _, p := range []string{"stream create", "stream describe", "stream edit", "stream list", "stream delete", "pub", "sub", "read",
		"group poll", "group dead-letters", "group describe", "group list", "group seek", "group delete", "context ls", "version", "token new",
		"cluster status", "cluster drain", "cluster undrain", "cluster add", "cluster remove"} {
		want["herald "+p] = true
	}
	walk(root, func(c *cobra.Command) {
		has := c.Flags().Lookup("output") != nil && c.Flags().Lookup("json") != nil
		if has != want[c.CommandPath()] {
			t.Errorf("%s: --output and --json %v, want %v", c.CommandPath(), has, want[c.CommandPath()])
		}
		delete(want, c.CommandPath())
	})
	if len(want) > 0 {
		t.Errorf("commands not in the tree: %v", want)
	}
}
