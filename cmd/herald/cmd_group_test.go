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
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

func TestParseSubGroupCmd(t *testing.T) {
	cmd, err := parseSubCmd([]string{"acme/shop/orders", "--group", "g", "--member", "m-1", "--window", "50", "--max", "10",
		"--heartbeat", "2s", "--count", "7", "--json"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.name.String() != "acme/shop/orders" || cmd.group != "g" || cmd.member != "m-1" || cmd.window != 50 ||
		cmd.maxPerPush != 10 || cmd.heartbeat != 2*time.Second || cmd.count != 7 || !cmd.json {
		t.Fatalf("sub --group: %+v", cmd)
	}
	if len(cmd.groupOptions()) != 4 {
		t.Fatalf("%d options, want window, max per push, heartbeat and member", len(cmd.groupOptions()))
	}
	cmd, err = parseSubCmd([]string{"--group", "g", "orders"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.group != "g" || cmd.member != "" || cmd.window != client.DefaultGroupWindow || cmd.maxPerPush != 0 ||
		cmd.heartbeat != 0 || cmd.count != 0 || cmd.json || len(cmd.groupOptions()) != 3 {
		t.Fatalf("sub --group defaults: %+v", cmd)
	}
	for _, args := range [][]string{
		{"orders", "--group", "g", "--from", "earliest"},
		{"orders", "--group", "g", "--from", "3"},
		{"orders", "--group", "g", "--shard", "0"},
		{"orders", "--group", "g", "--queue", "8"},
		{"orders", "--member", "m"},
		{"orders", "--window", "10"},
		{"orders", "--max", "5"},
		{"orders", "--heartbeat", "1s"},
		{"orders", "--group", ""},
		{"orders", "--group", "a/b"},
		{"orders", "--group", strings.Repeat("g", 65)},
		{"orders", "--group", "g", "--member", "m 1"},
		{"orders", "--group", "g", "--window", "0"},
		{"orders", "--group", "g", "--max", "-1"},
		{"orders", "--group", "g", "--heartbeat", "-1s"},
		{"orders", "--group", "g", "--count", "-1"},
		{"--group", "g"},
		{"orders", "more", "--group", "g"},
	} {
		if _, err := parseSubCmd(args, io.Discard, env(nil)); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if _, err := parseSubCmd([]string{"orders", "--group", "g", "--heartbeat", "often"}, io.Discard, env(nil)); !errors.Is(err, errBadFlag) {
		t.Errorf("bad --heartbeat: %v", err)
	}
}

func TestParseGroupCmd(t *testing.T) {
	tests := []struct {
		args []string
		want groupCmd
	}{
		{args: []string{"poll", "acme/shop/orders", "--group", "g", "--shard", "2"},
			want: groupCmd{op: "poll", group: "g", shard: 2, max: 10, wait: 5 * time.Second}},
		{args: []string{"--group", "g", "poll", "orders", "--shard", "0", "--max", "3", "--wait", "0s", "--ack", "--json"},
			want: groupCmd{op: "poll", group: "g", shard: 0, max: 3, ack: true, json: true}},
		{args: []string{"ack", "orders", "--group", "g", "--shard", "1", "4", "5"},
			want: groupCmd{op: "ack", group: "g", shard: 1, offsets: []uint64{4, 5}}},
		{args: []string{"nack", "orders", "7", "--group", "g", "--shard", "1"},
			want: groupCmd{op: "nack", group: "g", shard: 1, offsets: []uint64{7}}},
		{args: []string{"dead-letters", "orders", "--group", "g"},
			want: groupCmd{op: "dead-letters", group: "g", shard: client.AllShards}},
		{args: []string{"dead-letters", "orders", "--group", "g", "--shard", "3", "--from", "100", "--limit", "20", "--json"},
			want: groupCmd{op: "dead-letters", group: "g", shard: 3, from: 100, limit: 20, json: true}},
		{args: []string{"redrive", "orders", "--group", "g"},
			want: groupCmd{op: "redrive", group: "g", shard: client.AllShards}},
		{args: []string{"redrive", "orders", "--group", "g", "--shard", "0", "8", "9"},
			want: groupCmd{op: "redrive", group: "g", shard: 0, offsets: []uint64{8, 9}}},
		{args: []string{"discard", "orders", "--group", "g", "--shard", "2"},
			want: groupCmd{op: "discard", group: "g", shard: 2}},
		{args: []string{"describe", "orders", "--group", "g", "--json"},
			want: groupCmd{op: "describe", group: "g", shard: client.AllShards, json: true}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd, err := parseGroupCmd(tc.args, io.Discard, env(nil))
			if err != nil {
				t.Fatal(err)
			}
			got := *cmd
			got.conn, got.name = nil, client.StreamName{}
			// Defaults of flags the subcommand does not take do not matter.
			if tc.want.op != "poll" {
				got.max, got.wait = 0, 0
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if cmd.name.Stream != "orders" {
				t.Fatalf("stream %v", cmd.name)
			}
		})
	}
	for _, args := range [][]string{
		nil,
		{"list", "orders", "--group", "g"},
		{"poll"},
		{"poll", "a/b/c/d", "--group", "g", "--shard", "0"},
		{"poll", "orders", "--shard", "0"},
		{"poll", "orders", "--group", "", "--shard", "0"},
		{"poll", "orders", "--group", "g!", "--shard", "0"},
		{"poll", "orders", "--group", "g"},
		{"poll", "orders", "--group", "g", "--shard", "4294967295"},
		{"poll", "orders", "--group", "g", "--shard", "4294967296"},
		{"poll", "orders", "--group", "g", "--shard", "0", "--max", "0"},
		{"poll", "orders", "--group", "g", "--shard", "0", "--wait", "-1s"},
		{"poll", "orders", "--group", "g", "--shard", "0", "--limit", "3"},
		{"poll", "orders", "--group", "g", "--shard", "0", "5"},
		{"ack", "orders", "--group", "g", "1"},
		{"ack", "orders", "--group", "g", "--shard", "0"},
		{"nack", "orders", "--group", "g", "--shard", "0", "x"},
		{"ack", "orders", "--group", "g", "--shard", "0", "1", "--json"},
		{"ack", "orders", "--group", "g", "--shard", "0", "1", "--max", "3"},
		{"dead-letters", "orders", "--group", "g", "--limit", "-1"},
		{"dead-letters", "orders", "--group", "g", "--ack"},
		{"dead-letters", "orders", "--group", "g", "5"},
		{"redrive", "orders", "--group", "g", "5"},
		{"discard", "orders", "--group", "g", "5"},
		{"discard", "orders", "--group", "g", "--json"},
		{"describe", "orders", "--group", "g", "--shard", "0"},
		{"describe", "orders", "--group", "g", "extra"},
		{"describe", "orders"},
	} {
		if _, err := parseGroupCmd(args, io.Discard, env(nil)); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	for _, args := range [][]string{
		{"poll", "orders", "--group", "g", "--shard", "-1"},
		{"nack", "orders", "--group", "g", "--shard", "0", "-1"},
	} {
		if _, err := parseGroupCmd(args, io.Discard, env(nil)); !errors.Is(err, errBadFlag) {
			t.Errorf("%q: %v, want a flag error", args, err)
		}
	}
}

// fakeMember hands out deliveries and records the acks.
type fakeMember struct {
	deliveries []client.Delivery
	// ackErr is returned by the ack of the delivery with this cursor.
	ackErr map[string]error
	acks   []string
	// cancel, when set, is called after the last delivery is taken.
	cancel context.CancelFunc
}

func (f *fakeMember) Next(ctx context.Context) (client.Delivery, error) {
	if len(f.deliveries) == 0 {
		if f.cancel != nil {
			f.cancel()
		}
		<-ctx.Done()
		return client.Delivery{}, ctx.Err()
	}
	d := f.deliveries[0]
	f.deliveries = f.deliveries[1:]
	return d, nil
}

func (f *fakeMember) Ack(ctx context.Context, d client.Delivery) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	f.acks = append(f.acks, fmt.Sprintf("%s:%d", d.Cursor, len(d.Records)))
	return f.ackErr[string(d.Cursor)]
}

// deliveries returns deliveries of shard 1 with n[i] records each, cursors
// "c0", "c1"…, offsets counting up from 0.
func deliveries(n ...int) []client.Delivery {
	var out []client.Delivery
	off := uint64(0)
	for i, k := range n {
		d := client.Delivery{Cursor: client.Cursor(fmt.Sprint("c", i))}
		for range k {
			d.Records = append(d.Records, client.GroupRecord{Shard: 1, Offset: off, Attempts: 1, Payload: []byte(fmt.Sprint("r", off))})
			off++
		}
		out = append(out, d)
	}
	return out
}

func TestConsumeGroup(t *testing.T) {
	stale := fmt.Errorf("ack: %w", client.ErrStaleCursor)
	tests := []struct {
		name      string
		count     int
		member    fakeMember
		wantOut   string
		wantAcks  string
		wantErr   error
		wantWarns int
	}{
		{name: "every delivery acked until interrupted", member: fakeMember{deliveries: deliveries(2, 1)},
			wantOut: "1 0 r0\n1 1 r1\n1 2 r2\n", wantAcks: "[c0:2 c1:1]"},
		{name: "count at a delivery's end", count: 3, member: fakeMember{deliveries: deliveries(2, 1, 4)},
			wantOut: "1 0 r0\n1 1 r1\n1 2 r2\n", wantAcks: "[c0:2 c1:1]"},
		{name: "count inside a delivery leaves it unacked", count: 3, member: fakeMember{deliveries: deliveries(2, 3)},
			wantOut: "1 0 r0\n1 1 r1\n1 2 r2\n", wantAcks: "[c0:2]"},
		{name: "count inside the first delivery", count: 1, member: fakeMember{deliveries: deliveries(5)},
			wantOut: "1 0 r0\n", wantAcks: "[]"},
		{name: "stale cursor goes on", member: fakeMember{deliveries: deliveries(1, 1), ackErr: map[string]error{"c0": stale}},
			wantOut: "1 0 r0\n1 1 r1\n", wantAcks: "[c0:1 c1:1]", wantWarns: 1},
		{name: "other ack errors end it", member: fakeMember{deliveries: deliveries(1, 1), ackErr: map[string]error{"c0": client.ErrSessionExpired}},
			wantOut: "1 0 r0\n", wantAcks: "[c0:1]", wantErr: client.ErrSessionExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tc.member.cancel = cancel // interrupt once the deliveries run out
			cmd := &subCmd{conn: &clientFlags{timeout: defaultTimeout}, count: tc.count}
			var buf, warn bytes.Buffer
			out := bufio.NewWriter(&buf)
			err := cmd.consumeGroup(ctx, &tc.member, out, &warn)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if buf.String() != tc.wantOut || fmt.Sprint(tc.member.acks) != tc.wantAcks {
				t.Fatalf("printed %q, acks %v; want %q, %s", buf.String(), tc.member.acks, tc.wantOut, tc.wantAcks)
			}
			if got := strings.Count(warn.String(), "\n"); got != tc.wantWarns {
				t.Fatalf("stderr %q, want %d lines", warn.String(), tc.wantWarns)
			}
		})
	}
}

// A delivery taken just before an interrupt is printed and still acked.
func TestConsumeGroupAcksAfterInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := &interruptingMember{fakeMember: fakeMember{deliveries: deliveries(2)}, interrupt: cancel}
	cmd := &subCmd{conn: &clientFlags{timeout: defaultTimeout}}
	var buf bytes.Buffer
	out := bufio.NewWriter(&buf)
	if err := cmd.consumeGroup(ctx, m, out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "1 0 r0\n1 1 r1\n" || fmt.Sprint(m.acks) != "[c0:2]" {
		t.Fatalf("printed %q, acks %v", buf.String(), m.acks)
	}
}

// interruptingMember cancels ctx as it hands out each delivery.
type interruptingMember struct {
	fakeMember
	interrupt context.CancelFunc
}

func (m *interruptingMember) Next(ctx context.Context) (client.Delivery, error) {
	if ctx.Err() != nil {
		return client.Delivery{}, ctx.Err()
	}
	d, err := m.fakeMember.Next(ctx)
	m.interrupt()
	return d, err
}

// fakeDeadLetters serves pages of dead letters of shards [0, shards) as the
// node does: shard then offset order, at most per (or limit) a page.
type fakeDeadLetters struct {
	letters []client.DeadLetter
	per     int
	calls   []string
}

func (f *fakeDeadLetters) list(ctx context.Context, shard uint32, from uint64, limit int) ([]client.DeadLetter, bool, error) {
	if shard == client.AllShards {
		f.calls = append(f.calls, fmt.Sprintf("all@%d", from))
	} else {
		f.calls = append(f.calls, fmt.Sprintf("%d@%d", shard, from))
	}
	if limit <= 0 || limit > f.per {
		limit = f.per
	}
	var out []client.DeadLetter
	for _, dl := range f.letters {
		if (shard != client.AllShards && dl.Shard != shard) || dl.Offset < from {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, dl)
	}
	return out, false, nil
}

func TestListDeadLetters(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	dl := func(shard uint32, off uint64) client.DeadLetter {
		return client.DeadLetter{Shard: shard, Offset: off, Attempts: 5, DeadAt: at, Reason: "max attempts"}
	}
	letters := []client.DeadLetter{dl(0, 1), dl(0, 4), dl(0, 9), dl(1, 2), dl(3, 0), dl(3, 7)}
	line := func(shard uint32, off uint64) string {
		return fmt.Sprintf("%d %d 5 2026-01-02T03:04:05Z max attempts\n", shard, off)
	}
	all := line(0, 1) + line(0, 4) + line(0, 9) + line(1, 2) + line(3, 0) + line(3, 7)
	tests := []struct {
		name      string
		cmd       groupCmd
		per       int
		wantOut   string
		wantCalls string
		wantNote  string
	}{
		{name: "one page", cmd: groupCmd{shard: client.AllShards}, per: 10, wantOut: all, wantCalls: "[all@0]"},
		{name: "every shard, paged shard by shard", cmd: groupCmd{shard: client.AllShards}, per: 2, wantOut: all,
			wantCalls: "[all@0 0@5 1@0 2@0 3@0]"},
		{name: "every shard from an offset", cmd: groupCmd{shard: client.AllShards, from: 2}, per: 2,
			wantOut: line(0, 4) + line(0, 9) + line(1, 2) + line(3, 7), wantCalls: "[all@2 0@10 1@2 2@2 3@2]"},
		{name: "one shard", cmd: groupCmd{shard: 0}, per: 1, wantOut: line(0, 1) + line(0, 4) + line(0, 9),
			wantCalls: "[0@0 0@2 0@5]"},
		{name: "limit", cmd: groupCmd{shard: client.AllShards, limit: 3}, per: 10, wantOut: line(0, 1) + line(0, 4) + line(0, 9),
			wantCalls: "[all@0]", wantNote: "more dead letters: go on with --shard 0 --from 10\n"},
		{name: "limit over pages", cmd: groupCmd{shard: client.AllShards, limit: 4}, per: 3,
			wantOut: line(0, 1) + line(0, 4) + line(0, 9) + line(1, 2), wantCalls: "[all@0 0@10 1@0]"},
		{name: "none", cmd: groupCmd{shard: 2}, per: 10, wantOut: "", wantCalls: "[2@0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDeadLetters{letters: letters, per: tc.per}
			shardCount := func(context.Context) (int, error) { return 4, nil }
			var buf, note bytes.Buffer
			out := bufio.NewWriter(&buf)
			err := tc.cmd.listDeadLetters(context.Background(), f.list, shardCount, out, &note)
			out.Flush()
			if err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.wantOut || fmt.Sprint(f.calls) != tc.wantCalls || note.String() != tc.wantNote {
				t.Fatalf("printed %q, calls %v, note %q;\nwant    %q, %s, %q", buf.String(), f.calls, note.String(), tc.wantOut, tc.wantCalls, tc.wantNote)
			}
		})
	}
}

func TestSettledNote(t *testing.T) {
	tests := []struct {
		op             string
		settled, asked int
		noun, want     string
	}{
		{"ack", 2, 2, "offset", "acked 2 of 2 offsets"},
		{"ack", 1, 1, "offset", "acked 1 of 1 offset"},
		{"ack", 2, 3, "offset", "acked 2 of 3 offsets; 1 was settled already"},
		{"ack", 0, 2, "record", "acked 0 of 2 records; 2 were settled already"},
		{"nack", 0, 1, "offset", "nacked 0 of 1 offset; 1 was not claimed (settled already, or waiting to be delivered again)"},
		{"nack", 3, 3, "offset", "nacked 3 of 3 offsets"},
	}
	for _, tc := range tests {
		if got := settledNote(tc.op, tc.settled, tc.asked, tc.noun); got != tc.want {
			t.Errorf("settledNote(%s, %d, %d) = %q, want %q", tc.op, tc.settled, tc.asked, got, tc.want)
		}
	}
	if n := distinctOffsets([]uint64{4, 1, 4, 4, 0}); n != 3 {
		t.Errorf("distinctOffsets: %d, want 3", n)
	}
}

func TestGroupOutputFormats(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	rec := client.GroupRecord{Shard: 2, Offset: 9, Attempts: 3, Timestamp: ts, Key: []byte("k"), Payload: []byte("hello world")}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	_ = writeGroupRecordText(w, rec)
	_ = writeEventText(w, eventOf(rec))
	_ = writeGroupRecordJSON(w, rec)
	rec.Key, rec.Payload = nil, []byte{0xff}
	_ = writeGroupRecordJSON(w, rec)
	cmd := &groupCmd{}
	letter := client.DeadLetter{Shard: 1, Offset: 4, Attempts: 5, DeadAt: ts, Reason: "max attempts"}
	_ = cmd.writeDeadLetter(w, letter)
	cmd.json = true
	_ = cmd.writeDeadLetter(w, letter)
	w.Flush()
	want := "2 9 3 hello world\n" +
		"2 9 hello world\n" +
		`{"shard":2,"offset":9,"timestamp":"2026-01-02T03:04:05.000000006Z","key":"k","payload":"hello world","attempts":3}` + "\n" +
		`{"shard":2,"offset":9,"timestamp":"2026-01-02T03:04:05.000000006Z","key":null,"payload_base64":"/w==","attempts":3}` + "\n" +
		"1 4 5 2026-01-02T03:04:05Z max attempts\n" +
		`{"shard":1,"offset":4,"attempts":5,"dead_at":"2026-01-02T03:04:05.000000006Z","reason":"max attempts"}` + "\n"
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}

	name := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	info := client.GroupInfo{Group: "g", Generation: 4, Visibility: 30 * time.Second, Session: 10 * time.Second, MaxAttempts: 5,
		Shards:  []client.GroupShardInfo{{Shard: 0, Committed: 10, Delivered: 12, Tail: 20, Claims: 2}, {Shard: 1, Committed: 3, Delivered: 3, Tail: 3, DeadLetters: 1}},
		Members: []client.GroupMemberInfo{{ID: "m1", Shards: []uint32{0, 1}, Window: 100, InFlight: 2, Idle: 1500 * time.Millisecond}, {ID: "m2", Window: 50}}}
	buf.Reset()
	if err := writeGroupInfo(&buf, name, info); err != nil {
		t.Fatal(err)
	}
	want = "group g on acme/shop/orders: generation=4 visibility=30s session=10s max_attempts=5 lag=10\n" +
		"SHARD  COMMITTED  DELIVERED  TAIL  LAG  CLAIMS  OWED  DEAD_LETTERS\n" +
		"0      10         12         20    10   2       0     0\n" +
		"1      3          3          3     0    0       0     1\n" +
		"MEMBER  SHARDS  WINDOW  IN_FLIGHT  IDLE\n" +
		"m1      0,1     100     2          1.5s\n" +
		"m2      -       50      0          0s\n"
	if buf.String() != want {
		t.Fatalf("describe:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	_ = writeGroupInfo(&buf, name, client.GroupInfo{Group: "g"})
	if !strings.HasSuffix(buf.String(), "no push members\n") {
		t.Fatalf("describe without members:\n%s", buf.String())
	}
	b, err := json.Marshal(groupInfoJSONOf(name, info))
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"stream":"acme/shop/orders","group":"g","generation":4,"visibility_ms":30000,"session_ms":10000,"max_attempts":5,"lag":10,` +
		`"shards":[{"shard":0,"committed":10,"delivered":12,"tail":20,"lag":10,"claims":2,"owed":0,"dead_letters":0},` +
		`{"shard":1,"committed":3,"delivered":3,"tail":3,"lag":0,"claims":0,"owed":0,"dead_letters":1}],` +
		`"members":[{"id":"m1","shards":[0,1],"window":100,"in_flight":2,"idle_ms":1500},{"id":"m2","shards":[],"window":50,"in_flight":0,"idle_ms":0}]}`
	if string(b) != wantJSON {
		t.Fatalf("describe --json:\n%s\nwant:\n%s", b, wantJSON)
	}
}

// TestGroupCLIAgainstNode runs `herald group` and `herald sub --group`
// against a real node whose groups give a record two attempts.
func TestGroupCLIAgainstNode(t *testing.T) {
	node := startNode(t, t.TempDir(), "HERALD_GROUP_MAX_ATTEMPTS=2")
	conn := []string{"--server", node.addr, "--ca", filepath.Join(node.dataDir, "tls", "ca.pem")}
	run := func(f func([]string, io.Reader, io.Writer, io.Writer) int, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := f(append(args, conn...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	// group runs `herald group OP orders --group g ARGS...` and wants exit
	// status 0.
	const name = "acme/shop/orders"
	group := func(op string, args ...string) string {
		t.Helper()
		code, out, errOut := run(runGroup, append([]string{op, name, "--group", "g"}, args...)...)
		if code != 0 {
			t.Fatalf("group %s %q: exit %d, %q %q", op, args, code, out, errOut)
		}
		return out
	}
	describe := func() groupInfoJSON {
		t.Helper()
		var info groupInfoJSON
		if err := json.Unmarshal([]byte(group("describe", "--json")), &info); err != nil {
			t.Fatal(err)
		}
		return info
	}
	if code, out, errOut := run(runStream, "create", name); code != 0 {
		t.Fatalf("stream create: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(runPub, name, "r0", "r1", "r2", "r3", "r4"); code != 0 || out != "0 0\n0 1\n0 2\n0 3\n0 4\n" {
		t.Fatalf("pub: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(runGroup, "describe", name, "--group", "g"); code != 1 || !strings.Contains(errOut, "group_not_found") {
		t.Fatalf("describe of an unused group: %d %q", code, errOut)
	}

	// Claim three, ack two, nack one: it comes back first, on its second
	// attempt, and a second nack makes it a dead letter.
	if out := group("poll", "--shard", "0", "--max", "3", "--wait", "1s"); out != "0 0 1 r0\n0 1 1 r1\n0 2 1 r2\n" {
		t.Fatalf("poll: %q", out)
	}
	if out := group("ack", "--shard", "0", "0", "1"); out != "acked 2 of 2 offsets\n" {
		t.Fatalf("ack: %q", out)
	}
	// The output is what the node settled, not what was typed.
	if out := group("ack", "--shard", "0", "1", "0", "1"); out != "acked 0 of 2 offsets; 2 were settled already\n" {
		t.Fatalf("second ack: %q", out)
	}
	if out := group("nack", "--shard", "0", "2"); out != "nacked 1 of 1 offset\n" {
		t.Fatalf("nack: %q", out)
	}
	if out := group("nack", "--shard", "0", "2", "0"); out != "nacked 0 of 2 offsets; 2 were not claimed (settled already, or waiting to be delivered again)\n" {
		t.Fatalf("nack of records not claimed: %q", out)
	}
	if out := group("poll", "--shard", "0", "--max", "1"); out != "0 2 2 r2\n" {
		t.Fatalf("poll after nack: %q", out)
	}
	group("nack", "--shard", "0", "2")
	code, out, errOut := run(runGroup, "poll", name, "--group", "g", "--shard", "0", "--ack", "--json", "--wait", "1s")
	if code != 0 || errOut != "acked 2 of 2 records\n" {
		t.Fatalf("poll --ack --json: exit %d, stderr %q", code, errOut)
	}
	var recs []groupRecordJSON
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r groupRecordJSON
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("poll --json line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 || recs[0].Offset != 3 || *recs[0].Payload != "r3" || recs[1].Offset != 4 || recs[1].Attempts != 1 {
		t.Fatalf("poll --ack --json: %q", out)
	}

	out = group("dead-letters")
	fields := strings.SplitN(strings.TrimSpace(out), " ", 5)
	if len(fields) != 5 || fields[0] != "0" || fields[1] != "2" || fields[2] != "2" || fields[4] == "" || strings.Count(out, "\n") != 1 {
		t.Fatalf("dead-letters: %q", out)
	}
	if _, err := time.Parse(time.RFC3339, fields[3]); err != nil {
		t.Fatalf("dead-letters dead_at: %v", err)
	}
	var letter deadLetterJSON
	if err := json.Unmarshal([]byte(group("dead-letters", "--shard", "0", "--json")), &letter); err != nil || letter.Offset != 2 || letter.Attempts != 2 {
		t.Fatalf("dead-letters --json: %+v %v", letter, err)
	}
	if out := group("dead-letters", "--shard", "0", "--from", "3"); out != "" {
		t.Fatalf("dead-letters --from 3: %q", out)
	}
	if out := group("describe"); !strings.HasPrefix(out, "group g on acme/shop/orders: generation=") ||
		!strings.Contains(out, "max_attempts=2 lag=0\n") || !strings.Contains(out, "DEAD_LETTERS") || !strings.HasSuffix(out, "no push members\n") {
		t.Fatalf("describe:\n%s", out)
	}
	if info := describe(); len(info.Shards) != 1 || info.Shards[0] != (groupShardJSON{Committed: 5, Delivered: 5, Tail: 5, DeadLetters: 1}) {
		t.Fatalf("describe --json: %+v", info)
	}

	// Redrive it: delivered again with fresh attempts. Then dead again,
	// and discarded.
	if out := group("redrive"); out != "redriven 1\n" {
		t.Fatalf("redrive: %q", out)
	}
	if out := group("poll", "--shard", "0"); out != "0 2 1 r2\n" {
		t.Fatalf("poll after redrive: %q", out)
	}
	group("nack", "--shard", "0", "2")
	group("poll", "--shard", "0")
	group("nack", "--shard", "0", "2")
	if out := group("redrive", "--shard", "0", "3"); out != "redriven 0\n" {
		t.Fatalf("redrive of a record that is no dead letter: %q", out)
	}
	if out := group("discard", "--shard", "0", "2"); out != "discarded 1\n" {
		t.Fatalf("discard: %q", out)
	}
	if out := group("dead-letters"); out != "" {
		t.Fatalf("dead-letters after discard: %q", out)
	}
	if info := describe(); info.Shards[0] != (groupShardJSON{Committed: 5, Delivered: 5, Tail: 5}) || info.MaxAttempts != 2 {
		t.Fatalf("describe --json at the end: %+v", info)
	}

	// Errors: one line, exit status 1; usage errors 2.
	if code, _, errOut := run(runGroup, "ack", name, "--group", "g", "--shard", "0", "99"); code != 1 ||
		!strings.HasPrefix(errOut, "herald group ack: not_delivered") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("ack of an undelivered offset: %d %q", code, errOut)
	}
	if code, _, errOut := run(runGroup, "poll", name, "--shard", "0"); code != 2 || !strings.Contains(errOut, "--group is required") {
		t.Fatalf("poll without --group: %d %q", code, errOut)
	}
	if code, out, errOut := run(runStream, "create", "acme/shop/scratch", "--ephemeral"); code != 0 {
		t.Fatalf("stream create --ephemeral: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(runGroup, "poll", "acme/shop/scratch", "--group", "g", "--shard", "0", "--wait", "0s"); code != 1 || !strings.Contains(errOut, "stream_not_durable") {
		t.Fatalf("poll of an ephemeral stream: %d %q", code, errOut)
	}
	if code, _, errOut := run(runSub, "acme/shop/scratch", "--group", "g"); code != 1 ||
		!strings.HasPrefix(errOut, "herald sub: join group g on acme/shop/scratch: stream_not_durable") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("sub --group of an ephemeral stream: %d %q", code, errOut)
	}

	// sub --group: one record a delivery, three of them, all acked; the
	// next member gets the other two.
	const live = "acme/shop/live"
	run(runStream, "create", live)
	run(runPub, live, "a", "b", "c", "d", "e")
	if code, out, errOut := run(runSub, live, "--group", "live", "--max", "1", "--count", "3"); code != 0 || out != "0 0 a\n0 1 b\n0 2 c\n" {
		t.Fatalf("sub --group --count 3: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(runGroup, "describe", live, "--group", "live", "--json")
	var info groupInfoJSON
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.Shards[0].Committed != 3 {
		t.Fatalf("describe after sub --group --count 3: %d %q %q %v", code, out, errOut, err)
	}
	code, out, errOut = run(runSub, live, "--group", "live", "--member", "second", "--count", "2", "--json")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r groupRecordJSON
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Attempts < 1 {
			t.Fatalf("sub --group --json line %q: %v", line, err)
		}
		got = append(got, fmt.Sprintf("%d:%s", r.Offset, *r.Payload))
	}
	sort.Strings(got)
	if code != 0 || fmt.Sprint(got) != "[3:d 4:e]" {
		t.Fatalf("second sub --group: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(runGroup, "describe", live, "--group", "live", "--json")
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.Shards[0].Committed != 5 {
		t.Fatalf("describe at the end: %d %q %v", code, out, err)
	}
}

// The lag a group shows follows the shard's tail with nobody consuming:
// ten records, three consumed, fifty more published, and both `herald
// group describe` and herald_group_lag say 57 at once (they said 7 for as
// long as anyone watched, before).
func TestGroupLagFollowsTailWithNoConsumer(t *testing.T) {
	node := startNode(t, t.TempDir())
	conn := []string{"--server", node.addr, "--ca", filepath.Join(node.dataDir, "tls", "ca.pem")}
	run := func(f func([]string, io.Reader, io.Writer, io.Writer) int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := f(append(args, conn...), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("%q: exit %d, %q %q", args, code, out.String(), errOut.String())
		}
		return out.String()
	}
	const name = "acme/shop/backlog"
	run(runStream, "create", name)
	publish := func(n int) {
		t.Helper()
		msgs := make([]string, n)
		for i := range msgs {
			msgs[i] = fmt.Sprintf("m%d", i)
		}
		run(runPub, append([]string{name}, msgs...)...)
	}
	publish(10)
	if out := run(runSub, name, "--group", "billing", "--count", "3"); strings.Count(out, "\n") != 3 {
		t.Fatalf("sub --group --count 3: %q", out)
	}
	publish(50) // the consumer is gone
	var info groupInfoJSON
	if err := json.Unmarshal([]byte(run(runGroup, "describe", name, "--group", "billing", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	if s := info.Shards[0]; info.Lag != 57 || s.Lag != 57 || s.Tail != 60 || s.Committed != 3 {
		t.Fatalf("describe --json: lag %d, shard %+v", info.Lag, s)
	}
	if out := run(runGroup, "describe", name, "--group", "billing"); !strings.Contains(out, " lag=57\n") {
		t.Fatalf("describe:\n%s", out)
	}
	resp, err := http.Get("http://" + node.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := `herald_group_lag{group="billing",stream="acme/shop/backlog"} 57`; !strings.Contains(string(body), want+"\n") {
		t.Fatalf("metrics lack %s:\n%s", want, grepLines(string(body), "herald_group_lag"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
