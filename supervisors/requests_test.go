package supervisors

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/client"

	"github.com/heraldmq/herald/net/wire"
)

// readError reads one frame from s and returns the Error it must be.
func (r *rawConn) readError(f wire.Frame, wantID uint64) *wire.Error {
	r.t.Helper()
	if f.Header.Type != wire.TypeError {
		r.t.Fatalf("got a %s frame, want an Error", f.Header.Type)
	}
	if f.Header.RequestID != wantID {
		r.t.Fatalf("Error for request %d, want %d", f.Header.RequestID, wantID)
	}
	werr, err := wire.DecodeError(f.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return werr
}

// A well-framed request with a value the node does not accept is answered
// with an Error for that request; the connection, and what else is in flight
// on it, goes on (docs/protocol.md, "Malformed input").
func TestRequestErrorsKeepTheConnection(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := dialRaw(t, n)

	// A Subscribe with an unknown start kind.
	sub := c.stream()
	c.write(sub, wire.AppendSubscribe(nil, 7, wire.Subscribe{Name: orders, Start: wire.StartKind(5)}))
	if werr := c.readError(c.read(sub), 7); werr.Code != wire.CodeInvalidRequest {
		t.Fatalf("subscribe with start kind 5: %v, want invalid_request", werr)
	}

	// GroupRedrive and GroupDiscard naming offsets without a shard.
	for id, discard := range map[uint64]bool{9: false, 10: true} {
		c.write(c.control, wire.AppendGroupSelect(nil, id, discard, wire.GroupSelect{Name: orders, Group: "g", Shard: wire.AnyShard, Offsets: []uint64{1}}))
		if werr := c.readError(c.read(c.control), id); werr.Code != wire.CodeInvalidRequest {
			t.Fatalf("select (discard %v) with offsets and AnyShard: %v, want invalid_request", discard, werr)
		}
	}

	// The connection still serves: a publish and a describe.
	pub := c.stream()
	block, count := records("after")
	c.write(pub, wire.AppendPublish(nil, 11, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	if f := c.read(pub); f.Header.Type != wire.TypePublishAck {
		t.Fatalf("publish after request errors: got %s", f.Header.Type)
	}
	c.write(c.control, wire.AppendDescribeStream(nil, 12, orders))
	if f := c.read(c.control); f.Header.Type != wire.TypeStreamInfo {
		t.Fatalf("describe after request errors: got %s", f.Header.Type)
	}
}

// When the node can no longer write to a connection's control stream (the
// client stopped reading it with STOP_SENDING), it closes the connection
// rather than go on serving requests whose answers are lost.
func TestControlStreamWriteFailureClosesConnection(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := dialRaw(t, n)
	c.control.CancelRead(7)
	for id := uint64(2); id < 5; id++ {
		c.write(c.control, wire.AppendDescribeStream(nil, id, orders))
	}
	if code := c.closedWith(); code != wire.CodeInternal {
		t.Fatalf("closed with %v, want internal", code)
	}

	// Others are served.
	d := dialRaw(t, n)
	d.write(d.control, wire.AppendDescribeStream(nil, 2, orders))
	d.read(d.control)
}

// A client that stops reading a publish stream (STOP_SENDING) while going on
// writing to it is told to stop too, once the node fails to write an answer:
// its writes fail with a stream error, and the connection goes on.
func TestPublishStreamWriteFailureStopsItsReader(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := dialRaw(t, n)
	pub := c.stream()
	block, count := records("x")
	c.write(pub, wire.AppendPublish(nil, 1, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	c.read(pub)
	pub.CancelRead(7)

	_ = pub.SetWriteDeadline(time.Now().Add(10 * time.Second))
	var err error
	for id := uint64(2); err == nil; id++ {
		_, err = pub.Write(wire.AppendPublish(nil, id, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	}
	var serr *quic.StreamError
	if !errors.As(err, &serr) || serr.ErrorCode != quic.StreamErrorCode(wire.CodeInternal) {
		t.Fatalf("writes ended with %v, want the node's STOP_SENDING with code internal", err)
	}

	c.write(c.control, wire.AppendDescribeStream(nil, 2, orders))
	if f := c.read(c.control); f.Header.Type != wire.TypeStreamInfo {
		t.Fatalf("describe after the publish stream failed: got %s", f.Header.Type)
	}
}

// A client that sends requests and never reads the answers stops being read
// once a few MiB of answers wait (its writes block on QUIC flow control),
// instead of having the node queue an answer for every request it sends;
// once it reads, it is served again, and others are served all along.
func TestUnreadControlAnswersStopTheReading(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := dialRaw(t, n)
	pub := c.stream()
	block, count := records(strings.Repeat("p", 64<<10))
	c.write(pub, wire.AppendPublish(nil, 1, wire.Publish{Name: orders, Ack: wire.AckPerBatch, Count: count, Records: block}))
	c.read(pub)
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()

	// Each Read of about 60 bytes is answered with about 64 KiB: the
	// node's initial stream window (512 KiB) holds about 8,700 of them,
	// 540 MiB of answers.
	const total = 20_000
	written := c.writeUntilBlocked(total, func(i int) []byte {
		return wire.AppendRead(nil, uint64(100+i), wire.Read{Name: orders, Start: 0, End: wire.NoEnd, MaxRecords: 1})
	})
	if written == total {
		t.Fatalf("the node read all %d requests while none of their answers was read", total)
	}
	// The answers the node holds are its backlog (4 MiB) and what QUIC
	// buffers, not one per request read.
	grown := heap() - before
	t.Logf("%d requests written before the node stopped reading; the heap grew %d MiB", written, grown>>20)
	if grown > 128<<20 {
		t.Fatalf("the heap grew %d MiB for %d unread answers", grown>>20, written)
	}

	// Others are served meanwhile.
	d := dialRaw(t, n)
	d.write(d.control, wire.AppendDescribeStream(nil, 2, orders))
	if f := d.read(d.control); f.Header.Type != wire.TypeStreamInfo {
		t.Fatalf("another connection's describe: %s", f.Header.Type)
	}

	// Reading the answers lets more requests in: more are answered, in
	// order, than fit in the backlog. (The write cut by the deadline may
	// have sent part of a frame, so the stream ends here.)
	for i := range min(written, 200) {
		f := c.read(c.control)
		if f.Header.Type != wire.TypeReadResult || f.Header.RequestID != uint64(100+i) {
			t.Fatalf("answer %d: %s for request %d", i, f.Header.Type, f.Header.RequestID)
		}
	}
}

// The same holds for requests a group coordinator answers: their answers
// are not queued yet when the next request is read, so the node counts them
// out (256 at most per connection) and stops reading at that many.
func TestUnreadGroupAnswersStopTheReading(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := dialRaw(t, n)
	c.publishBlock(orders, 1)
	c.write(c.control, wire.AppendGroupPoll(nil, 2, wire.GroupPoll{Name: orders, Group: "g", Max: 1}))
	c.read(c.control)

	// 40,000 DescribeGroups are 2.6 MB of requests (more than the node's
	// stream window while it does not read) and 4 MB of answers, under the
	// byte bound: only the count of requests out stops the reading.
	const total = 40_000
	written := c.writeUntilBlocked(total, func(i int) []byte {
		return wire.AppendDescribeGroup(nil, uint64(100+i), wire.DescribeGroup{Name: orders, Group: "g"})
	})
	if written == total {
		t.Fatalf("the node read all %d group requests while none of their answers was read", total)
	}
	t.Logf("the node stopped reading after %d group requests were written", written)
	for i := range min(written, 600) {
		f := c.read(c.control)
		if f.Header.Type != wire.TypeGroupInfo || f.Header.RequestID != uint64(100+i) {
			t.Fatalf("answer %d: %s for request %d", i, f.Header.Type, f.Header.RequestID)
		}
	}
}

// A node whose max_frame_bytes is over a client's announced limit refuses
// the client at the handshake with frame_too_large: the node could hold records that client cannot receive. A client
// that accepts the node's limit publishes and receives a record over 16 MiB.
func TestClientMustAcceptTheNodesFrameLimit(t *testing.T) {
	const limit = 24 << 20
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.MaxFrameBytes = limit })
	// (The detail is lost when the connection's close overtakes the Error
	// frame; the close carries the code and the message.)
	if err := dialErr(n); !errors.Is(err, client.ErrFrameTooLarge) || !strings.Contains(err.Error(), "sends up to 25165824 (max_frame_bytes)") {
		t.Fatalf("default client against a node with 24 MiB frames: %v, want frame_too_large naming the node's limit", err)
	}

	c := dialClient(t, n, client.WithMaxFrameBytes(limit))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := client.StreamName{Tenant: "t", Namespace: "n", Stream: "big"}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("b"), 17<<20)
	if _, err := c.Publish(ctx, name, payload); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, name, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev, err := sub.Next(ctx)
	if err != nil || !bytes.Equal(ev.Payload, payload) {
		t.Fatalf("receive the 17 MiB record: %d bytes, %v", len(ev.Payload), err)
	}
}

// writeUntilBlocked writes frame(0), frame(1), ... to the control stream
// until total are written or a write blocks for 3 s (the node stopped
// reading and QUIC flow control holds the writes), and returns how many
// were written whole. The blocked one may have been sent in part.
func (r *rawConn) writeUntilBlocked(total int, frame func(i int) []byte) int {
	r.t.Helper()
	_ = r.control.SetWriteDeadline(time.Now().Add(3 * time.Second))
	defer func() { _ = r.control.SetWriteDeadline(time.Time{}) }()
	for i := range total {
		if _, err := r.control.Write(frame(i)); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				r.t.Fatal(err)
			}
			return i
		}
	}
	return total
}
