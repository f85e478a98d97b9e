package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

// TestReadmeQuickstart runs every shell command of README.md's quickstart,
// as written, against a real node, so that the README cannot drift from
// what the CLI does (issue 15).
//
// What a command is (parseQuickstart):
//   - The quickstart is README.md from its "## Quickstart" heading to the
//     next heading of level 1 or 2.
//   - Its commands are in the fenced code blocks (```) whose info string is
//     sh, bash, shell or console; other blocks (go, yaml, none) are not
//     run.
//   - In sh, bash and shell blocks every line is a command, except blank
//     lines and lines that are only a comment; a line ending in a backslash
//     goes on on the next line.
//   - In console blocks a line starting with "$ " is a command, and the
//     lines after it, up to the next "$ " line, are its expected standard
//     output, compared exactly (trailing blanks of each line left out); a
//     command with no line after it has no expected output.
//   - readmeStatedOutputs holds the outputs the quickstart's prose states
//     for commands of sh blocks; each must still be a quickstart command.
//
// How a command is run (runQuickstart), in README order, in one working
// directory, as a user in one directory with a node started there would:
//   - The directory holds bin/herald (this test's build), so that both
//     ./bin/herald and herald (bin/ is first on PATH) run it. No HERALD_*
//     variable of the test's environment reaches the commands, and
//     HERALD_CONFIG_DIR is an empty directory: no contexts.
//   - `make run` is not run: it would build and then block serving. The
//     test checks that the Makefile's run target still is `./$(BIN) node`
//     with BIN bin/herald, and starts `./bin/herald node` in the directory
//     in the background (data in ./data, generated certificates in
//     ./data/tls), waiting for /readyz. The node listens on free ports
//     instead of its defaults 127.0.0.1:7400 and 127.0.0.1:7401, which
//     another node on the machine may hold: the test checks that those are
//     the defaults (the node's and the CLI's), gives the commands
//     HERALD_SERVER, the node's address, and rewrites the default HTTP
//     address in commands (curl) to the node's. Nothing else is given: the
//     CLI finds ./data/tls/ca.pem by itself, as the README says.
//   - Any other command runs as `bash -o pipefail -c COMMAND` and must exit
//     0 within readmeCommandTimeout, print nothing on standard error and,
//     when it asks for --json or -o json, print JSON values only.
//   - A command whose comment says it runs "until Ctrl-C" runs in the
//     background. It must be a `herald sub STREAM ...`; the test publishes
//     probe records to STREAM, one at a time, until the command has printed
//     one, checks that it printed only probe records and is still running,
//     and then interrupts it (SIGINT, as Ctrl-C does): it must exit 0.
//   - In the end the node is stopped with SIGINT (Ctrl-C) and must exit 0,
//     as the quickstart says.
func TestReadmeQuickstart(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := parseQuickstart(string(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) < 2 || cmds[0].text != "make run" {
		t.Fatalf("the quickstart's commands are %q: want `make run` first and some to run against the node", cmds)
	}
	for c, out := range readmeStatedOutputs {
		i := slices.IndexFunc(cmds, func(rc readmeCommand) bool { return rc.text == c })
		if i < 0 {
			t.Fatalf("readmeStatedOutputs has the output of %q, which is no longer a quickstart command: update it with the README's prose", c)
		}
		if cmds[i].output == nil {
			cmds[i].output = &out
		}
	}
	checkMakeRun(t)
	checkDefaultAddresses(t)
	runQuickstart(t, cmds)
}

// readmeStatedOutputs are the outputs the quickstart's prose states for its
// sh-block commands ("`pub` prints ... (`0 0`, `0 1`); `sub` prints ...
// (`0 0 hello`, `0 1 world`)"), by command.
var readmeStatedOutputs = map[string]string{
	`./bin/herald pub orders "hello" "world"`: "0 0\n0 1\n",
	`./bin/herald sub orders --count 2`:       "0 0 hello\n0 1 world\n",
}

// readmeCommandTimeout bounds each quickstart command that ends by itself.
const readmeCommandTimeout = 30 * time.Second

// readmeCommand is one shell command of the quickstart.
type readmeCommand struct {
	// line is the command's first line in README.md (from 1).
	line int
	// text is the command as written, continuation lines joined.
	text string
	// comment is the command's trailing comment, without "#" ("" if none).
	comment string
	// output is the standard output the README shows for it, nil if none.
	output *string
}

func (c readmeCommand) String() string { return c.text }

// shellInfoStrings are the info strings of the fenced blocks that hold
// commands.
var shellInfoStrings = []string{"sh", "bash", "shell", "console"}

// parseQuickstart returns the commands of md's quickstart section, by the
// rules of TestReadmeQuickstart.
func parseQuickstart(md string) ([]readmeCommand, error) {
	lines := strings.Split(md, "\n")
	var cmds []readmeCommand
	inSection, found := false, false
	fence := "" // the info string of the open fenced block, "-" for one without
	var pending *readmeCommand
	for i, raw := range lines {
		l := strings.TrimRight(raw, " \t\r")
		if fence == "" {
			if strings.HasPrefix(l, "# ") || strings.HasPrefix(l, "## ") {
				inSection = strings.EqualFold(strings.TrimSpace(strings.TrimLeft(l, "#")), "Quickstart")
				found = found || inSection
				continue
			}
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "```"); ok {
				fence = "-"
				if f := strings.Fields(rest); len(f) > 0 {
					fence = strings.ToLower(f[0])
				}
			}
			continue
		}
		if strings.TrimSpace(l) == "```" {
			if pending != nil {
				return nil, fmt.Errorf("README.md:%d: the command %q ends in a backslash at the end of its block", pending.line, pending.text)
			}
			fence = ""
			continue
		}
		if !inSection || !slices.Contains(shellInfoStrings, fence) {
			continue
		}
		if fence == "console" {
			if text, ok := strings.CutPrefix(l, "$ "); ok {
				cmds = append(cmds, readmeCommand{line: i + 1, text: strings.TrimSpace(text), output: new(string)})
			} else if len(cmds) > 0 && cmds[len(cmds)-1].output != nil {
				*cmds[len(cmds)-1].output += l + "\n"
			}
			continue
		}
		if pending != nil {
			pending.text += " " + strings.TrimSpace(l)
		} else {
			t := strings.TrimSpace(l)
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			pending = &readmeCommand{line: i + 1, text: t}
		}
		if body, ok := strings.CutSuffix(pending.text, `\`); ok {
			pending.text = strings.TrimSpace(body)
			continue
		}
		cmds = append(cmds, *pending)
		pending = nil
	}
	if !found {
		return nil, errors.New("README.md has no \"## Quickstart\" section")
	}
	if fence != "" {
		return nil, errors.New("README.md: a fenced block is not closed")
	}
	for i := range cmds {
		cmds[i].text, cmds[i].comment = splitShellComment(cmds[i].text)
		if o := cmds[i].output; o != nil && *o == "" {
			cmds[i].output = nil // a console command shown without output
		}
	}
	return cmds, nil
}

// splitShellComment splits a command line into the command and its
// trailing comment: from the first "#" that starts a word outside quotes.
func splitShellComment(s string) (cmd, comment string) {
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
		}
	}
	return strings.TrimSpace(s), ""
}

// checkMakeRun checks that `make run` still starts the node as the test
// does: `./$(BIN) node` with BIN bin/herald.
func checkMakeRun(t *testing.T) {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	bin := regexp.MustCompile(`(?m)^BIN\s*:?=\s*(\S+)\s*$`).FindSubmatch(mk)
	recipe := regexp.MustCompile(`(?m)^run:.*\n((?:\t.*\n)+)`).FindSubmatch(mk)
	if bin == nil || string(bin[1]) != "bin/herald" || recipe == nil || strings.TrimSpace(string(recipe[1])) != "./$(BIN) node" {
		t.Fatalf("the Makefile's run target is no longer `./$(BIN) node` with BIN bin/herald (BIN %q, recipe %q): "+
			"TestReadmeQuickstart starts the node as make run does, so teach it the new recipe", bin, recipe)
	}
}

// checkDefaultAddresses checks that the addresses the test replaces are
// the defaults of the node and the CLI, as the README says.
func checkDefaultAddresses(t *testing.T) {
	t.Helper()
	def := supervisors.DefaultConfig()
	for _, d := range []struct{ what, got, want string }{
		{"the node's listen", def.Listen, "127.0.0.1:7400"},
		{"the node's http", def.HTTP, "127.0.0.1:7401"},
		{"the node's data_dir", def.DataDir, "./data"},
		{"the CLI's server", defaultServer, "127.0.0.1:7400"},
		{"the CLI's CA", devCAPath, "data/tls/ca.pem"},
	} {
		if d.got != d.want {
			t.Fatalf("%s is %s by default, the README says %s: update the README and this test", d.what, d.got, d.want)
		}
	}
}

// quickstartRun is the working directory, node and environment the
// quickstart's commands run in.
type quickstartRun struct {
	t *testing.T
	// dir is the working directory.
	dir string
	// env is the commands' environment.
	env []string
	// addr and http are the node's addresses; replace rewrites the default
	// ones in a command.
	addr, http string
	replace    *strings.Replacer
	// node is the node process, nil until `make run`.
	node *cliProcess
	// admin publishes the probes of long-running commands.
	admin *client.Client
}

// runQuickstart runs cmds by the rules of TestReadmeQuickstart.
func runQuickstart(t *testing.T, cmds []readmeCommand) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(heraldBinary(t), filepath.Join(dir, "bin", "herald")); err != nil {
		t.Fatal(err)
	}
	addr, httpAddr := freePorts(t)
	def := supervisors.DefaultConfig()
	r := &quickstartRun{t: t, dir: dir, addr: addr, http: httpAddr,
		replace: strings.NewReplacer(def.HTTP, httpAddr, def.Listen, addr)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") && !strings.HasPrefix(kv, "PATH=") {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "PATH="+filepath.Join(dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HERALD_CONFIG_DIR="+t.TempDir())
	for _, c := range cmds {
		switch {
		case c.text == "make run":
			r.makeRun(c)
		case r.node == nil:
			t.Fatalf("README.md:%d: %q runs before the quickstart's `make run`", c.line, c.text)
		case strings.HasPrefix(c.text, "make "):
			t.Fatalf("README.md:%d: %q: the test knows how to run only `make run`", c.line, c.text)
		case strings.Contains(c.comment, "until Ctrl-C"):
			r.runUntilInterrupt(c)
		default:
			r.run(c)
		}
	}
	if r.node == nil {
		t.Fatal("the quickstart has no `make run`")
	}
	if err := r.node.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.node.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not exit within 30 s of SIGINT")
	}
	if code := r.node.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the node exited with %v after SIGINT", r.node.cmd.ProcessState)
	}
	t.Logf("ran %d quickstart commands", len(cmds))
}

// makeRun starts the node as `make run` does and waits until it is ready.
func (r *quickstartRun) makeRun(c readmeCommand) {
	t := r.t
	t.Helper()
	if r.node != nil {
		t.Fatalf("README.md:%d: a second `make run`", c.line)
	}
	p := &cliProcess{what: "the node (make run)", out: newLineCollector(), errOut: newLineCollector(), done: make(chan struct{})}
	p.cmd = exec.Command("./bin/herald", "node")
	p.cmd.Dir = r.dir
	p.cmd.Env = append(slices.Clip(r.env), "HERALD_LISTEN="+r.addr, "HERALD_HTTP="+r.http)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("node log:\n%s", p.stderr())
		}
	})
	r.node = p
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + r.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if !p.running() {
			t.Fatalf("README.md:%d: the node exited during start: %v", c.line, p.cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			t.Fatalf("README.md:%d: the node was not ready within 60 s", c.line)
		}
		time.Sleep(20 * time.Millisecond) // polling a process's start, not asserting time
	}
	ca := filepath.Join(r.dir, "data", "tls", "ca.pem")
	if _, err := os.Stat(ca); err != nil {
		t.Fatalf("README.md:%d: the node wrote no CA to ./data/tls/ca.pem: %v", c.line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := client.Dial(ctx, r.addr, client.WithCAFile(ca))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	r.admin = admin
	r.env = append(r.env, "HERALD_SERVER="+r.addr)
}

// command returns the exec.Cmd of c: bash in the working directory, in a
// process group of its own (so that a signal reaches what bash started).
func (r *quickstartRun) command(ctx context.Context, c readmeCommand) (*exec.Cmd, string) {
	text := r.replace.Replace(c.text)
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", text)
	cmd.Dir = r.dir
	cmd.Env = r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd, text
}

// run runs a command that ends by itself and checks what it printed.
func (r *quickstartRun) run(c readmeCommand) {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readmeCommandTimeout)
	defer cancel()
	cmd, text := r.command(ctx, c)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("README.md:%d: %q did not end within %v; stdout %q, stderr %q", c.line, text, readmeCommandTimeout, stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("README.md:%d: %q: %v\nstdout:\n%s\nstderr:\n%s", c.line, text, err, stdout.String(), stderr.String())
	}
	t.Logf("README.md:%d: %s (%v)", c.line, text, time.Since(start).Round(time.Millisecond))
	r.checkOutput(c, text, stdout.String(), stderr.String())
}

// checkOutput checks a command's output by the rules of
// TestReadmeQuickstart.
func (r *quickstartRun) checkOutput(c readmeCommand, text, stdout, stderr string) {
	t := r.t
	t.Helper()
	if stderr != "" {
		t.Errorf("README.md:%d: %q printed on standard error:\n%s", c.line, text, stderr)
	}
	if c.output != nil && trimLines(stdout) != trimLines(*c.output) {
		t.Errorf("README.md:%d: %q printed\n%s\nthe README shows\n%s", c.line, text, stdout, *c.output)
	}
	if f := strings.Fields(c.text); slices.Contains(f, "--json") || strings.Contains(c.text, "-o json") || strings.Contains(c.text, "--output json") {
		dec := json.NewDecoder(strings.NewReader(stdout))
		n := 0
		for {
			var v any
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("README.md:%d: %q asks for JSON, and printed\n%s(%v)", c.line, text, stdout, err)
				break
			}
			n++
		}
		if n == 0 {
			t.Errorf("README.md:%d: %q asks for JSON, and printed none", c.line, text)
		}
	}
}

// trimLines drops the trailing blanks of each line of s.
func trimLines(s string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		b.WriteString(strings.TrimRight(sc.Text(), " \t\r") + "\n")
	}
	return b.String()
}

// probeLine is a line of `herald sub`'s text output that prints a probe
// record.
var probeLine = regexp.MustCompile(`^\d+ \d+ readme-probe-\d+$`)

// runUntilInterrupt runs a command that runs until Ctrl-C: a herald sub,
// which must print the probe records published meanwhile, keep running,
// and exit 0 on SIGINT.
func (r *quickstartRun) runUntilInterrupt(c readmeCommand) {
	t := r.t
	t.Helper()
	f := strings.Fields(c.text)
	i := slices.Index(f, "sub")
	if i < 1 || !strings.HasSuffix(f[i-1], "herald") || i+1 == len(f) || strings.HasPrefix(f[i+1], "-") {
		t.Fatalf("README.md:%d: %q runs until Ctrl-C; the test knows how to drive only `herald sub STREAM ...` so", c.line, c.text)
	}
	name, err := parseStreamArg(f[i+1], "default")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readmeCommandTimeout)
	defer cancel()
	cmd, text := r.command(ctx, c)
	p := &cliProcess{what: text, cmd: cmd, out: newLineCollector(), errOut: newLineCollector(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.errOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	// One probe at a time until one is printed: the command prints only
	// what was published after it subscribed.
	for n := 1; len(p.out.lines()) == 0; n++ {
		if _, err := r.admin.Publish(ctx, name, []byte(fmt.Sprintf("readme-probe-%d", n))); err != nil {
			t.Fatalf("README.md:%d: publishing a probe to %s for %q: %v", c.line, name, text, err)
		}
		select {
		case <-p.out.wrote:
		case <-time.After(200 * time.Millisecond): // the next probe, if this one came too early
		case <-p.done:
			t.Fatalf("README.md:%d: %q, which runs until Ctrl-C, exited by itself: %v; stdout %q, stderr %q", c.line, text, cmd.ProcessState, p.out.lines(), p.stderr())
		case <-ctx.Done():
			t.Fatalf("README.md:%d: %q printed none of the probes published within %v", c.line, text, readmeCommandTimeout)
		}
	}
	if !p.running() {
		t.Fatalf("README.md:%d: %q, which runs until Ctrl-C, exited by itself: %v", c.line, text, cmd.ProcessState)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("README.md:%d: %q did not exit after SIGINT", c.line, text)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("README.md:%d: %q exited with %v after SIGINT; stderr %q", c.line, text, cmd.ProcessState, p.stderr())
	}
	lines := p.out.lines()
	for _, l := range lines {
		if !probeLine.MatchString(l) {
			t.Errorf("README.md:%d: %q printed %q; only probe records were published meanwhile", c.line, text, l)
		}
	}
	t.Logf("README.md:%d: %s: printed %q, then exited 0 on SIGINT (%v)", c.line, text, lines, time.Since(start).Round(time.Millisecond))
	r.checkOutput(readmeCommand{line: c.line, text: c.text}, text, "", p.stderr())
}

// The parser's rules, on a made-up README.
func TestReadmeParseQuickstart(t *testing.T) {
	md := "# T\n\n```sh\nnot in the quickstart\n```\n\n## Quickstart\n\nText.\n\n" +
		"```sh\nmake run   # a node\n\n# a comment line\n./bin/herald pub orders \"a # b\" \\\n  --key k\n```\n\n" +
		"```go\nc, err := client.Dial(ctx)\n```\n\n### More\n\n" +
		"```console\n$ herald sub orders --count 1\n0 0 a # b\n$ herald stream list\n```\n\n" +
		"```bash\nseq 3 | herald pub x   # until Ctrl-C\n```\n\n## Next\n\n```sh\nnot either\n```\n"
	cmds, err := parseQuickstart(md)
	if err != nil {
		t.Fatal(err)
	}
	out := "0 0 a # b\n"
	want := []readmeCommand{
		{line: 12, text: "make run", comment: "a node"},
		{line: 15, text: `./bin/herald pub orders "a # b" --key k`},
		{line: 26, text: "herald sub orders --count 1", output: &out},
		{line: 28, text: "herald stream list"},
		{line: 32, text: "seq 3 | herald pub x", comment: "until Ctrl-C"},
	}
	if len(cmds) != len(want) {
		t.Fatalf("parsed %q, want %q", cmds, want)
	}
	for i, c := range cmds {
		w := want[i]
		if c.line != w.line || c.text != w.text || c.comment != w.comment || (c.output == nil) != (w.output == nil) || (c.output != nil && *c.output != *w.output) {
			t.Errorf("command %d: %+v, want %+v", i, c, w)
		}
	}
	for _, bad := range []string{
		"# T\n\nno quickstart\n",
		"## Quickstart\n\n```sh\nmake run\n",
		"## Quickstart\n\n```sh\nmake run \\\n```\n",
	} {
		if _, err := parseQuickstart(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
