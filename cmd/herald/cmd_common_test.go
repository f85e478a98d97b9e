package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/net/wire"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Flags may come before, between or after the positional arguments, "--"
// ends the flags, and Go-style single-dash long flags (-count 3) keep
// working, as they did before the CLI moved to cobra.
func TestFlagsAnywhere(t *testing.T) {
	tests := []struct {
		args      []string
		wantMsgs  []string
		wantKey   string
		wantBatch int
	}{
		{args: []string{"orders", "a", "b"}, wantMsgs: []string{"a", "b"}, wantBatch: 1},
		{args: []string{"--batch", "3", "orders", "a"}, wantMsgs: []string{"a"}, wantBatch: 3},
		{args: []string{"orders", "a", "--batch", "3", "b", "--key", "k"}, wantMsgs: []string{"a", "b"}, wantKey: "k", wantBatch: 3},
		{args: []string{"orders", "a", "b", "--batch=4"}, wantMsgs: []string{"a", "b"}, wantBatch: 4},
		{args: []string{"orders", "--", "--key", "-batch", "5"}, wantMsgs: []string{"--key", "-batch", "5"}, wantBatch: 1},
		{args: []string{"-key", "k", "orders", "-batch=2", "m"}, wantMsgs: []string{"m"}, wantKey: "k", wantBatch: 2},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd, err := parsePubCmd(tc.args, io.Discard, env(nil))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(cmd.messages) != fmt.Sprint(tc.wantMsgs) || cmd.key != tc.wantKey || cmd.batch != tc.wantBatch {
				t.Fatalf("messages %q key %q batch %d; want %q %q %d", cmd.messages, cmd.key, cmd.batch, tc.wantMsgs, tc.wantKey, tc.wantBatch)
			}
		})
	}
	if _, err := parsePubCmd([]string{"orders", "--nope"}, io.Discard, env(nil)); !errors.Is(err, errBadFlag) {
		t.Fatalf("unknown flag: %v", err)
	}
}

func TestClientFlags(t *testing.T) {
	parse := func(e map[string]string, args ...string) *clientFlags {
		t.Helper()
		cmd, err := parseSubCmd(append([]string{"orders"}, args...), io.Discard, env(e))
		if err != nil {
			t.Fatal(err)
		}
		return cmd.conn
	}
	f := parse(nil)
	if f.server != "127.0.0.1:7400" || f.token != "" || f.ca != "" || f.insecure || f.timeout != 10*time.Second || f.tenant != "default" {
		t.Fatalf("defaults: %+v", f)
	}
	f = parse(map[string]string{"HERALD_SERVER": "node:1", "HERALD_TOKEN": "s3cr3t-tok", "HERALD_CA": "env.pem"})
	if f.server != "node:1" || f.ca != "env.pem" || f.caFrom != "HERALD_CA" {
		t.Fatalf("from env: %+v", f)
	}
	// HERALD_TOKEN is used (one more Dial option than without it) but is
	// never a flag default, which usage output would print.
	withEnv := f.options(env(map[string]string{"HERALD_TOKEN": "s3cr3t-tok"}), func(string) bool { return false })
	without := f.options(env(nil), func(string) bool { return false })
	if len(withEnv) != len(without)+1 {
		t.Fatalf("HERALD_TOKEN not used: %d options with it, %d without", len(withEnv), len(without))
	}
	var usage bytes.Buffer
	e := processEnv(strings.NewReader(""), &usage, io.Discard)
	e.getenv = env(map[string]string{"HERALD_TOKEN": "s3cr3t-tok"})
	if code := runEnv(e, []string{"sub", "--help"}); code != 0 || !strings.Contains(usage.String(), "--token") {
		t.Fatalf("sub --help: exit %d\n%s", code, usage.String())
	}
	if strings.Contains(usage.String(), "s3cr3t-tok") {
		t.Fatalf("usage prints the token:\n%s", usage.String())
	}
	f = parse(map[string]string{"HERALD_SERVER": "node:1", "HERALD_CA": "env.pem"}, "--server", "other:2", "--insecure", "--timeout", "3s", "--ca", "my.pem")
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
	if _, err := parseStreamCmd([]string{"create", "orders", "--retention-age", "soon"}, io.Discard, env(nil)); !errors.Is(err, errBadFlag) {
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
	if _, err := parseSubCmd([]string{"orders", "--groups", "g"}, io.Discard, env(nil)); !errors.Is(err, errBadFlag) {
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
	// A usage error is one line, then where to get help.
	buf.Reset()
	if got := exitStatus(&buf, "pub", fmt.Errorf("%w: %w", errBadFlag, errors.New("unknown flag: --bad"))); got != 2 ||
		buf.String() != "herald pub: unknown flag: --bad\nRun 'herald pub --help' for usage.\n" {
		t.Fatalf("flag error: %d %q", got, buf.String())
	}
	buf.Reset()
	if got := exitStatus(&buf, "stream create", usageErrorf("--shards must be at least 1")); got != 2 ||
		buf.String() != "herald stream create: --shards must be at least 1\nRun 'herald stream create --help' for usage.\n" {
		t.Fatalf("usage error: %d %q", got, buf.String())
	}
	if got := exitStatus(&buf, "pub", fmt.Errorf("%w: %w", errBadFlag, flag.ErrHelp)); got != 0 {
		t.Fatalf("help: %d", got)
	}
	buf.Reset()
	if got := exitStatus(&buf, "node", exitCode(1)); got != 1 || buf.Len() != 0 {
		t.Fatalf("a command's own exit status: %d %q", got, buf.String())
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
	var table bytes.Buffer
	if err := writeStreamInfo(&table, info); err != nil {
		t.Fatal(err)
	}
	if want := "STREAM           a/b/c\n" +
		"SHARDS           2\n" +
		"DURABLE          true\n" +
		"ROUTING          hash\n" +
		"OVERFLOW         drop_new\n" +
		"QUEUE_CAPACITY   default (512)\n" +
		"QUEUE_MAX_BYTES  default (128MiB)\n" +
		"RETENTION_AGE    forever\n" +
		"RETENTION_BYTES  no bound\n" +
		"CREATED          2026-01-02T03:04:05Z\n" +
		"\n" +
		"SHARD  TAIL\n" +
		"0      10\n" +
		"1      0\n"; table.String() != want {
		t.Fatalf("stream info:\n%s\nwant:\n%s", table.String(), want)
	}
	info.Config = client.StreamConfig{Shards: 2, Routing: client.RoutingJump, Overflow: client.OverflowDropOld,
		QueueCapacity: 64, QueueMaxBytes: 4096, RetentionAge: 90 * time.Minute, RetentionBytes: 1 << 20}
	table.Reset()
	_ = writeStreamInfo(&table, info)
	for _, want := range []string{"ROUTING          jump", "DURABLE          false", "OVERFLOW         drop_old", "QUEUE_CAPACITY   64\n",
		"QUEUE_MAX_BYTES  4KiB\n", "RETENTION_AGE    1h30m0s\n", "RETENTION_BYTES  1MiB\n"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("stream info lacks %q:\n%s", want, table.String())
		}
	}
	b, err := json.Marshal(streamInfoJSONOf(info))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"stream":"a/b/c","shards":2,"routing":"jump","durable":false,"overflow":"drop_old","queue_capacity":64,` +
		`"queue_max_bytes":4096,"retention_age_ms":5400000,"retention_bytes":1048576,"replicas":1,"created":"2026-01-02T03:04:05.000000006Z","tails":[10,0]}`; string(b) != want {
		t.Fatalf("stream info JSON %s, want %s", b, want)
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

	// Every record's offset: a batch's records are contiguous, those of
	// AckPerMessage need not be.
	buf.Reset()
	_ = printAck(&buf, nil, client.PublishAck{Shard: 3, Offset: 5, Count: 2})
	_ = printAck(&buf, nil, client.PublishAck{Shard: 3, Offset: 7, Count: 2, Offsets: []uint64{7, 9}})
	if got := buf.String(); got != "3 5\n3 6\n3 7\n3 9\n" {
		t.Fatalf("acks %q", got)
	}
	buf.Reset()
	rw := &recordWriter{format: outputJSON, w: bufio.NewWriter(&buf)}
	_ = printAck(&buf, rw, client.PublishAck{Shard: 3, Offset: 5, Count: 2})
	rw.w.Flush()
	if got := buf.String(); got != `{"shard":3,"offset":5}`+"\n"+`{"shard":3,"offset":6}`+"\n" {
		t.Fatalf("acks as JSON %q", got)
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

// confirm takes y or yes, refuses anything else and an end of input, and
// gives up when its context ends (Ctrl-C at the prompt) while the input
// has no answer yet.
func TestConfirm(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{{"y\n", nil}, {"YES\n", nil}, {"n\n", errNotConfirmed}, {"", errNotConfirmed}, {"yep\n", errNotConfirmed}} {
		var stderr bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(tc.in), stderr: &stderr}
		if err := confirm(context.Background(), env, "Delete x?"); err != tc.want {
			t.Errorf("answer %q: %v, want %v", tc.in, err, tc.want)
		}
		if stderr.String() != "Delete x? [y/N] " {
			t.Errorf("prompt %q", stderr.String())
		}
	}
	r, w := io.Pipe() // an input that never answers
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	if err := confirm(ctx, &cliEnv{stdin: r, stderr: &stderr}, "Delete x?"); err != errNotConfirmed {
		t.Errorf("interrupted prompt: %v, want errNotConfirmed", err)
	}
}

// pub --producer-id sends a batch again at once after a lost connection or
// a timeout, after a pause (and a bounded number of times) after a node
// error that may have written it, and never after a refusal.
func TestPubOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{context.DeadlineExceeded, outcomeLost},
		{fmt.Errorf("wait: %w", &client.OutcomeUnknownError{Cause: errors.New("connection lost")}), outcomeLost},
		{wire.Errorf(wire.CodeStorageFailure, "disk"), outcomeNodeError},
		{wire.Errorf(wire.CodeInternal, "bug"), outcomeNodeError},
		{wire.Errorf(wire.CodeSequenceGap, "gap"), outcomeKnown},
		{wire.Errorf(wire.CodePermissionDenied, "no"), outcomeKnown},
		{errors.New("other"), outcomeKnown},
	} {
		if got := outcomeOf(tc.err); got != tc.want {
			t.Errorf("outcomeOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
