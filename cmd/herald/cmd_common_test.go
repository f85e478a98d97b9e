package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseInterleaved(t *testing.T) {
	tests := []struct {
		args    []string
		wantPos []string
		wantN   int
		wantV   bool
	}{
		{args: []string{"a", "b"}, wantPos: []string{"a", "b"}},
		{args: []string{"-n", "3", "a"}, wantPos: []string{"a"}, wantN: 3},
		{args: []string{"a", "--n", "3", "b", "-v"}, wantPos: []string{"a", "b"}, wantN: 3, wantV: true},
		{args: []string{"a", "b", "--n=4"}, wantPos: []string{"a", "b"}, wantN: 4},
		{args: []string{"a", "--", "-v", "--n", "5"}, wantPos: []string{"a", "-v", "--n", "5"}},
		{args: []string{"-v", "--", "-x"}, wantPos: []string{"-x"}, wantV: true},
		{args: nil, wantPos: nil},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			n := fs.Int("n", 0, "")
			v := fs.Bool("v", false, "")
			pos, err := parseInterleaved(fs, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(pos) != fmt.Sprint(tc.wantPos) || *n != tc.wantN || *v != tc.wantV {
				t.Fatalf("pos %q n %d v %v; want %q %d %v", pos, *n, *v, tc.wantPos, tc.wantN, tc.wantV)
			}
		})
	}

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseInterleaved(fs, []string{"a", "--nope"}); !errors.Is(err, errFlagsReported) {
		t.Fatalf("unknown flag: %v", err)
	}
}

func TestClientFlags(t *testing.T) {
	parse := func(e map[string]string, args ...string) *clientFlags {
		t.Helper()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := registerClientFlags(fs, env(e))
		if _, err := parseInterleaved(fs, args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := parse(nil)
	if f.server != "127.0.0.1:7400" || f.token != "" || f.ca != "" || f.insecure || f.timeout != 10*time.Second {
		t.Fatalf("defaults: %+v", f)
	}
	f = parse(map[string]string{"HERALD_SERVER": "node:1", "HERALD_TOKEN": "s3cr3t-tok"})
	if f.server != "node:1" {
		t.Fatalf("from env: %+v", f)
	}
	// HERALD_TOKEN is used (one more Dial option than without it) but is
	// never a flag default, which usage output would print.
	withEnv := f.options(env(map[string]string{"HERALD_TOKEN": "s3cr3t-tok"}), func(string) bool { return false })
	without := f.options(env(nil), func(string) bool { return false })
	if len(withEnv) != len(without)+1 {
		t.Fatalf("HERALD_TOKEN not used: %d options with it, %d without", len(withEnv), len(without))
	}
	var usage strings.Builder
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&usage)
	registerClientFlags(fs, env(map[string]string{"HERALD_TOKEN": "s3cr3t-tok"}))
	fs.PrintDefaults()
	if strings.Contains(usage.String(), "s3cr3t-tok") {
		t.Fatalf("usage prints the token:\n%s", usage.String())
	}
	f = parse(map[string]string{"HERALD_SERVER": "node:1"}, "x", "--server", "other:2", "--insecure", "--timeout", "3s", "--ca", "my.pem")
	if f.server != "other:2" || !f.insecure || f.timeout != 3*time.Second || f.ca != "my.pem" {
		t.Fatalf("flags over env: %+v", f)
	}
}

func TestCAFileDefault(t *testing.T) {
	dataDir := "/srv/herald"
	dataCA := filepath.Join(dataDir, "tls", "ca.pem")
	tests := []struct {
		name   string
		ca     string
		env    map[string]string
		exists []string
		want   string
	}{
		{name: "flag wins", ca: "x.pem", exists: []string{devCAPath}, want: "x.pem"},
		{name: "working directory", env: map[string]string{"HERALD_DATA_DIR": dataDir}, exists: []string{devCAPath, dataCA}, want: devCAPath},
		{name: "data dir", env: map[string]string{"HERALD_DATA_DIR": dataDir}, exists: []string{dataCA}, want: dataCA},
		{name: "data dir without a CA", env: map[string]string{"HERALD_DATA_DIR": dataDir}, want: ""},
		{name: "nothing", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &clientFlags{ca: tc.ca}
			exists := func(p string) bool {
				for _, e := range tc.exists {
					if p == e {
						return true
					}
				}
				return false
			}
			if got := f.caFile(env(tc.env), exists); got != tc.want {
				t.Fatalf("caFile = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseStreamCmd(t *testing.T) {
	cmd, err := parseStreamCmd([]string{"create", "acme/shop/orders", "--shards", "4", "--ephemeral"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.op != "create" || cmd.name != (client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}) ||
		cmd.config != (client.StreamConfig{Shards: 4}) {
		t.Fatalf("create: %+v", cmd)
	}
	cmd, err = parseStreamCmd([]string{"create", "orders", "--routing", "jump", "--overflow", "block", "--queue-capacity", "128",
		"--queue-max-bytes", "1048576", "--retention-age", "72h", "--retention-bytes", "1000000"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := client.StreamConfig{Shards: 1, Durable: true, Routing: client.RoutingJump, Overflow: client.OverflowBlock,
		QueueCapacity: 128, QueueMaxBytes: 1 << 20, RetentionAge: 72 * time.Hour, RetentionBytes: 1000000}
	if cmd.config != want {
		t.Fatalf("create config %+v, want %+v", cmd.config, want)
	}
	for s, want := range map[string]client.Routing{"hash": client.RoutingHash, "jump": client.RoutingJump} {
		if got, err := parseRouting(s); err != nil || got != want {
			t.Errorf("--routing %s = %v, %v", s, got, err)
		}
	}
	for s, want := range map[string]client.Overflow{"drop_new": client.OverflowDropNew, "drop_old": client.OverflowDropOld, "block": client.OverflowBlock} {
		if got, err := parseOverflow(s); err != nil || got != want {
			t.Errorf("--overflow %s = %v, %v", s, got, err)
		}
	}
	cmd, err = parseStreamCmd([]string{"--server", "h:1", "describe", "orders"}, io.Discard, env(nil))
	if err != nil || cmd.op != "describe" || cmd.name.String() != "default/default/orders" || cmd.conn.server != "h:1" {
		t.Fatalf("describe: %+v, %v", cmd, err)
	}
	cmd, err = parseStreamCmd([]string{"delete", "t/n/s"}, io.Discard, env(nil))
	if err != nil || cmd.op != "delete" || cmd.name.String() != "t/n/s" {
		t.Fatalf("delete: %+v, %v", cmd, err)
	}
	// No tenant: the node lists the credentials' tenant ("default" without
	// authentication).
	cmd, err = parseStreamCmd([]string{"list"}, io.Discard, env(nil))
	if err != nil || cmd.tenant != "" || cmd.namespace != "" {
		t.Fatalf("list: %+v, %v", cmd, err)
	}
	cmd, err = parseStreamCmd([]string{"list", "acme/shop"}, io.Discard, env(nil))
	if err != nil || cmd.tenant != "acme" || cmd.namespace != "shop" {
		t.Fatalf("list acme/shop: %+v, %v", cmd, err)
	}
	for _, args := range [][]string{
		nil,
		{"drop", "orders"},
		{"create"},
		{"delete"},
		{"create", "a/b/c/d"},
		{"create", "orders", "--shards", "0"},
		{"create", "orders", "--routing", "modulo"},
		{"create", "orders", "--overflow", "drop"},
		{"create", "orders", "--queue-capacity", "-1"},
		{"create", "orders", "--queue-capacity", "4294967296"},
		{"create", "orders", "--queue-max-bytes", "-1"},
		{"create", "orders", "--retention-age", "-1h"},
		{"create", "orders", "--retention-bytes", "-5"},
		{"describe", "a", "b"},
		{"describe", "orders", "--shards", "2"},
		{"delete", "orders", "--retention-age", "1h"},
		{"list", "--ephemeral"},
		{"list", "a/b/c"},
	} {
		if _, err := parseStreamCmd(args, io.Discard, env(nil)); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if _, err := parseStreamCmd([]string{"create", "orders", "--retention-age", "soon"}, io.Discard, env(nil)); !errors.Is(err, errFlagsReported) {
		t.Errorf("bad duration: %v", err)
	}
}

func TestParsePubCmd(t *testing.T) {
	cmd, err := parsePubCmd([]string{"orders", "hello", "--key", "k", "world", "--ack", "message", "--batch", "2"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.name.Stream != "orders" || fmt.Sprint(cmd.messages) != "[hello world]" || cmd.key != "k" ||
		cmd.ack != client.AckPerMessage || cmd.batch != 2 || cmd.count != 0 {
		t.Fatalf("pub: %+v", cmd)
	}
	cmd, err = parsePubCmd([]string{"--count", "1000", "--size", "64", "t/n/s"}, io.Discard, env(nil))
	if err != nil || cmd.count != 1000 || cmd.size != 64 || cmd.ack != client.AckPerBatch || cmd.batch != 1 {
		t.Fatalf("pub --count: %+v, %v", cmd, err)
	}
	for mode, want := range map[string]client.AckMode{"none": client.AckNone, "message": client.AckPerMessage, "batch": client.AckPerBatch} {
		if got, err := parseAckMode(mode); err != nil || got != want {
			t.Errorf("--ack %s = %v, %v", mode, got, err)
		}
	}
	cmd, err = parsePubCmd([]string{"orders", "a", "b", "--key", "k", "--if-offset", "0"}, io.Discard, env(nil))
	if err != nil || !cmd.conditional || cmd.ifOffset != 0 || fmt.Sprint(cmd.messages) != "[a b]" {
		t.Fatalf("pub --if-offset: %+v, %v", cmd, err)
	}
	cmd, err = parsePubCmd([]string{"orders", "--if-offset", "42"}, io.Discard, env(nil))
	if err != nil || !cmd.conditional || cmd.ifOffset != 42 {
		t.Fatalf("pub --if-offset 42: %+v, %v", cmd, err)
	}
	if cmd, _ := parsePubCmd([]string{"orders", "x"}, io.Discard, env(nil)); cmd.conditional {
		t.Fatal("pub without --if-offset is conditional")
	}
	for _, args := range [][]string{
		nil,
		{"orders", "--ack", "all"},
		{"orders", "--batch", "0"},
		{"orders", "m", "--count", "3"},
		{"orders", "--count", "-1"},
		{"orders", "--if-offset", "1", "--count", "3"},
		{"orders", "m", "--if-offset", "1", "--ack", "none"},
		{"orders", "m", "--if-offset", "1", "--batch", "2"},
	} {
		if _, err := parsePubCmd(args, io.Discard, env(nil)); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

func TestPubSource(t *testing.T) {
	drain := func(next func() ([]byte, bool, error)) []string {
		var out []string
		for {
			p, ok, err := next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return out
			}
			out = append(out, string(p))
		}
	}
	cmd := &pubCmd{messages: []string{"a", "b"}}
	if got := drain(cmd.source(strings.NewReader("ignored"))); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("messages: %q", got)
	}
	cmd = &pubCmd{}
	if got := drain(cmd.source(strings.NewReader("one\ntwo\n\nfour"))); fmt.Sprint(got) != "[one two  four]" {
		t.Fatalf("stdin: %q", got)
	}
	cmd = &pubCmd{count: 3, size: 5}
	if got := drain(cmd.source(nil)); fmt.Sprint(got) != "[1 xxx 2 xxx 3 xxx]" {
		t.Fatalf("generated: %q", got)
	}
	if got := string(generatedPayload(12345, 3)); got != "123" {
		t.Fatalf("short payload %q", got)
	}
}

func TestParseSubCmd(t *testing.T) {
	cmd, err := parseSubCmd([]string{"orders", "--from", "42", "--shard", "2", "--count", "10", "--queue", "64", "--json"}, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.name.Stream != "orders" || !cmd.oneShard || cmd.shard != 2 || cmd.count != 10 || cmd.queue != 64 || !cmd.json || cmd.from == nil {
		t.Fatalf("sub: %+v", cmd)
	}
	if len(cmd.subscribeOptions()) != 4 {
		t.Fatalf("sub --shard: %d options, want from, queue, auto-resume and the shard", len(cmd.subscribeOptions()))
	}
	cmd, err = parseSubCmd([]string{"orders"}, io.Discard, env(nil))
	if err != nil || cmd.oneShard || len(cmd.subscribeOptions()) != 3 {
		t.Fatalf("sub without --shard: %+v, %v (every shard)", cmd, err)
	}
	cmd, err = parseSubCmd([]string{"orders", "--shard", "0"}, io.Discard, env(nil))
	if err != nil || !cmd.oneShard || cmd.shard != 0 {
		t.Fatalf("sub --shard 0: %+v, %v", cmd, err)
	}
	for _, from := range []string{"earliest", "latest", "0", "18446744073709551615"} {
		if _, err := parseFrom(from); err != nil {
			t.Errorf("--from %s: %v", from, err)
		}
	}
	for _, args := range [][]string{
		nil,
		{"orders", "extra"},
		{"orders", "--from", "yesterday"},
		{"orders", "--from", "-1"},
		{"orders", "--shard", "4294967296"},
		{"orders", "--count", "-2"},
	} {
		if _, err := parseSubCmd(args, io.Discard, env(nil)); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if _, err := parseSubCmd([]string{"orders", "--groups", "g"}, io.Discard, env(nil)); !errors.Is(err, errFlagsReported) {
		t.Errorf("unknown flag: %v", err)
	}
}

func TestExitStatus(t *testing.T) {
	var buf bytes.Buffer
	if got := exitStatus(&buf, "sub", nil); got != 0 || buf.Len() != 0 {
		t.Fatalf("nil: %d %q", got, buf.String())
	}
	if got := exitStatus(&buf, "sub", usageErrorf("missing STREAM")); got != 2 {
		t.Fatalf("usage error: %d", got)
	}
	buf.Reset()
	if got := exitStatus(&buf, "sub", fmt.Errorf("connect: %w", client.ErrStreamNotFound)); got != 1 {
		t.Fatalf("error: %d", got)
	}
	if got := buf.String(); got != "herald sub: connect: stream_not_found\n" {
		t.Fatalf("message %q", got)
	}
	buf.Reset()
	if got := exitStatus(&buf, "pub", fmt.Errorf("%w: %w", errFlagsReported, errors.New("bad flag"))); got != 2 || buf.Len() != 0 {
		t.Fatalf("reported flag error: %d %q", got, buf.String())
	}
	if got := exitStatus(&buf, "pub", fmt.Errorf("%w: %w", errFlagsReported, flag.ErrHelp)); got != 0 {
		t.Fatalf("help: %d", got)
	}
	buf.Reset()
	if got := exitStatus(&buf, "pub", errRefused); got != 1 || buf.Len() != 0 {
		t.Fatalf("refused conditional publish: %d %q", got, buf.String())
	}
}

func TestOutputFormats(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	info := client.StreamInfo{Name: client.StreamName{Tenant: "a", Namespace: "b", Stream: "c"},
		Config: client.StreamConfig{Shards: 2, Durable: true}, Created: ts, Tails: []uint64{10, 0}}
	if got, want := formatStreamInfo(info), "a/b/c shards=2 routing=hash durable=true overflow=drop_new queue_capacity=0 queue_max_bytes=0 "+
		"retention_age=0s retention_bytes=0 created=2026-01-02T03:04:05Z tails=10,0"; got != want {
		t.Fatalf("stream info %q, want %q", got, want)
	}
	info.Config = client.StreamConfig{Shards: 2, Routing: client.RoutingJump, Overflow: client.OverflowDropOld,
		QueueCapacity: 64, QueueMaxBytes: 4096, RetentionAge: 90 * time.Minute, RetentionBytes: 1 << 20}
	if got, want := formatStreamInfo(info), "a/b/c shards=2 routing=jump durable=false overflow=drop_old queue_capacity=64 queue_max_bytes=4096 "+
		"retention_age=1h30m0s retention_bytes=1048576 created=2026-01-02T03:04:05Z tails=10,0"; got != want {
		t.Fatalf("stream info %q, want %q", got, want)
	}

	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	ev := client.Event{Shard: 1, Offset: 7, Timestamp: ts, Key: []byte("k"), Payload: []byte("hello world")}
	_ = writeEventText(w, ev)
	_ = writeEventJSON(w, ev)
	ev.Key, ev.Payload = nil, []byte{0xff, 0xfe}
	_ = writeEventJSON(w, ev)
	w.Flush()
	want := "1 7 hello world\n" +
		`{"shard":1,"offset":7,"timestamp":"2026-01-02T03:04:05.000000006Z","key":"k","payload":"hello world"}` + "\n" +
		`{"shard":1,"offset":7,"timestamp":"2026-01-02T03:04:05.000000006Z","key":null,"payload_base64":"//4="}` + "\n"
	if buf.String() != want {
		t.Fatalf("events:\n%s\nwant:\n%s", buf.String(), want)
	}

	buf.Reset()
	_ = printAck(&buf, client.PublishAck{Shard: 3, Offset: 5, Count: 2})
	_ = printAck(&buf, client.PublishAck{Shard: 3, Offset: 7, Count: 2, Offsets: []uint64{7, 9}})
	if got := buf.String(); got != "3 5\n3 7\n3 9\n" {
		t.Fatalf("acks %q", got)
	}
}

// With --count, a group member's window is at most the count unless
// --window says otherwise: no delivery is cut short by the count.
func TestSubGroupWindowFollowsCount(t *testing.T) {
	cmd, err := parseSubCmd([]string{"orders", "--group", "g", "--count", "2"}, io.Discard, env(nil))
	if err != nil || cmd.window != 2 {
		t.Fatalf("--count 2: window %d, %v", cmd.window, err)
	}
	cmd, err = parseSubCmd([]string{"orders", "--group", "g", "--count", "2", "--window", "50"}, io.Discard, env(nil))
	if err != nil || cmd.window != 50 {
		t.Fatalf("--count 2 --window 50: window %d, %v", cmd.window, err)
	}
	cmd, err = parseSubCmd([]string{"orders", "--group", "g"}, io.Discard, env(nil))
	if err != nil || cmd.window != client.DefaultGroupWindow {
		t.Fatalf("no --count: window %d, %v", cmd.window, err)
	}
}
