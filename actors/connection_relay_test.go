package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// laneRecorder stands in for a connection's control lane: it records the
// error code of each frame it is asked to write, by request id, and how
// many times each id was answered.
type laneRecorder struct {
	mu      sync.Mutex
	codes   map[uint64]wire.Code
	answers map[uint64]int
}

func (l *laneRecorder) receive(ctx actor.Context) {
	m, ok := ctx.Message().(*WriteFrame)
	if !ok {
		return
	}
	f, err := wire.ReadFrame(bytes.NewReader(m.Frame), wire.DefaultMaxFrameBytes)
	if err != nil {
		panic(err)
	}
	var code wire.Code
	if f.Header.Type == wire.TypeError {
		werr, derr := wire.DecodeError(f.Body)
		if derr != nil {
			panic(derr)
		}
		code = werr.Code
	}
	l.mu.Lock()
	l.codes[f.Header.RequestID] = code
	l.answers[f.Header.RequestID]++
	l.mu.Unlock()
}

// wait waits until ids 1..n are answered, and returns each one's code.
func (l *laneRecorder) wait(t *testing.T, n int) map[uint64]wire.Code {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		l.mu.Lock()
		done := len(l.answers) >= n
		l.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("%d of %d relayed requests answered", len(l.answers), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // a second answer would come by now
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, k := range l.answers {
		if k != 1 {
			t.Fatalf("request %d answered %d times", id, k)
		}
	}
	out := map[uint64]wire.Code{}
	for id, c := range l.codes {
		out[id] = c
	}
	return out
}

// newRelaySession is a client connection's session on node 2 whose relays
// dial with dial.
func newRelaySession(t *testing.T, dial func(ctx context.Context, node uint64) (*quic.Conn, error)) (*connSession, *actor.PID, *laneRecorder) {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	t.Cleanup(sys.Shutdown)
	rec := &laneRecorder{codes: map[uint64]wire.Code{}, answers: map[uint64]int{}}
	lane := sys.Root.Spawn(actor.PropsFromFunc(rec.receive))
	g := &Goroutines{}
	cs := newConnSession(nil, ConnectionConfig{Goroutines: g, MaxFrameBytes: wire.DefaultMaxFrameBytes,
		Relay: &GroupRelay{Self: 2, Dial: dial, Timeout: time.Second}}, sys.Root, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() {
		cs.cancel()
		g.CloseAndWait()
	})
	return cs, lane, rec
}

// Relayed requests are each answered exactly once while the relays they
// go to keep failing (a coordinating node that cannot be reached): none
// is queued on a relay after it failed (its queue was drained then), and
// those never written are answered not_leader (nothing was applied); the
// node is then passed over by the routing for a while.
func TestRelayedRequestsAreAnsweredOnceWhileRelaysFail(t *testing.T) {
	cs, lane, rec := newRelaySession(t, func(ctx context.Context, _ uint64) (*quic.Conn, error) {
		return nil, errors.New("connection refused")
	})
	const n = 2000
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				cs.sendRelayed(3, &relayReq{frame: []byte("x"), id: uint64(i + 1), lane: lane, settles: i%2 == 0})
			}
		}()
	}
	wg.Wait()
	for id, code := range rec.wait(t, n) {
		if code != wire.CodeNotLeader && code != wire.CodeOverloaded {
			t.Fatalf("request %d, never written, answered %v", id, code)
		}
	}
	if cs.cfg.Relay.reachable(3) {
		t.Fatal("a node whose relay failed to dial is not passed over")
	}
}

// A not_leader naming the relaying node itself (shard 0's leadership moved
// here) is answered not_leader, for the request to come again and be served
// here, even for an ack: it was not applied anywhere, and no relay to this
// node is dialled.
func TestRelayedRequestRedirectedToItsOwnNode(t *testing.T) {
	dialled := make(chan uint64, 1)
	cs, lane, rec := newRelaySession(t, func(_ context.Context, node uint64) (*quic.Conn, error) {
		dialled <- node
		return nil, fmt.Errorf("node %d is not a peer", node)
	})
	cs.sendRelayed(2, &relayReq{frame: []byte("ack"), id: 1, lane: lane, settles: true, hops: 1})
	if code := rec.wait(t, 1)[1]; code != wire.CodeNotLeader {
		t.Fatalf("an ack redirected to the relaying node itself was answered %v, want not_leader", code)
	}
	select {
	case node := <-dialled:
		t.Fatalf("a relay to node %d was dialled", node)
	default:
	}
}
