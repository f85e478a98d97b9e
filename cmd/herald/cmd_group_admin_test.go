package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/heraldmq/herald/client"
)

// herald group list, seek and delete: parsing, the outputs, and the
// commands against a real node.

func TestParseGroupAdminCmd(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		args []string
		want groupCmd
	}{
		{args: []string{"list", "acme/shop/orders"}, want: groupCmd{op: "list"}},
		{args: []string{"list", "orders", "-o", "yaml"}, want: groupCmd{op: "list", yaml: true}},
		{args: []string{"seek", "orders", "g", "--to-offset", "5"},
			want: groupCmd{op: "seek", group: "g", shard: client.AllShards, to: client.SeekToOffset(5)}},
		{args: []string{"seek", "orders", "--group", "g", "--shard", "2", "--to-offset", "0"},
			want: groupCmd{op: "seek", group: "g", shard: 2, to: client.SeekToOffset(0)}},
		{args: []string{"seek", "orders", "g", "--group", "g", "--to-time", "2026-12-01T10:00:00Z", "--json"},
			want: groupCmd{op: "seek", group: "g", shard: client.AllShards, to: client.SeekToTime(at), json: true}},
		{args: []string{"seek", "orders", "g", "--to-earliest"},
			want: groupCmd{op: "seek", group: "g", shard: client.AllShards, to: client.SeekToEarliest()}},
		{args: []string{"seek", "orders", "g", "--to-latest", "--shard", "0"},
			want: groupCmd{op: "seek", group: "g", shard: 0, to: client.SeekToLatest()}},
		{args: []string{"delete", "orders", "g"}, want: groupCmd{op: "delete", group: "g", shard: client.AllShards}},
		{args: []string{"delete", "orders", "--group", "g", "--force", "-o", "json"},
			want: groupCmd{op: "delete", group: "g", shard: client.AllShards, force: true, json: true}},
		{args: []string{"delete", "orders", "g", "-f"}, want: groupCmd{op: "delete", group: "g", shard: client.AllShards, force: true}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd, err := parseGroupCmd(tc.args, io.Discard, env(nil))
			if err != nil {
				t.Fatal(err)
			}
			got := *cmd
			got.conn, got.name = nil, client.StreamName{}
			got.max, got.wait = 0, 0
			if got.to != tc.want.to {
				t.Fatalf("seek target %+v, want %+v", got.to, tc.want.to)
			}
			if tc.want.op == "list" {
				tc.want.shard = got.shard // list takes no shard
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if cmd.name.Stream != "orders" {
				t.Fatalf("stream %v", cmd.name)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list"}, "missing STREAM"},
		{[]string{"list", "orders", "more"}, `unexpected argument "more"`},
		{[]string{"list", "orders", "--group", "g"}, "list takes no --group"},
		{[]string{"list", "orders", "--shard", "0"}, "unknown flag: --shard"},
		{[]string{"seek", "orders", "--to-offset", "1"}, "seek needs GROUP"},
		{[]string{"seek", "orders", "g"}, "seek needs where to: --to-offset N, --to-time T, --to-earliest or --to-latest"},
		{[]string{"seek", "orders", "g", "--to-earliest=false"}, "seek needs where to"},
		{[]string{"seek", "orders", "g", "--to-offset", "1", "--to-latest"}, "give only one"},
		{[]string{"seek", "orders", "g", "--to-earliest", "--to-latest"}, "give only one"},
		{[]string{"seek", "orders", "g", "--to-time", "2026-12-01T10:00:00Z", "--to-offset", "3"}, "give only one"},
		{[]string{"seek", "orders", "g", "--to-time", "10m"}, `--to-time "10m": want an RFC 3339 time`},
		{[]string{"seek", "orders", "g", "--to-time", "2026-12-01"}, `want an RFC 3339 time`},
		{[]string{"seek", "orders", "g", "--to-offset", "-1"}, `invalid argument "-1" for "--to-offset" flag`},
		{[]string{"seek", "orders", "g", "--to-offset", "x"}, `invalid argument "x" for "--to-offset" flag`},
		{[]string{"seek", "orders", "g", "--to-latest", "--shard", "4294967295"}, "--shard 4294967295 is out of range"},
		{[]string{"seek", "orders", "g", "h", "--to-latest"}, `unexpected argument "h"`},
		{[]string{"seek", "orders", "g", "--group", "h", "--to-latest"}, `GROUP "g" and --group "h" differ`},
		{[]string{"seek", "orders", "a/b", "--to-latest"}, `GROUP "a/b" has a character outside`},
		{[]string{"seek", "orders", "--group", "a b", "--to-latest"}, `--group "a b" has a character outside`},
		{[]string{"delete", "orders"}, "delete needs GROUP: herald group delete STREAM GROUP"},
		{[]string{"delete", "orders", ""}, "GROUP must be 1-64 bytes"},
		{[]string{"delete", "orders", "g", "--to-latest"}, "unknown flag: --to-latest"},
		{[]string{"delete", "orders", "g", "--shard", "0"}, "unknown flag: --shard"},
		{[]string{"delete", "a/b/c/d", "g"}, "a/b/c/d"},
	} {
		_, err := parseGroupCmd(tc.args, io.Discard, env(nil))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
		code, out, errOut := runCLI(t, append([]string{"group"}, tc.args...)...)
		if lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"); code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "herald group "+tc.args[0]+": ") {
			t.Errorf("%q: exit %d, %q %q; want 2 and one line plus a hint", tc.args, code, out, errOut)
		}
	}
}

// The table and JSON forms of list and seek.
func TestGroupAdminOutputs(t *testing.T) {
	name := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	var b bytes.Buffer
	if err := writeGroupList(&b, name, nil); err != nil || b.String() != "No groups on acme/shop/orders.\n" {
		t.Fatalf("empty list: %q %v", b.String(), err)
	}
	b.Reset()
	groups := []client.GroupSummary{{Group: "billing", Members: 2, Lag: 1200}, {Group: "fulfilment", Lag: 0}}
	if err := writeGroupList(&b, name, groups); err != nil {
		t.Fatal(err)
	}
	want := "2 groups on acme/shop/orders:\n" +
		"GROUP       MEMBERS  LAG\n" +
		"billing     2        1200\n" +
		"fulfilment  0        0\n"
	if b.String() != want {
		t.Fatalf("list:\n%s\nwant:\n%s", b.String(), want)
	}
	js, _ := json.Marshal(groupListJSONOf(name, groups))
	if string(js) != `{"stream":"acme/shop/orders","groups":[{"group":"billing","members":2,"lag":1200},{"group":"fulfilment","members":0,"lag":0}]}` {
		t.Fatalf("list --json: %s", js)
	}
	if js, _ := json.Marshal(groupListJSONOf(name, nil)); string(js) != `{"stream":"acme/shop/orders","groups":[]}` {
		t.Fatalf("empty list --json: %s", js)
	}

	j := groupSeekJSONOf(name, "billing", map[uint32]uint64{2: 7, 0: 10, 1: 3})
	js, _ = json.Marshal(j)
	if string(js) != `{"stream":"acme/shop/orders","group":"billing","shards":[{"shard":0,"committed":10},{"shard":1,"committed":3},{"shard":2,"committed":7}]}` {
		t.Fatalf("seek --json: %s", js)
	}
	b.Reset()
	if err := writeGroupSeek(&b, j); err != nil {
		t.Fatal(err)
	}
	want = "group billing on acme/shop/orders moved:\n" +
		"SHARD  COMMITTED\n" +
		"0      10\n" +
		"1      3\n" +
		"2      7\n"
	if b.String() != want {
		t.Fatalf("seek:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestGroupAdminCLIAgainstNode runs `herald group list`, `seek` and
// `delete` against a real node: claims and members refuse a seek or a
// delete with one line and exit status 1, a seek replays records on their
// first attempt, a delete asks on a terminal.
func TestGroupAdminCLIAgainstNode(t *testing.T) {
	node := startNode(t, t.TempDir())
	ca := filepath.Join(node.dataDir, "tls", "ca.pem")
	conn := []string{"--server", node.addr, "--ca", ca}
	cli := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(append(args, conn...), strings.NewReader(stdin), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errOut := cli("", args...)
		if code != 0 {
			t.Fatalf("%q: exit %d, %q %q", args, code, out, errOut)
		}
		return out
	}
	// failed wants exit status 1 and one line on stderr holding want.
	failed := func(want string, args ...string) {
		t.Helper()
		code, out, errOut := cli("", args...)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("%q: exit %d, %q %q; want 1 and %q", args, code, out, errOut, want)
		}
	}
	const name = "acme/shop/orders"
	ok("stream", "create", name)
	ok("pub", name, "r0", "r1", "r2")
	mid := time.Now().UTC()
	ok("pub", name, "r3", "r4")
	if out := ok("group", "list", name); out != "No groups on acme/shop/orders.\n" {
		t.Fatalf("list with no groups: %q", out)
	}

	// Claims refuse a seek; once acked, the seek replays.
	if out := ok("group", "poll", name, "--group", "g", "--shard", "0", "--max", "2"); out != "0 0 1 r0\n0 1 1 r1\n" {
		t.Fatalf("poll: %q", out)
	}
	failed("group_in_use", "group", "seek", name, "g", "--to-earliest")
	ok("group", "ack", name, "--group", "g", "--shard", "0", "0", "1")
	if out := ok("group", "seek", name, "g", "--to-offset", "1"); out != "group g on acme/shop/orders moved:\nSHARD  COMMITTED\n0      1\n" {
		t.Fatalf("seek --to-offset 1: %q", out)
	}
	if out := ok("group", "poll", name, "--group", "g", "--shard", "0", "--max", "1", "--ack"); out != "0 1 1 r1\n" {
		t.Fatalf("poll after the seek: %q", out)
	}
	var seeked groupSeekJSON
	if err := json.Unmarshal([]byte(ok("group", "seek", name, "--group", "g", "--to-time", mid.Format(time.RFC3339Nano), "--json")), &seeked); err != nil ||
		len(seeked.Shards) != 1 || seeked.Shards[0] != (groupPositionJSON{Shard: 0, Committed: 3}) || seeked.Group != "g" || seeked.Stream != name {
		t.Fatalf("seek --to-time --json: %+v %v", seeked, err)
	}
	if out := ok("group", "poll", name, "--group", "g", "--shard", "0", "--max", "5"); out != "0 3 1 r3\n0 4 1 r4\n" {
		t.Fatalf("poll after the seek to a time: %q", out)
	}
	ok("group", "ack", name, "--group", "g", "--shard", "0", "3", "4")
	if out := ok("group", "seek", name, "g", "--to-latest", "-o", "yaml"); !strings.Contains(out, "committed: 5") {
		t.Fatalf("seek --to-latest -o yaml: %q", out)
	}
	// A seek creates a group never used.
	ok("group", "seek", name, "fresh", "--shard", "0", "--to-offset", "4")
	failed("invalid_shard", "group", "seek", name, "fresh", "--shard", "1", "--to-offset", "4")

	// A describe goes through each group's coordinator after its seek, so
	// the figures the list reads are published by then.
	ok("group", "describe", name, "--group", "fresh")
	ok("group", "describe", name, "--group", "g")
	var list groupListJSON
	if err := json.Unmarshal([]byte(ok("group", "list", name, "--json")), &list); err != nil || list.Stream != name ||
		len(list.Groups) != 2 || list.Groups[0] != (groupSummaryJSON{Group: "fresh", Lag: 1}) || list.Groups[1] != (groupSummaryJSON{Group: "g"}) {
		t.Fatalf("list --json: %+v %v", list, err)
	}
	var y map[string]any
	if err := yaml.Unmarshal([]byte(ok("group", "list", name, "-o", "yaml")), &y); err != nil || y["stream"] != name {
		t.Fatalf("list -o yaml: %v %v", y, err)
	}
	if out := ok("group", "list", name); out != "2 groups on acme/shop/orders:\nGROUP  MEMBERS  LAG\nfresh  0        1\ng      0        0\n" {
		t.Fatalf("list:\n%s", out)
	}

	// A push member refuses a delete and a seek.
	c := node.dial(t)
	m, err := c.Group(client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}, "fresh").Subscribe(t.Context(), client.WithMember("m1"))
	if err != nil {
		t.Fatal(err)
	}
	failed("group_in_use", "group", "delete", name, "fresh", "--force")
	failed("group_in_use", "group", "seek", name, "fresh", "--to-latest")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	// Delete: not without --force off a terminal; on one, only after a yes.
	if code, _, errOut := cli("", "group", "delete", name, "g"); code != 2 ||
		!strings.HasPrefix(errOut, "herald group delete: not deleting group g on acme/shop/orders: standard input is not a terminal") {
		t.Fatalf("delete without --force off a terminal: %d %q", code, errOut)
	}
	del := func(answer string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		e := processEnv(strings.NewReader(answer), &out, &errOut)
		e.isTerminal = func(v any) bool { return v == e.stdin }
		code := runEnv(e, append(append([]string{"group", "delete", name}, args...), conn...))
		return code, out.String(), errOut.String()
	}
	code, out, errOut := del("n\n", "g")
	if code != 1 || out != "" || !strings.Contains(errOut, "Delete group g on acme/shop/orders (lag 0, 0 dead letters, 0 push members) and all its state? [y/N]") ||
		!strings.Contains(errOut, "not confirmed: nothing deleted") {
		t.Fatalf("answer n: %d %q %q", code, out, errOut)
	}
	ok("group", "describe", name, "--group", "g")
	if code, out, errOut = del("y\n", "g"); code != 0 || out != "deleted group g on acme/shop/orders\n" {
		t.Fatalf("answer y: %d %q %q", code, out, errOut)
	}
	failed("group_not_found", "group", "describe", name, "--group", "g")
	failed("group_not_found", "group", "delete", name, "g", "--force")
	if code, _, errOut := del("y\n", "never"); code != 1 || !strings.Contains(errOut, "group_not_found") || strings.Contains(errOut, "[y/N]") {
		t.Fatalf("delete of a group never used, on a terminal: %d %q", code, errOut)
	}
	// The member's leave reaches the node on its own time: delete once
	// it has, then the list is empty again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, errOut := cli("", "group", "delete", name, "--group", "fresh", "--force", "--json")
		if code == 0 {
			if out != "{\n  \"stream\": \"acme/shop/orders\",\n  \"deleted\": \"fresh\"\n}\n" {
				t.Fatalf("delete --json: %q", out)
			}
			break
		}
		if !strings.Contains(errOut, "group_in_use") || time.Now().After(deadline) {
			t.Fatalf("delete after the member left: %d %q", code, errOut)
		}
		time.Sleep(50 * time.Millisecond) // polling the node, not asserting time
	}
	if out := ok("group", "list", name); out != "No groups on acme/shop/orders.\n" {
		t.Fatalf("list after the deletes: %q", out)
	}

	// An ephemeral stream has no groups.
	ok("stream", "create", "acme/shop/ticks", "--ephemeral")
	failed("stream_not_durable", "group", "list", "acme/shop/ticks")
	failed("stream_not_found", "group", "list", "acme/shop/nope")
}

// The command lines of list, seek, delete and sub from a time that the
// README and docs show parse as written.
func TestDocsAdminCommandsParse(t *testing.T) {
	shown := regexp.MustCompile(`^(?:\./bin/)?herald (group (?:list|seek|delete) .*|sub .*--(?:since|from-time) .*)$`)
	n := 0
	for _, doc := range []string{"README.md", "docs/streams.md", "docs/groups.md"} {
		md, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(md), "\n") {
			line, _, _ = strings.Cut(line, "#")
			m := shown.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				continue
			}
			n++
			if _, err := parseCommandLine(strings.Fields(m[1]), io.Discard, env(nil)); err != nil {
				t.Errorf("%s: %q: %v", doc, m[0], err)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d command lines in the docs: the pattern no longer matches them", n)
	}
}
