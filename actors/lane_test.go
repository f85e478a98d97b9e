package actors

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
)

// syncBuffer is a stream stand-in the lane writes to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) Close() error { return nil }
func (s *syncBuffer) frames(t *testing.T) []int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := bytes.NewReader(s.b.Bytes())
	var counts []int
	for r.Len() > 0 {
		f, err := wire.ReadFrame(r, 1<<24)
		if err != nil {
			t.Fatal(err)
		}
		views, err := wire.DecodeEventBatch(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, len(views))
	}
	return counts
}

// A trickle goes out at once; under load (the last write filled a frame) a
// frame that is not full waits for more until event_batch_max_delay, on the
// lane's own clock and timer.
func TestLaneDelaysOnlyUnderLoad(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	var (
		mu    sync.Mutex
		fired func()
	)
	now := time.Unix(0, 0)
	cfg := LaneConfig{W: &syncBuffer{}, MaxEvents: 4, MaxBytes: 1 << 20, MaxDelay: 250 * time.Microsecond,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		AfterFunc: func(d time.Duration, f func()) func() bool {
			mu.Lock()
			defer mu.Unlock()
			fired = f
			return func() bool { return true }
		}}
	buf := cfg.W.(*syncBuffer)
	written := make(chan *SectionsWritten, 16)
	var lanePID *actor.PID
	ready := make(chan struct{})
	sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			lanePID = ctx.Spawn(NewLaneProps(cfg))
			close(ready)
		case *SectionsWritten:
			written <- m
		}
	}))
	<-ready
	sec := func(base uint64) *wire.Section { return wire.NewSection(0, base, 0, 1, []byte{0, 0, 1, 'x'}) }
	send := func(secs ...*wire.Section) { sys.Root.Send(lanePID, &WriteSections{Sections: secs}) }

	send(sec(0)) // a trickle: written at once
	if w := <-written; w.Entries != 1 {
		t.Fatalf("trickle: %d written", w.Entries)
	}
	send(sec(1), sec(2), sec(3), sec(4), sec(5)) // a full frame: the lane is loaded
	if w := <-written; w.Entries != 5 {
		t.Fatalf("burst: %d written", w.Entries)
	}
	send(sec(6)) // under load: held for more, with a timer armed
	var f func()
	for f == nil {
		mu.Lock()
		f = fired
		mu.Unlock()
		time.Sleep(time.Millisecond) // polling for the lane's decision, not timing it
	}
	select {
	case w := <-written:
		t.Fatalf("a frame under load went out before its delay: %+v", w)
	default:
	}
	send(sec(7))
	mu.Lock()
	now = now.Add(300 * time.Microsecond)
	mu.Unlock()
	f() // the delay is over
	if w := <-written; w.Entries != 2 {
		t.Fatalf("after the delay: %d written, want the two held sections in one write", w.Entries)
	}
	if got := buf.frames(t); len(got) != 4 || got[0] != 1 || got[1] != 4 || got[2] != 1 || got[3] != 2 {
		t.Fatalf("frames %v, want [1 4 1 2]", got)
	}
	// That write did not fill a frame: the next section is a trickle again.
	send(sec(8))
	if w := <-written; w.Entries != 1 {
		t.Fatalf("back to a trickle: %d written", w.Entries)
	}
}
