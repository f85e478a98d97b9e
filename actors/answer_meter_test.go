package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// gatedWriter blocks every Write until the test lets one through.
type gatedWriter struct {
	gate    chan struct{}
	written chan int
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.gate
	w.written <- len(p)
	return len(p), nil
}
func (w *gatedWriter) Close() error { return nil }

// waitErr runs m.Wait and returns its result on a channel.
func waitErr(m *AnswerMeter, ctx context.Context) chan error {
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx) }()
	return done
}

// The meter holds a reader back while more than its limit of frames wait
// for the lane, lets it go once the lane has written enough of them, and
// for good once the lane stops.
func TestAnswerMeterFollowsTheLane(t *testing.T) {
	sys := actor.NewActorSystem()
	w := &gatedWriter{gate: make(chan struct{}), written: make(chan int, 16)}
	m := NewAnswerMeter(3000)
	// A buffer smaller than a frame: each frame is written through.
	lane := sys.Root.Spawn(NewLaneProps(LaneConfig{W: w, Meter: m, BufferSize: 16}))
	frame := wire.AppendError(nil, 1, wire.Errorf(wire.CodeInvalidRequest, "%01000d", 0))

	if err := m.Wait(context.Background()); err != nil {
		t.Fatalf("empty meter: %v", err)
	}
	for range 5 {
		sys.Root.Send(lane, &WriteFrame{Frame: frame})
	}
	if q := m.Queued(); q != 5*int64(len(frame)) {
		t.Fatalf("queued %d, want %d (five frames, the first blocked in its write)", q, 5*len(frame))
	}
	done := waitErr(m, context.Background())
	// Two frames written: three wait, 3 × ~1 KiB is still over 3000.
	for range 2 {
		w.gate <- struct{}{}
		<-w.written
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) with %d bytes waiting, over the limit", err, m.Queued())
	default:
	}
	// The third write lets the meter fall to the limit (the lane counts a
	// frame until it has handled it).
	w.gate <- struct{}{}
	<-w.written
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Wait still blocked with %d bytes waiting", m.Queued())
	}

	// The lane stopping releases its meter's waiters for good.
	close(w.gate)
	go func() {
		for range w.written {
		}
	}()
	if err := sys.Root.StopFuture(lane).Wait(); err != nil {
		t.Fatal(err)
	}
	close(w.written) // the lane writes no more
	select {
	case <-m.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the stopped lane did not release its meter")
	}
	m.MessagePosted(&WriteFrame{Frame: frame})
	m.MessagePosted(&WriteFrame{Frame: frame})
	m.MessagePosted(&WriteFrame{Frame: frame})
	m.MessagePosted(&WriteFrame{Frame: frame})
	if err := m.Wait(context.Background()); !errors.Is(err, ErrLaneStopped) {
		t.Fatalf("Wait over the limit after the lane stopped: %v, want ErrLaneStopped", err)
	}

	// A cancelled context ends a wait too.
	m2 := NewAnswerMeter(0)
	m2.MessagePosted(&WriteFrame{Frame: frame})
	ctx, cancel := context.WithCancel(context.Background())
	done = waitErr(m2, ctx)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
}

// Pushes are bounded by credit and left out; requests handed to
// coordinators count until their answers are handled, and at
// maxDispatched of them the reader waits.
func TestAnswerMeterPushesAndDispatchedRequests(t *testing.T) {
	m := NewAnswerMeter(1 << 20)
	push := &WriteFrame{Frame: make([]byte, 2<<20), Push: true}
	m.MessagePosted(push)
	if q := m.Queued(); q != 0 {
		t.Fatalf("a push counted %d bytes", q)
	}
	m.MessageReceived(push)
	if err := m.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}

	for range maxDispatched {
		m.Dispatch()
	}
	done := waitErr(m, context.Background())
	answer := &WriteFrame{Frame: make([]byte, 10), Dispatched: true}
	m.MessagePosted(answer)
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) with %d requests out", err, maxDispatched)
	default:
	}
	m.MessageReceived(answer) // one answered: one more may be read
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked after an answer")
	}
	if q := m.Queued(); q != 0 {
		t.Fatalf("queued %d after the answer was handled", q)
	}
}
