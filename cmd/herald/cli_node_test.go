package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/heraldmq/herald/client"
)

// nodeCLI runs `herald args... --server NODE --ca NODE_CA` in this process
// with stdin as standard input.
func nodeCLI(t *testing.T, node *nodeProcess, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--server", node.addr, "--ca", filepath.Join(node.dataDir, "tls", "ca.pem"))
	code := run(args, stdin, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The commands that print a bounded result print valid JSON and YAML;
// pub prints every record's offset with --batch, carries headers and
// publishes --raw input byte for byte.
func TestCLIOutputsAgainstNode(t *testing.T) {
	node := startNode(t, t.TempDir())
	none := strings.NewReader("")
	const name = "acme/shop/orders"
	if code, out, errOut := nodeCLI(t, node, none, "stream", "create", name, "--shards", "2", "--retention-age", "7d", "--retention-bytes", "10GiB"); code != 0 ||
		!strings.Contains(out, "RETENTION_AGE    7d\n") || !strings.Contains(out, "RETENTION_BYTES  10GiB\n") || !strings.Contains(out, "QUEUE_CAPACITY   default (512)\n") {
		t.Fatalf("stream create: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := nodeCLI(t, node, strings.NewReader("a\nb\nc\nd\ne\n"), "pub", name, "--batch", "3", "--key", "k", "-H", "source=test", "-H", "n=1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 5 || !strings.HasSuffix(lines[0], " 0") || !strings.HasSuffix(lines[4], " 4") {
		t.Fatalf("pub --batch 3: %d %q %q", code, out, errOut)
	}
	shard := strings.Fields(out)[0]
	bin := []byte{0, 1, 2, '\n', 0xff, 0xfe, '\r', '\n'}
	if code, out, errOut = nodeCLI(t, node, bytes.NewReader(bin), "pub", name, "--key", "k", "--raw", "-o", "json"); code != 0 || out != `{"shard":`+shard+`,"offset":5}`+"\n" {
		t.Fatalf("pub --raw -o json: %d %q %q", code, out, errOut)
	}
	code, out, errOut = nodeCLI(t, node, none, "read", name, "--shard", shard, "--from", "0", "--json")
	var recs []eventJSON
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r eventJSON
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("read --json line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if code != 0 || len(recs) != 6 || *recs[0].Payload != "a" || len(recs[0].Headers) != 2 || recs[0].Headers[0].Key != "source" || *recs[0].Headers[0].Value != "test" {
		t.Fatalf("read --json: %d %q %q", code, out, errOut)
	}
	if raw, err := base64.StdEncoding.DecodeString(recs[5].PayloadBase64); err != nil || !bytes.Equal(raw, bin) {
		t.Fatalf("--raw record came back as %q (%v)", recs[5].PayloadBase64, err)
	}
	code, out, _ = nodeCLI(t, node, none, "sub", name, "--shard", shard, "--count", "2", "-o", "yaml")
	dec := yaml.NewDecoder(strings.NewReader(out))
	var docs []map[string]any
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		docs = append(docs, doc)
	}
	if code != 0 || len(docs) != 2 || docs[1]["payload"] != "b" || docs[1]["offset"] != 1 {
		t.Fatalf("sub -o yaml: %d %q", code, out)
	}

	code, out, errOut = nodeCLI(t, node, none, "stream", "describe", name, "-o", "json")
	var info streamInfoJSON
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.Stream != name || info.RetentionAgeMS != 7*24*3600*1000 ||
		info.RetentionBytes != 10<<30 || len(info.Tails) != 2 {
		t.Fatalf("describe -o json: %d %q %q %v", code, out, errOut, err)
	}
	code, out, _ = nodeCLI(t, node, none, "stream", "describe", name, "-o", "yaml")
	var y map[string]any
	if err := yaml.Unmarshal([]byte(out), &y); code != 0 || err != nil || y["stream"] != name {
		t.Fatalf("describe -o yaml: %d %q %v", code, out, err)
	}
	nodeCLI(t, node, none, "pub", "orders", "x")
	code, out, _ = nodeCLI(t, node, none, "stream", "list", "acme")
	if code != 0 || !strings.HasPrefix(out, "1 stream in tenant acme:\n") || !strings.Contains(out, "STREAM") || !strings.Contains(out, name) {
		t.Fatalf("stream list acme:\n%s", out)
	}
	code, out, _ = nodeCLI(t, node, none, "stream", "list")
	if code != 0 || !strings.HasPrefix(out, "1 stream in tenant default:\n") || !strings.Contains(out, "default/default/orders") {
		t.Fatalf("stream list:\n%s", out)
	}
	code, out, _ = nodeCLI(t, node, none, "stream", "list", "--all-tenants", "--json")
	var list streamListJSON
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || fmt.Sprint(list.Tenants) != "[acme default]" || len(list.Streams) != 2 {
		t.Fatalf("stream list --all-tenants --json: %d %q %v", code, out, err)
	}
	code, out, _ = nodeCLI(t, node, none, "stream", "list", "nobody")
	if code != 0 || out != "No streams in tenant nobody.\n" {
		t.Fatalf("stream list nobody: %q", out)
	}
	nodeCLI(t, node, none, "sub", name, "--group", "g", "--count", "1")
	code, out, _ = nodeCLI(t, node, none, "group", "describe", name, "--group", "g", "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &y); code != 0 || err != nil || y["group"] != "g" {
		t.Fatalf("group describe -o yaml: %d %q %v", code, out, err)
	}

	// A line longer than the frame limit fails with a message that says so.
	long := strings.Repeat("z", 16<<20+1)
	code, _, errOut = nodeCLI(t, node, strings.NewReader("ok\n"+long+"\n"), "pub", name)
	if code != 1 || !strings.Contains(errOut, "line 2 is longer than the frame limit") {
		t.Fatalf("long line: %d %q", code, errOut)
	}
	// A 300 KiB line (bufio.Scanner's limit was 64 KiB by default) goes
	// through.
	code, out, errOut = nodeCLI(t, node, strings.NewReader(strings.Repeat("w", 300<<10)+"\n"), "pub", "default/default/big")
	if code != 0 || out != "0 0\n" {
		t.Fatalf("long line under the limit: %d %q %q", code, out, errOut)
	}
}

// stream delete asks on a terminal: no deletes nothing, yes deletes.
func TestStreamDeleteConfirms(t *testing.T) {
	node := startNode(t, t.TempDir())
	ca := filepath.Join(node.dataDir, "tls", "ca.pem")
	del := func(answer string) (int, string, string) {
		var out, errOut bytes.Buffer
		e := processEnv(strings.NewReader(answer), &out, &errOut)
		e.isTerminal = func(v any) bool { return v == e.stdin }
		code := runEnv(e, []string{"stream", "delete", "doomed", "--server", node.addr, "--ca", ca})
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := nodeCLIStatus(t, node, "stream", "create", "doomed"); code != 0 {
		t.Fatalf("create: %d %q", code, errOut)
	}
	code, out, errOut := del("n\n")
	if code != 1 || out != "" || !strings.Contains(errOut, "Delete stream default/default/doomed (1 shards, 0 records written) and all its records? [y/N]") ||
		!strings.Contains(errOut, "not confirmed: nothing deleted") {
		t.Fatalf("answer n: %d %q %q", code, out, errOut)
	}
	if code, _, _ := nodeCLIStatus(t, node, "stream", "describe", "doomed"); code != 0 {
		t.Fatal("deleted without a yes")
	}
	if code, out, errOut = del("yes\n"); code != 0 || out != "deleted default/default/doomed\n" {
		t.Fatalf("answer yes: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := nodeCLIStatus(t, node, "stream", "describe", "doomed"); code != 1 || !strings.Contains(errOut, "stream_not_found") {
		t.Fatalf("describe after delete: %d %q", code, errOut)
	}
}

// nodeCLIStatus is nodeCLI with an empty stdin.
func nodeCLIStatus(t *testing.T, node *nodeProcess, args ...string) (int, string, string) {
	t.Helper()
	return nodeCLI(t, node, strings.NewReader(""), args...)
}

// sub on a stream that does not exist yet waits for it: a publish a moment
// later (which auto-creates it) is printed. --no-wait fails at once.
func TestSubWaitsForStream(t *testing.T) {
	node := startNode(t, t.TempDir())
	if code, _, errOut := nodeCLIStatus(t, node, "sub", "later", "--no-wait", "--count", "1"); code != 1 || !strings.Contains(errOut, "stream_not_found") {
		t.Fatalf("--no-wait: %d %q", code, errOut)
	}
	var out bytes.Buffer
	var errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"sub", "later", "--count", "1", "--server", node.addr, "--ca", filepath.Join(node.dataDir, "tls", "ca.pem")},
			strings.NewReader(""), &out, &errOut)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Publish only once sub has said it waits.
	for !strings.Contains(errOut.String(), "does not exist yet; waiting for it") {
		select {
		case code := <-done:
			t.Fatalf("sub exited %d before the stream existed: %q", code, errOut.String())
		case <-ctx.Done():
			t.Fatalf("sub never said it waits: %q", errOut.String())
		case <-time.After(10 * time.Millisecond): // polling a goroutine's output, not asserting time
		}
	}
	c := node.dial(t)
	if _, err := c.Publish(ctx, client.StreamName{Tenant: "default", Namespace: "default", Stream: "later"}, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || out.String() != "0 0 hello\n" {
			t.Fatalf("sub: %d %q %q", code, out.String(), errOut.String())
		}
	case <-ctx.Done():
		t.Fatalf("sub did not print the record: %q", errOut.String())
	}
}

// A context lets the CLI work from any directory; without one, a run from
// elsewhere fails verification and says where the CA was looked for.
func TestContextFromAnotherDirectory(t *testing.T) {
	node := startNode(t, t.TempDir())
	t.Setenv("HERALD_CONFIG_DIR", filepath.Join(t.TempDir(), "cfg"))
	t.Setenv("HERALD_CONTEXT", "")
	t.Setenv("HERALD_SERVER", "")
	t.Setenv("HERALD_CA", "")
	t.Setenv("HERALD_DATA_DIR", "")
	t.Chdir(t.TempDir())

	code, _, errOut := runCLI(t, "pub", "acme/shop/orders", "x", "--server", node.addr, "--timeout", "5s")
	if code != 1 || !strings.Contains(errOut, "certificate signed by unknown authority") || !strings.Contains(errOut, "--ca FILE") ||
		!strings.Contains(errOut, "./data/tls/ca.pem") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("without a CA: %d %q", code, errOut)
	}
	ca := filepath.Join(node.dataDir, "tls", "ca.pem")
	if code, out, errOut := runCLI(t, "context", "add", "local", "--server", node.addr, "--ca", ca, "--tenant", "acme"); code != 0 {
		t.Fatalf("context add: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "pub", "shop/orders", "hello"); code != 0 || out != "0 0\n" {
		t.Fatalf("pub with the context: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "sub", "acme/shop/orders", "--count", "1"); code != 0 || out != "0 0 hello\n" {
		t.Fatalf("sub with the context: %d %q %q", code, out, errOut)
	}
	code, out, _ := runCLI(t, "stream", "list")
	if code != 0 || !strings.HasPrefix(out, "1 stream in tenant acme:\n") {
		t.Fatalf("stream list with the context's tenant:\n%s", out)
	}
}

// stream list --all-tenants: credentials bound to a tenant may not list
// every tenant, so the CLI says so on stderr and lists their own; the
// other tenant's stream is not shown.
func TestStreamListAllTenantsBoundCredentials(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	const token = "acme-admin-token-for-the-test"
	if err := os.WriteFile(tokens, []byte("tokens:\n  - name: acme-admin\n    tenant: acme\n    token: "+token+
		"\n    permissions: [publish, subscribe, consume, manage]\n  - name: globex-admin\n    tenant: globex\n    token: globex-admin-token-for-the-test\n    permissions: [manage]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := startNode(t, dir, "HERALD_AUTH_TOKENS_FILE="+tokens)
	none := strings.NewReader("")
	if code, _, errOut := nodeCLI(t, node, none, "stream", "create", "acme/shop/orders", "--token", token); code != 0 {
		t.Fatalf("create acme: %d %q", code, errOut)
	}
	if code, _, errOut := nodeCLI(t, node, none, "stream", "create", "globex/shop/orders", "--token", "globex-admin-token-for-the-test"); code != 0 {
		t.Fatalf("create globex: %d %q", code, errOut)
	}
	code, out, errOut := nodeCLI(t, node, none, "stream", "list", "--all-tenants", "--token", token, "--json")
	var list streamListJSON
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Streams) != 1 || list.Streams[0].Stream != "acme/shop/orders" {
		t.Fatalf("list --all-tenants as acme: %d %q %q %v", code, out, errOut, err)
	}
	if !strings.Contains(errOut, "may not list every tenant") || !strings.Contains(errOut, "acme") {
		t.Errorf("stderr does not say why only acme is listed: %q", errOut)
	}
}
