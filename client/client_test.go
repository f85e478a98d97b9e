package client

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

func TestDialHandshake(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.NodeID = "node-7"
	srv.start()
	c := srv.dial(t, WithToken("s3cret"), WithName("unit"))
	sc := <-srv.conns

	want := wire.Hello{Version: wire.Version, Features: wire.Features, MaxFrameBytes: wire.DefaultMaxFrameBytes,
		Token: "s3cret", ClientName: "unit"}
	if sc.hello != want {
		t.Fatalf("hello = %+v, want %+v", sc.hello, want)
	}
	if got := c.NodeID(); got != "node-7" {
		t.Fatalf("NodeID = %q", got)
	}
	if got := sc.conn.ConnectionState().TLS.NegotiatedProtocol; got != wire.ALPN {
		t.Fatalf("ALPN = %q", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := c.DescribeStream(testCtx(t), StreamName{Tenant: "a", Namespace: "b", Stream: "c"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v, want ErrClosed", err)
	}
}

func TestDialHelloRefused(t *testing.T) {
	srv := newTestServer(t)
	srv.onHello = func(h wire.Hello) *wire.Error {
		return wire.Errorf(wire.CodeUnauthenticated, "bad token %q", h.Token)
	}
	srv.start()
	c, err := Dial(testCtx(t), srv.addr, WithTLSConfig(srv.clientTLS), WithToken("nope"))
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded, want the node's error")
	}
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Dial: %v, want ErrUnauthenticated", err)
	}
	wantCode(t, err, wire.CodeUnauthenticated)
}

func TestDialWrongVersion(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.Version = 9
	srv.start()
	_, err := Dial(testCtx(t), srv.addr, WithTLSConfig(srv.clientTLS))
	wantCode(t, err, wire.CodeUnsupportedVersion)
}

func TestDialCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dial(ctx, "127.0.0.1:1", WithInsecure()); err == nil {
		t.Fatal("Dial with a cancelled context succeeded")
	}
}

// TestControlRequestsMatchedByID sends three control requests at once; the
// node answers them in reverse order, and each caller must get its own answer.
func TestControlRequestsMatchedByID(t *testing.T) {
	srv := newTestServer(t)
	var (
		mu     sync.Mutex
		frames []wire.Frame
	)
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		mu.Lock()
		frames = append(frames, f)
		if len(frames) < 3 {
			mu.Unlock()
			return
		}
		got := frames
		mu.Unlock()
		for i := len(got) - 1; i >= 0; i-- {
			f := got[i]
			id := f.Header.RequestID
			switch f.Header.Type {
			case wire.TypeCreateStream:
				cs, err := wire.DecodeCreateStream(f.Body)
				if err != nil {
					t.Errorf("decode create: %v", err)
				}
				sc.writeCtl(wire.AppendStreamInfo(nil, id, wire.StreamInfo{Name: cs.Name, Config: cs.Config,
					CreatedUnixNano: 1e18, Tails: make([]uint64, cs.Config.Shards)}))
			case wire.TypeDescribeStream:
				sc.writeCtl(wire.AppendError(nil, id, wire.Errorf(wire.CodeStreamNotFound, "no such stream")))
			case wire.TypeListStreams:
				l, _ := wire.DecodeListStreams(f.Body)
				sc.writeCtl(wire.AppendStreamList(nil, id, []wire.StreamInfo{
					{Name: wire.StreamName{Tenant: l.Tenant, Namespace: "x", Stream: "one"}, Config: wire.StreamConfig{Shards: 1}, Tails: []uint64{7}},
					{Name: wire.StreamName{Tenant: l.Tenant, Namespace: "y", Stream: "two"}, Config: wire.StreamConfig{Shards: 2, Durable: true}, Tails: []uint64{1, 2}},
				}))
			}
		}
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	orders := StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	var wg sync.WaitGroup
	var (
		created  StreamInfo
		errCr    error
		errDesc  error
		list     []StreamInfo
		errList  error
		ranCalls = []func(){
			func() { created, errCr = c.CreateStream(ctx, orders, StreamConfig{Shards: 3, Durable: true}) },
			func() { _, errDesc = c.DescribeStream(ctx, orders) },
			func() { list, errList = c.ListStreams(ctx, "acme", "") },
		}
	)
	for _, call := range ranCalls {
		wg.Add(1)
		go func() { defer wg.Done(); call() }()
	}
	wg.Wait()

	if errCr != nil {
		t.Fatalf("CreateStream: %v", errCr)
	}
	if created.Name != orders || created.Config != (StreamConfig{Shards: 3, Durable: true}) || len(created.Tails) != 3 || created.Created.UnixNano() != 1e18 {
		t.Fatalf("CreateStream = %+v", created)
	}
	if !errors.Is(errDesc, ErrStreamNotFound) {
		t.Fatalf("DescribeStream: %v, want ErrStreamNotFound", errDesc)
	}
	if errList != nil || len(list) != 2 || list[1].Name.Stream != "two" || list[1].Tails[1] != 2 || !list[1].Config.Durable {
		t.Fatalf("ListStreams = %+v, %v", list, errList)
	}

	seen := map[uint64]bool{}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range frames {
		id := f.Header.RequestID
		if id <= 1 || seen[id] {
			t.Fatalf("request id %d: zero, Hello's, or repeated (%v)", id, seen)
		}
		seen[id] = true
	}
}

func TestInvalidStreamNameFailsLocally(t *testing.T) {
	srv := newTestServer(t)
	srv.start()
	c := srv.dial(t)
	_, err := c.DescribeStream(testCtx(t), StreamName{Tenant: "a", Namespace: "b/c", Stream: "d"})
	if !errors.Is(err, ErrInvalidStreamName) {
		t.Fatalf("got %v, want ErrInvalidStreamName", err)
	}
	if _, err := ParseStreamName("a/b/c/d"); !errors.Is(err, ErrInvalidStreamName) {
		t.Fatalf("ParseStreamName: %v", err)
	}
	n, err := ParseStreamName("orders")
	if err != nil || n != (StreamName{Tenant: "default", Namespace: "default", Stream: "orders"}) {
		t.Fatalf("ParseStreamName(orders) = %v, %v", n, err)
	}
}

// TestMalformedControlFrame: a StreamInfo whose body does not decode closes
// the connection with CodeMalformedFrame and fails the call with it.
func TestMalformedControlFrame(t *testing.T) {
	srv := newTestServer(t)
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		sc.writeCtl(wire.AppendFrame(nil, wire.TypeStreamInfo, 0, f.Header.RequestID, []byte{1, 2, 3}))
	}
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	name := StreamName{Tenant: "a", Namespace: "b", Stream: "c"}

	_, err := c.DescribeStream(testCtx(t), name)
	wantCode(t, err, wire.CodeMalformedFrame)
	if !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("errors.Is(%v, ErrMalformedFrame) = false", err)
	}

	<-sc.conn.Context().Done()
	var ae *quic.ApplicationError
	if cause := context.Cause(sc.conn.Context()); !errors.As(cause, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(wire.CodeMalformedFrame) {
		t.Fatalf("server saw the connection end with %v, want application error %d", cause, wire.CodeMalformedFrame)
	}
	// Later calls fail with the same cause.
	_, err = c.Publish(testCtx(t), name, []byte("x"))
	wantCode(t, err, wire.CodeMalformedFrame)
}

// TestAnswerToUnknownRequest: a response to an id never sent is a protocol
// violation.
func TestAnswerToUnknownRequest(t *testing.T) {
	srv := newTestServer(t)
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		sc.writeCtl(wire.AppendStreamInfo(nil, f.Header.RequestID+100, wire.StreamInfo{Config: wire.StreamConfig{Shards: 1}, Tails: []uint64{0}}))
	}
	srv.start()
	c := srv.dial(t)
	_, err := c.DescribeStream(testCtx(t), StreamName{Tenant: "a", Namespace: "b", Stream: "c"})
	wantCode(t, err, wire.CodeProtocolViolation)
}

func TestGoAway(t *testing.T) {
	srv := newTestServer(t)
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, wire.Errorf(wire.CodeShuttingDown, "draining")))
	}
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	sc.writeCtl(wire.AppendGoAway(nil, "maintenance"))
	name := StreamName{Tenant: "a", Namespace: "b", Stream: "c"}
	if _, err := c.DescribeStream(testCtx(t), name); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("DescribeStream after GoAway: %v, want ErrShuttingDown", err)
	}
	// The GoAway has been processed by now (it came before the answer), so
	// new calls fail at once.
	if _, err := c.Publish(testCtx(t), name, []byte("x")); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Publish after GoAway: %v, want ErrShuttingDown", err)
	}
}

// TestClosePendingCalls: Close fails calls that wait on the node.
func TestClosePendingCalls(t *testing.T) {
	srv := newTestServer(t)
	started := make(chan struct{}, 3)
	srv.onControl = func(sc *serverConn, f wire.Frame) { started <- struct{}{} } // never answers
	srv.onStream = func(sc *serverConn, st *quic.Stream, first wire.Frame) {
		started <- struct{}{} // never answers
		<-sc.conn.Context().Done()
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	name := StreamName{Tenant: "a", Namespace: "b", Stream: "c"}

	errs := make(chan error, 3)
	go func() { _, err := c.DescribeStream(ctx, name); errs <- err }()
	go func() { _, err := c.Publish(ctx, name, []byte("x")); errs <- err }()
	go func() { _, err := c.Subscribe(ctx, name, WithShard(0)); errs <- err }()
	for range 3 {
		<-started
	}
	c.Close()
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("pending call ended with %v, want ErrClosed", err)
		}
	}
}
