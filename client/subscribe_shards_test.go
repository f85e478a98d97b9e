package client

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// shardSubNode scripts the node's side of subscriptions to several shards
// and resubscriptions: each Subscribe goes to handle with its attempt
// number on that shard (0 for the first), which answers it (or refuses it)
// and then scripts the stream.
//
// The returned count is of the handlers running: a test waits for it after
// ending its subscription, so that handlers waiting for the client's clean
// close see it before the server stops.
func shardSubNode(t *testing.T, srv *testServer, handle func(s wire.Subscribe, attempt int, st *quic.Stream, reqID uint64)) *runningCount {
	handlers := &runningCount{}
	var mu sync.Mutex
	attempts := map[uint32]int{}
	srv.onStream = func(sc *serverConn, st *quic.Stream, f wire.Frame) {
		if f.Header.Type != wire.TypeSubscribe {
			t.Errorf("%v frame opens a stream", f.Header.Type)
			return
		}
		s, err := wire.DecodeSubscribe(f.Body)
		if err != nil {
			t.Errorf("decode subscribe: %v", err)
			return
		}
		mu.Lock()
		n := attempts[s.Shard]
		attempts[s.Shard]++
		mu.Unlock()
		handlers.add()
		defer handlers.done()
		handle(s, n, st, f.Header.RequestID)
	}
	return handlers
}

// runningCount counts running goroutines, like a sync.WaitGroup whose Add
// may race with Wait: here a handler starts because of what the test's
// client sent over the network, which the race detector does not see as
// ordering it before the test's Wait.
type runningCount struct {
	mu struct {
		sync.Mutex
		n int
		// idle is closed when n drops to 0.
		idle chan struct{}
	}
}

func (r *runningCount) add() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.n == 0 {
		r.mu.idle = make(chan struct{})
	}
	r.mu.n++
}

func (r *runningCount) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.n--; r.mu.n == 0 {
		close(r.mu.idle)
	}
}

// Wait waits until no counted goroutine runs.
func (r *runningCount) Wait() {
	r.mu.Lock()
	idle := r.mu.idle
	n := r.mu.n
	r.mu.Unlock()
	if n > 0 {
		<-idle
	}
}

// subscribed writes the node's Subscribed.
func subscribed(st *quic.Stream, reqID uint64, shard uint32, offset uint64) {
	_, _ = st.Write(wire.AppendSubscribed(nil, reqID, wire.Subscribed{Shard: shard, Offset: offset, Tail: offset, QueueCapacity: 8}))
}

// TestSubscribeAllShards: without WithShard the client describes the stream
// and subscribes to every shard, WithStartOffsets starting the shards it names
// and the others where the base option says; Next merges the shards, each
// in offset order.
func TestSubscribeAllShards(t *testing.T) {
	srv := newTestServer(t)
	const shards = 3
	srv.addStream(orders, wire.StreamConfig{Shards: shards, Durable: true})
	var mu sync.Mutex
	got := map[uint32]wire.Subscribe{}
	handlers := shardSubNode(t, srv, func(s wire.Subscribe, attempt int, st *quic.Stream, reqID uint64) {
		mu.Lock()
		got[s.Shard] = s
		mu.Unlock()
		start := s.Offset
		subscribed(st, reqID, s.Shard, start)
		// Each shard sends 3 frames of 2 records, the first starting a
		// record early (dropped), then ends with an error.
		for i := range uint64(3) {
			base := start + 2*i
			if i == 0 && base > 0 {
				_, _ = st.Write(eventBatchAt(s.Shard, 1, []uint64{base - 1}, recs(base-1, 3)))
				continue
			}
			_, _ = st.Write(eventBatchAt(s.Shard, 1, []uint64{base}, recs(base, 2)))
		}
		_, _ = st.Write(wire.AppendError(nil, 0, wire.Errorf(wire.CodeSubscriptionAborted, "shard %d done", s.Shard)))
		waitEOF(t, st)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	sub, err := c.Subscribe(ctx, orders, WithStartOffset(10), WithStartOffsets(map[uint32]uint64{0: 4, 2: 7, 9: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if fmt.Sprint(sub.Shards()) != "[0 1 2]" || fmt.Sprint(sub.StartOffsets()) != "map[0:4 1:10 2:7]" {
		t.Fatalf("shards %v starting at %v", sub.Shards(), sub.StartOffsets())
	}
	mu.Lock()
	for sh, want := range map[uint32]uint64{0: 4, 1: 10, 2: 7} {
		if s := got[sh]; s.Start != wire.StartOffset || s.Offset != want || s.Name != orders {
			t.Errorf("shard %d subscribe = %+v, want offset %d", sh, s, want)
		}
	}
	mu.Unlock()

	next := map[uint32]uint64{0: 4, 1: 10, 2: 7}
	ended := map[uint32]bool{}
	for len(ended) < shards {
		ev, err := sub.Next(ctx)
		if err != nil {
			var se *ShardError
			if !errors.As(err, &se) || !errors.Is(err, ErrSubscriptionAborted) {
				t.Fatalf("Next: %v, want a shard's *ShardError", err)
			}
			if ended[se.Shard] || next[se.Shard] != sub.StartOffsets()[se.Shard]+6 {
				t.Fatalf("shard %d ended at %d (ended before: %v)", se.Shard, next[se.Shard], ended[se.Shard])
			}
			ended[se.Shard] = true
			continue
		}
		if ended[ev.Shard] || ev.Offset != next[ev.Shard] || string(ev.Payload) != fmt.Sprint("p", ev.Offset) {
			t.Fatalf("event shard %d offset %d, want offset %d", ev.Shard, ev.Offset, next[ev.Shard])
		}
		next[ev.Shard]++
	}
	// Every shard ended: the last error, on every call.
	for range 2 {
		if _, err := sub.Next(ctx); !errors.Is(err, ErrSubscriptionAborted) {
			t.Fatalf("Next after every shard ended: %v", err)
		}
	}
	handlers.Wait() // the client closed each stream the node ended
}

// TestSubscribeLagged: the node ends a shard as lagged; Next returns the
// events before the resume offset, then a *LaggedError saying where to
// resume.
func TestSubscribeLagged(t *testing.T) {
	srv := newTestServer(t)
	handlers := shardSubNode(t, srv, func(s wire.Subscribe, attempt int, st *quic.Stream, reqID uint64) {
		subscribed(st, reqID, s.Shard, 0)
		_, _ = st.Write(eventBatchAt(s.Shard, 1, []uint64{0}, recs(0, 5)))
		_, _ = st.Write(wire.AppendError(nil, 0, &wire.Error{Code: wire.CodeLagged, Message: "queue full", Detail: 5}))
		waitEOF(t, st)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders, WithShard(6))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for want := range uint64(5) {
		if ev, err := sub.Next(ctx); err != nil || ev.Offset != want {
			t.Fatalf("Next = %d, %v; want %d", ev.Offset, err, want)
		}
	}
	_, err = sub.Next(ctx)
	var le *LaggedError
	if !errors.As(err, &le) || le.Shard != 6 || le.ResumeFrom != 5 || !errors.Is(err, ErrLagged) {
		t.Fatalf("Next: %v, want a *LaggedError for shard 6 resuming at 5", err)
	}
	wantCode(t, err, wire.CodeLagged)
	if sub.Resumes() != 0 {
		t.Fatalf("Resumes = %d without WithAutoResume", sub.Resumes())
	}
	handlers.Wait()
}

// TestSubscribeAutoResume: with WithAutoResume a lagged shard is subscribed
// again at the resume offset, the application sees contiguous offsets and
// no error, and the other shard is not disturbed.
func TestSubscribeAutoResume(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 2, Durable: true})
	resumedAt := make(chan wire.Subscribe, 4)
	handlers := shardSubNode(t, srv, func(s wire.Subscribe, attempt int, st *quic.Stream, reqID uint64) {
		if s.Shard == 1 {
			subscribed(st, reqID, 1, 0)
			_, _ = st.Write(eventBatchAt(1, 1, []uint64{0}, recs(0, 3)))
			waitEOF(t, st)
			return
		}
		switch attempt {
		case 0:
			subscribed(st, reqID, 0, 0)
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{0, 2}, recs(0, 2), recs(2, 2)))
			_, _ = st.Write(wire.AppendError(nil, 0, &wire.Error{Code: wire.CodeLagged, Detail: 4}))
		case 1:
			resumedAt <- s
			subscribed(st, reqID, 0, s.Offset)
			// History from the resume offset, a repeat included.
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{4, 5}, recs(4, 2), recs(5, 3)))
			_, _ = st.Write(wire.AppendError(nil, 0, &wire.Error{Code: wire.CodeLagged, Detail: 8}))
		default:
			resumedAt <- s
			subscribed(st, reqID, 0, s.Offset)
			_, _ = st.Write(eventBatchAt(0, 1, []uint64{8}, recs(8, 2)))
		}
		waitEOF(t, st)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders, WithAutoResume())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	next := map[uint32]uint64{}
	for n := 0; n < 10+3; n++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %v: %v", next, err)
		}
		if ev.Offset != next[ev.Shard] {
			t.Fatalf("shard %d offset %d, want %d: not contiguous", ev.Shard, ev.Offset, next[ev.Shard])
		}
		next[ev.Shard]++
	}
	if next[0] != 10 || next[1] != 3 {
		t.Fatalf("delivered up to %v", next)
	}
	for _, want := range []uint64{4, 8} {
		if s := <-resumedAt; s.Start != wire.StartOffset || s.Offset != want || s.Shard != 0 || s.QueueCapacity != 0 {
			t.Fatalf("resubscribe = %+v, want shard 0 from %d", s, want)
		}
	}
	if sub.Resumes() != 2 {
		t.Fatalf("Resumes = %d, want 2", sub.Resumes())
	}
	sub.Close()
	handlers.Wait()
}

// TestSubscribeResumeRefused: a resume offset no longer retained ends the
// shard with an *OffsetOutOfRangeError naming the first retained offset.
func TestSubscribeResumeRefused(t *testing.T) {
	srv := newTestServer(t)
	handlers := shardSubNode(t, srv, func(s wire.Subscribe, attempt int, st *quic.Stream, reqID uint64) {
		if attempt > 0 {
			_, _ = st.Write(wire.AppendError(nil, reqID, &wire.Error{Code: wire.CodeOffsetOutOfRange, Message: "retention", Detail: 50}))
			_ = st.Close()
			return
		}
		subscribed(st, reqID, 0, 0)
		_, _ = st.Write(wire.AppendError(nil, 0, &wire.Error{Code: wire.CodeLagged, Detail: 20}))
		waitEOF(t, st)
	})
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, orders, WithAutoResume())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	_, err = sub.Next(ctx)
	var oe *OffsetOutOfRangeError
	if !errors.As(err, &oe) || oe.Shard != 0 || oe.Offset != 20 || oe.Detail != 50 || !oe.BelowRetention() || !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("Next: %v (%+v), want an *OffsetOutOfRangeError below retention", err, oe)
	}
	handlers.Wait()
}

// TestSubscribeOneShardRefused: when one shard refuses, Subscribe fails
// with its error and ends the other shards' subscriptions.
func TestSubscribeOneShardRefused(t *testing.T) {
	srv := newTestServer(t)
	srv.addStream(orders, wire.StreamConfig{Shards: 2, Durable: true})
	closed, zeroUp := make(chan struct{}), make(chan struct{})
	handlers := shardSubNode(t, srv, func(s wire.Subscribe, attempt int, st *quic.Stream, reqID uint64) {
		if s.Shard == 1 {
			<-zeroUp
			_, _ = st.Write(wire.AppendError(nil, reqID, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: 3}))
			_ = st.Close()
			return
		}
		subscribed(st, reqID, 0, 0)
		close(zeroUp)
		waitEOF(t, st)
		close(closed)
	})
	srv.start()
	c := srv.dial(t)
	_, err := c.Subscribe(testCtx(t), orders, WithStartOffset(9))
	var oe *OffsetOutOfRangeError
	if !errors.As(err, &oe) || oe.Shard != 1 || oe.Offset != 9 || oe.Detail != 3 || oe.BelowRetention() {
		t.Fatalf("Subscribe: %v, want shard 1's *OffsetOutOfRangeError beyond the tail", err)
	}
	<-closed // shard 0's subscription was ended
	handlers.Wait()
}
