package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

func TestParseReadCmd(t *testing.T) {
	cmd, err := parseReadCmd([]string{"acme/shop/orders", "--shard", "3", "--from", "10", "--to", "20", "--limit", "5", "--json"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.name.String() != "acme/shop/orders" || cmd.shard != 3 || cmd.from != 10 || cmd.to != 20 || cmd.limit != 5 || !cmd.json {
		t.Fatalf("read: %+v", cmd)
	}
	cmd, err = parseReadCmd([]string{"--from", "0", "orders", "--shard", "0"}, io.Discard, env(nil))
	if err != nil || cmd.to != client.ReadToTail || cmd.limit != 0 || cmd.json {
		t.Fatalf("read defaults: %+v, %v", cmd, err)
	}
	for _, args := range [][]string{
		nil,
		{"orders", "--from", "0"},
		{"orders", "--shard", "1"},
		{"orders", "extra", "--shard", "1", "--from", "0"},
		{"orders", "--shard", "4294967296", "--from", "0"},
		{"orders", "--shard", "1", "--from", "9", "--to", "3"},
		{"orders", "--shard", "1", "--from", "0", "--to", "tail"},
		{"orders", "--shard", "1", "--from", "0", "--limit", "-1"},
		{"a/b/c/d", "--shard", "1", "--from", "0"},
	} {
		if _, err := parseReadCmd(args, io.Discard, env(nil)); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if _, err := parseReadCmd([]string{"orders", "--shard", "1", "--from", "-1"}, io.Discard, env(nil)); !errors.Is(err, errBadFlag) {
		t.Errorf("negative --from: %v", err)
	}
}

// fakeShard serves pages of a shard whose offsets [first, tail) hold
// records, except the offsets in gaps, at most per records a page.
type fakeShard struct {
	first, tail uint64
	gaps        map[uint64]bool
	per         int
	starts      []uint64
}

func (f *fakeShard) read(ctx context.Context, start uint64, opts ...client.ReadOption) (client.ReadPage, error) {
	f.starts = append(f.starts, start)
	page := client.ReadPage{First: f.first, Tail: f.tail, Next: start}
	for off := start; off < f.tail && len(page.Records) < f.per; off++ {
		page.Next = off + 1
		if !f.gaps[off] {
			page.Records = append(page.Records, client.Event{Shard: 1, Offset: off, Payload: []byte(fmt.Sprint("r", off))})
		}
	}
	return page, nil
}

func TestReadPages(t *testing.T) {
	tests := []struct {
		name       string
		cmd        readCmd
		shard      fakeShard
		wantOut    string
		wantNext   uint64
		wantStarts string
	}{
		{name: "to the tail", cmd: readCmd{from: 2, to: client.ReadToTail}, shard: fakeShard{tail: 7, per: 2},
			wantOut: "1 2 r2\n1 3 r3\n1 4 r4\n1 5 r5\n1 6 r6\n", wantNext: 7, wantStarts: "[2 4 6]"},
		{name: "limit", cmd: readCmd{from: 0, to: client.ReadToTail, limit: 3}, shard: fakeShard{tail: 10, per: 2},
			wantOut: "1 0 r0\n1 1 r1\n1 2 r2\n", wantNext: 3, wantStarts: "[0 2]"},
		{name: "gap", cmd: readCmd{from: 0, to: client.ReadToTail}, shard: fakeShard{tail: 4, per: 2, gaps: map[uint64]bool{1: true, 2: true}},
			wantOut: "1 0 r0\n1 3 r3\n", wantNext: 4, wantStarts: "[0]"},
		{name: "nothing yet", cmd: readCmd{from: 5, to: client.ReadToTail}, shard: fakeShard{tail: 5, per: 2},
			wantOut: "", wantNext: 5, wantStarts: "[5]"},
		{name: "to an end", cmd: readCmd{from: 1, to: 3}, shard: fakeShard{tail: 9, per: 1},
			wantOut: "1 1 r1\n1 2 r2\n", wantNext: 3, wantStarts: "[1 2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cmd.conn = &clientFlags{timeout: defaultTimeout}
			var buf bytes.Buffer
			out := bufio.NewWriter(&buf)
			next, err := tc.cmd.readPages(context.Background(), tc.shard.read, out)
			out.Flush()
			if err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.wantOut || next != tc.wantNext || fmt.Sprint(tc.shard.starts) != tc.wantStarts {
				t.Fatalf("printed %q, next %d, pages from %v; want %q, %d, %s",
					buf.String(), next, tc.shard.starts, tc.wantOut, tc.wantNext, tc.wantStarts)
			}
		})
	}
}

// TestCLIAgainstNode runs the stream, pub, read and sub commands against a
// real node.
func TestCLIAgainstNode(t *testing.T) {
	node := startNode(t, t.TempDir())
	conn := []string{"--server", node.addr, "--ca", filepath.Join(node.dataDir, "tls", "ca.pem")}
	run := func(f func([]string, io.Reader, io.Writer, io.Writer) int, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := f(append(args, conn...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	const name = "acme/shop/orders"

	code, out, errOut := run(runStream, "create", name, "--shards", "4", "--routing", "jump", "--overflow", "drop_old",
		"--queue-capacity", "64", "--retention-age", "72h", "-o", "json")
	var created streamInfoJSON
	if err := json.Unmarshal([]byte(out), &created); code != 0 || err != nil || created.Shards != 4 || created.Routing != "jump" ||
		!created.Durable || created.Overflow != "drop_old" || created.QueueCapacity != 64 || created.RetentionAgeMS != 72*3600*1000 {
		t.Fatalf("stream create: %d %q %q %v", code, out, errOut, err)
	}
	shard := wire.ShardFor([]byte("k1"), 4, wire.RoutingJump)
	code, out, errOut = run(runPub, name, "a", "b", "c", "--key", "k1")
	if want := fmt.Sprintf("%d 0\n%d 1\n%d 2\n", shard, shard, shard); code != 0 || out != want {
		t.Fatalf("pub: %d %q %q, want %q", code, out, errOut, want)
	}
	if code, out, errOut = run(runPub, name, "x", "--key", "k1", "--if-offset", "3"); code != 0 || out != "written at 3\n" {
		t.Fatalf("pub --if-offset 3: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = run(runPub, name, "y", "--key", "k1", "--if-offset", "3"); code != 1 || out != "refused: tail is 4\n" {
		t.Fatalf("stale pub --if-offset 3: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(runRead, name, "--shard", fmt.Sprint(shard), "--from", "1")
	if want := fmt.Sprintf("%d 1 b\n%d 2 c\n%d 3 x\n", shard, shard, shard); code != 0 || out != want || errOut != "next 4\n" {
		t.Fatalf("read: %d %q %q, want %q", code, out, errOut, want)
	}
	if code, out, errOut = run(runRead, name, "--shard", fmt.Sprint(shard), "--from", "1", "--limit", "1"); code != 0 || errOut != "next 2\n" {
		t.Fatalf("read --limit 1: %d %q %q", code, out, errOut)
	}
	// Another shard, then sub over every shard.
	other := (shard + 1) % 4
	var otherKey string
	for i := 0; otherKey == ""; i++ {
		if k := fmt.Sprint("k", i); wire.ShardFor([]byte(k), 4, wire.RoutingJump) == other {
			otherKey = k
		}
	}
	if code, out, errOut = run(runPub, name, "z", "--key", otherKey); code != 0 || out != fmt.Sprintf("%d 0\n", other) {
		t.Fatalf("pub to shard %d: %d %q %q", other, code, out, errOut)
	}
	code, out, errOut = run(runSub, name, "--count", "5")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 {
		t.Fatalf("sub: %d %q %q", code, out, errOut)
	}
	if !strings.Contains(out, fmt.Sprintf("%d 0 z\n", other)) || !strings.Contains(out, fmt.Sprintf("%d 3 x\n", shard)) {
		t.Fatalf("sub over every shard printed %q", out)
	}
	if code, out, errOut = run(runStream, "describe", name); code != 0 || !strings.Contains(out, "RETENTION_AGE    3d\n") ||
		!strings.Contains(out, "SHARD  TAIL\n") {
		t.Fatalf("describe: %d %q %q", code, out, errOut)
	}
	// Without a terminal to ask on, delete wants --force.
	if code, out, errOut = run(runStream, "delete", name); code != 2 || out != "" || !strings.Contains(errOut, "pass --force") {
		t.Fatalf("delete without --force: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = run(runStream, "delete", name, "--force"); code != 0 || out != "deleted "+name+"\n" {
		t.Fatalf("delete: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = run(runStream, "describe", name); code != 1 || !strings.Contains(errOut, "stream_not_found") {
		t.Fatalf("describe after delete: %d %q", code, errOut)
	}
}
