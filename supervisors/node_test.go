package supervisors

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/heraldmq/herald/net/wire"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle starts a goroutine on the first dead
	// letter that ends by itself one throttle interval later (1 s); it is the
	// library's, owned by no actor, and outlives a node only by that second.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

var orders = wire.StreamName{Tenant: "default", Namespace: "default", Stream: "orders"}

func TestRawPublishAndSubscribe(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := dialRaw(t, n)
	pub := c.stream()
	for i := range 3 {
		block, count := records("a", "b")
		c.write(pub, wire.AppendPublish(nil, uint64(i+1), wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	}
	for i := range 3 {
		f := c.read(pub)
		if f.Header.Type != wire.TypePublishAck {
			t.Fatalf("want ack, got %s", f.Header.Type)
		}
		ack, err := wire.DecodePublishAck(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		if ack.Offset != uint64(2*i) || ack.Count != 2 || f.Header.RequestID != uint64(i+1) {
			t.Fatalf("ack %d: %+v id %d", i, ack, f.Header.RequestID)
		}
	}
	sub := c.stream()
	c.write(sub, wire.AppendSubscribe(nil, 7, wire.Subscribe{Name: orders, Start: wire.StartEarliest}))
	f := c.read(sub)
	if f.Header.Type != wire.TypeSubscribed {
		t.Fatalf("want subscribed, got %s", f.Header.Type)
	}
	got := 0
	for got < 6 {
		f := c.read(sub)
		if f.Header.Type != wire.TypeEventBatch {
			t.Fatalf("want event batch, got %s", f.Header.Type)
		}
		views, err := wire.DecodeEventBatch(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range views {
			if v.Base != uint64(got) {
				t.Fatalf("batch base %d, want %d", v.Base, got)
			}
			got += int(v.Count)
		}
	}
}

func TestHealthAndReady(t *testing.T) {
	n := testNode(t, t.TempDir())
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
}

// A malformed frame closes the offending connection with a typed code; other
// connections and acknowledged data are untouched.
func TestHostileFramesCloseOnlyTheirConnection(t *testing.T) {
	n := testNode(t, t.TempDir())
	good := dialRaw(t, n)
	pub := good.stream()
	block, count := records("kept")
	good.write(pub, wire.AppendPublish(nil, 1, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	if f := good.read(pub); f.Header.Type != wire.TypePublishAck {
		t.Fatalf("want ack, got %s", f.Header.Type)
	}

	cases := []struct {
		name  string
		frame func() []byte
		want  wire.Code
	}{
		{"garbage header", func() []byte { return []byte("GET / HTTP/1.1\r\n\r\n") }, wire.CodeMalformedFrame},
		{"unknown type", func() []byte {
			return wire.AppendHeader(nil, wire.Header{Type: 0x7f, Length: 0, RequestID: 1})
		}, wire.CodeUnknownFrameType},
		{"undefined flags", func() []byte {
			return wire.AppendHeader(nil, wire.Header{Type: wire.TypePublish, Flags: 0x40, Length: 0, RequestID: 1})
		}, wire.CodeMalformedFrame},
		{"oversized", func() []byte {
			return wire.AppendHeader(nil, wire.Header{Type: wire.TypePublish, Length: 1 << 30, RequestID: 1})
		}, wire.CodeFrameTooLarge},
		{"lying record length", func() []byte {
			// A publish whose records block claims a payload longer than the frame.
			block := binary.AppendUvarint(nil, 0)     // key length
			block = binary.AppendUvarint(block, 0)    // headers
			block = binary.AppendUvarint(block, 1000) // payload length that lies
			block = append(block, "short"...)
			return wire.AppendPublish(nil, 1, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: 1, Records: block})
		}, wire.CodeMalformedFrame},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := dialRaw(t, n)
			s := bad.stream()
			bad.write(s, tc.frame())
			if code := bad.closedWith(); code != tc.want {
				t.Fatalf("closed with %s, want %s", code, tc.want)
			}
		})
	}

	if got := limitHits(t, n, "max_frame_bytes"); got != 1 {
		t.Errorf("max_frame_bytes hits = %v, want 1 (the oversized frame)", got)
	}

	// An invalid stream name is refused for that request only.
	bad := wire.StreamName{Tenant: "default", Namespace: "default", Stream: "no spaces"}
	good.write(pub, wire.AppendPublish(nil, 2, wire.Publish{Name: bad, Ack: wire.AckPerBatch, Count: count, Records: block}))
	f := good.read(pub)
	if f.Header.Type != wire.TypeError || f.Header.RequestID != 2 {
		t.Fatalf("want error for request 2, got %s %d", f.Header.Type, f.Header.RequestID)
	}
	e, err := wire.DecodeError(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(e, &wire.Error{Code: wire.CodeInvalidStreamName}) {
		t.Fatalf("got %v", e)
	}
	// The good connection still publishes, and the first record is still there.
	good.write(pub, wire.AppendPublish(nil, 3, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	f = good.read(pub)
	ack, err := wire.DecodePublishAck(f.Body)
	if err != nil || ack.Offset != 1 {
		t.Fatalf("after hostile input: %+v %v", ack, err)
	}
}

// A node that cannot start (its QUIC port is taken) fails with an error and
// releases what it opened, without panicking.
func TestStartFailureCleansUp(t *testing.T) {
	n := testNode(t, t.TempDir())
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = n.Addr()
	cfg.HTTP = ""
	if m, err := Start(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err == nil {
		_ = m.Shutdown(context.Background())
		t.Fatal("a second node started on a taken port")
	}
	// The data dir it opened is free again: a node starts on it.
	cfg.Listen = "127.0.0.1:0"
	m, err := Start(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Shutdown(context.Background())
}
