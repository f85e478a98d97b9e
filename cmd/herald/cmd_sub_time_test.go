package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// herald sub --since and --from-time: parsing, the usage errors, and
// subscriptions from a time against a real node.

func TestParseSubStartTime(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		since time.Duration
		from  time.Time
	}{
		{[]string{"orders", "--since", "10m"}, 10 * time.Minute, time.Time{}},
		{[]string{"orders", "--since", "1d12h"}, 36 * time.Hour, time.Time{}},
		{[]string{"orders", "--since", "7d", "--shard", "1", "--count", "5"}, 7 * 24 * time.Hour, time.Time{}},
		{[]string{"orders", "--from-time", "2026-12-01T10:00:00Z"}, 0, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)},
		{[]string{"orders", "--from-time", "2026-12-01T11:00:00.25+01:00"}, 0, time.Date(2026, 12, 1, 10, 0, 0, 250_000_000, time.UTC)},
		{[]string{"orders", "--from-time", "1969-07-20T20:17:40Z"}, 0, time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)},
	} {
		cmd, err := parseSubCmd(tc.args, io.Discard, env(nil))
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if cmd.since != tc.since || !cmd.fromTime.Equal(tc.from) || cmd.from == nil {
			t.Errorf("%q: since %v, from-time %v; want %v, %v", tc.args, cmd.since, cmd.fromTime, tc.since, tc.from)
		}
	}
	cmd, err := parseSubCmd([]string{"orders"}, io.Discard, env(nil))
	if err != nil || cmd.since != 0 || !cmd.fromTime.IsZero() {
		t.Fatalf("no start flag: %+v, %v", cmd, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"orders", "--since", "0s"}, "--since must be more than 0"},
		{[]string{"orders", "--since", "-5m"}, "--since must be more than 0"},
		{[]string{"orders", "--since", "soon"}, `invalid argument "soon" for "--since" flag`},
		{[]string{"orders", "--since", ""}, `invalid argument "" for "--since" flag`},
		{[]string{"orders", "--from-time", "yesterday"}, `--from-time "yesterday": want an RFC 3339 time`},
		{[]string{"orders", "--from-time", "2026-12-01"}, `--from-time "2026-12-01": want an RFC 3339 time`},
		{[]string{"orders", "--from-time", "2026-12-01 10:00:00"}, `--from-time "2026-12-01 10:00:00": want an RFC 3339 time`},
		{[]string{"orders", "--from-time", ""}, `--from-time "": want an RFC 3339 time`},
		{[]string{"orders", "--from", "latest", "--since", "1m"}, "--from, --since and --from-time say where to start: give only one"},
		{[]string{"orders", "--since", "1m", "--from-time", "2026-12-01T10:00:00Z"}, "give only one"},
		{[]string{"orders", "--from", "3", "--from-time", "2026-12-01T10:00:00Z"}, "give only one"},
		{[]string{"orders", "--group", "g", "--since", "1m"}, "--since does not go with --group"},
		{[]string{"orders", "--group", "g", "--from-time", "2026-12-01T10:00:00Z"}, "--from-time does not go with --group"},
	} {
		_, err := parseSubCmd(tc.args, io.Discard, env(nil))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
		code, out, errOut := runCLI(t, append([]string{"sub"}, tc.args...)...)
		if lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"); code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "herald sub: ") {
			t.Errorf("%q: exit %d, %q %q; want 2 and one line plus a hint", tc.args, code, out, errOut)
		}
	}
}

// Against a real node: --from-time between two publishes starts at the
// second; --since an hour covers everything; a time in the future starts at
// the tail, so only what is published afterwards is printed; --no-wait on a
// stream that does not exist fails as a plain sub does.
func TestSubFromTimeAgainstNode(t *testing.T) {
	node := startNode(t, t.TempDir())
	conn := []string{"--server", node.addr, "--ca", filepath.Join(node.dataDir, "tls", "ca.pem")}
	cli := func(f func([]string, io.Reader, io.Writer, io.Writer) int, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := f(append(args, conn...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	const name = "acme/shop/clock"
	if code, out, errOut := cli(runStream, "create", name); code != 0 {
		t.Fatalf("stream create: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(runPub, name, "a", "b"); code != 0 || out != "0 0\n0 1\n" {
		t.Fatalf("pub: %d %q %q", code, out, errOut)
	}
	// The node stamps a batch with its clock, this machine's: a and b
	// before mid, c after it.
	mid := time.Now().UTC()
	if code, out, errOut := cli(runPub, name, "c"); code != 0 || out != "0 2\n" {
		t.Fatalf("pub: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(runSub, name, "--from-time", mid.Format(time.RFC3339Nano), "--count", "1"); code != 0 || out != "0 2 c\n" {
		t.Fatalf("sub --from-time mid: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(runSub, name, "--since", "1h", "--count", "3"); code != 0 || out != "0 0 a\n0 1 b\n0 2 c\n" {
		t.Fatalf("sub --since 1h: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(runSub, name, "--since", "1d", "--count", "1", "--json"); code != 0 || !strings.HasPrefix(out, `{"shard":0,"offset":0,`) {
		t.Fatalf("sub --since 1d --json: %d %q %q", code, out, errOut)
	}

	// From an hour ahead: the tail, 3. Publish until sub has printed one
	// record: whichever it got, it is one published after it subscribed.
	future := time.Now().Add(time.Hour).Format(time.RFC3339)
	var out bytes.Buffer
	var errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runSub(append([]string{name, "--from-time", future, "--count", "1"}, conn...), strings.NewReader(""), &out, &errOut)
	}()
	c := node.dial(t)
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "clock"}
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		if _, err := c.Publish(t.Context(), stream, []byte(fmt.Sprint("late", i))); err != nil {
			t.Fatal(err)
		}
		var code int
		select {
		case code = <-done:
		case <-deadline:
			t.Fatalf("sub --from-time an hour ahead printed nothing: %q", errOut.String())
		case <-time.After(10 * time.Millisecond): // polling a goroutine's output, not asserting time
			continue
		}
		var off int
		var payload string
		if _, err := fmt.Sscanf(out.String(), "0 %d %s\n", &off, &payload); code != 0 || err != nil || off < 3 || !strings.HasPrefix(payload, "late") {
			t.Fatalf("sub --from-time an hour ahead: %d %q %q", code, out.String(), errOut.String())
		}
		break
	}
	if code, _, errOut := cli(runSub, "acme/shop/nope", "--since", "1m", "--no-wait", "--count", "1"); code != 1 || !strings.Contains(errOut, "stream_not_found") {
		t.Fatalf("--since --no-wait on a stream that does not exist: %d %q", code, errOut)
	}
}
