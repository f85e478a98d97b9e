package udpproxy

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sentPacket is what the fake send of testDirection recorded.
type sentPacket struct {
	// data is the datagram's first byte: the tests number them.
	data byte
	// at is how long after the start of the test it was sent.
	at time.Duration
}

// testDirection is a Direction whose sends are recorded instead of written,
// with its queue goroutine running until the test ends. Use it inside a
// synctest bubble, where time is the bubble's.
type testDirection struct {
	*Direction
	// start is when the direction was made.
	start time.Time
	// done stops run.
	done chan struct{}
	// wg waits for run.
	wg sync.WaitGroup
	// fail makes every send fail while set.
	fail bool

	// mu guards sent.
	mu sync.Mutex
	// sent records each send, in order.
	sent []sentPacket
}

// newTestDirection returns a direction drawing drops from a source seeded
// with seed, and stops its goroutine at the end of the test.
func newTestDirection(t *testing.T, seed uint64) *testDirection {
	td := &testDirection{start: time.Now(), done: make(chan struct{})}
	td.Direction = newDirection("forward", rand.New(rand.NewPCG(seed, forwardStream)), td.done, func(pkt packet) error {
		td.mu.Lock()
		defer td.mu.Unlock()
		if td.fail {
			return errors.New("refused")
		}
		td.sent = append(td.sent, sentPacket{data: pkt.data[0], at: time.Since(td.start)})
		return nil
	})
	td.wg.Go(td.run)
	t.Cleanup(func() {
		close(td.done)
		td.wg.Wait()
	})
	return td
}

// in passes datagram number n to the direction, from a buffer the caller
// overwrites at once, as a reader's buffer is.
func (td *testDirection) in(n byte) {
	buf := []byte{n}
	td.handle(packet{data: buf})
	buf[0] = 0xff
}

// sentSoFar returns a copy of what was sent so far.
func (td *testDirection) sentSoFar() []sentPacket {
	td.mu.Lock()
	defer td.mu.Unlock()
	return slices.Clone(td.sent)
}

func TestDirectionDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := newTestDirection(t, 1)
		td.Delay(100 * time.Millisecond)
		for i := range byte(3) {
			td.in(i)
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		if got := td.sentSoFar(); len(got) != 0 {
			t.Fatalf("sent %v before the delay was up", got)
		}
		if got, want := td.Stats(), (Stats{Queued: 3}); got != want {
			t.Fatalf("stats %v, want %v", got, want)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		want := []sentPacket{{0, 100 * time.Millisecond}, {1, 110 * time.Millisecond}, {2, 120 * time.Millisecond}}
		if got := td.sentSoFar(); !slices.Equal(got, want) {
			t.Fatalf("sent %v, want %v", got, want)
		}
		if got, want := td.Stats(), (Stats{Forwarded: 3}); got != want {
			t.Fatalf("stats %v, want %v", got, want)
		}
	})
}

// Lowering the delay must not let a new datagram overtake the ones queued
// before it, and once the queue has drained datagrams go straight through.
func TestDirectionDelayLoweredKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := newTestDirection(t, 1)
		td.Delay(100 * time.Millisecond)
		td.in(0)
		time.Sleep(10 * time.Millisecond)
		td.Delay(0)
		td.in(1)
		time.Sleep(20 * time.Millisecond)
		td.in(2)
		synctest.Wait()
		if got := td.sentSoFar(); len(got) != 0 {
			t.Fatalf("sent %v ahead of the datagram delayed before them", got)
		}
		time.Sleep(120 * time.Millisecond) // 150 ms
		synctest.Wait()
		td.in(3)
		want := []sentPacket{
			{0, 100 * time.Millisecond},
			{1, 100 * time.Millisecond},
			{2, 100 * time.Millisecond},
			{3, 150 * time.Millisecond},
		}
		if got := td.sentSoFar(); !slices.Equal(got, want) {
			t.Fatalf("sent %v, want %v", got, want)
		}
	})
}

// A cut drops what waits out a delay at once; a datagram delayed after the
// heal is sent on its own schedule, not held behind the dropped ones'.
func TestDirectionCutDropsQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := newTestDirection(t, 1)
		td.Delay(time.Hour)
		for i := range byte(3) {
			td.in(i)
		}
		time.Sleep(time.Minute)
		td.Cut(true)
		if got, want := td.Stats(), (Stats{Dropped: 3}); got != want {
			t.Fatalf("stats after the cut %v, want %v", got, want)
		}
		td.in(3)
		td.Cut(false)
		td.Delay(10 * time.Millisecond)
		td.in(4)
		time.Sleep(time.Second)
		synctest.Wait()
		want := []sentPacket{{4, time.Minute + 10*time.Millisecond}}
		if got := td.sentSoFar(); !slices.Equal(got, want) {
			t.Fatalf("sent %v, want %v", got, want)
		}
		if got, want := td.Stats(), (Stats{Forwarded: 1, Dropped: 4}); got != want {
			t.Fatalf("stats %v, want %v", got, want)
		}
	})
}

func TestDirectionQueueLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := newTestDirection(t, 1)
		td.queueLimit = 3
		td.Delay(time.Second)
		for i := range byte(5) {
			td.in(i)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		want := []sentPacket{{0, time.Second}, {1, time.Second}, {2, time.Second}}
		if got := td.sentSoFar(); !slices.Equal(got, want) {
			t.Fatalf("sent %v, want %v", got, want)
		}
		if got, want := td.Stats(), (Stats{Forwarded: 3, Dropped: 2}); got != want {
			t.Fatalf("stats %v, want %v", got, want)
		}
	})
}

func TestDirectionSendFailureCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := newTestDirection(t, 1)
		td.fail = true
		td.in(0)
		td.Delay(time.Millisecond)
		td.in(1)
		time.Sleep(time.Second)
		synctest.Wait()
		if got, want := td.Stats(), (Stats{Failed: 2}); got != want {
			t.Fatalf("stats %v, want %v", got, want)
		}
	})
}

// With a seed, which datagrams are dropped depends only on the seed: the
// count matches the direction's source drawn by hand, and is about p of the
// datagrams.
func TestDirectionDropSeeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		for _, p := range []float64{0, 0.1, 0.5, 0.9, 1} {
			td := newTestDirection(t, 7)
			td.Drop(p)
			for i := range n {
				td.in(byte(i))
			}
			ref := rand.New(rand.NewPCG(7, forwardStream))
			want := 0
			for range n {
				if p == 1 || p > 0 && ref.Float64() < p {
					want++
				}
			}
			got := td.Stats()
			if got.Dropped != uint64(want) || got.Forwarded != uint64(n-want) {
				t.Errorf("Drop(%v): %v, want %d dropped", p, got, want)
			}
			if frac := float64(want) / n; math.Abs(frac-p) > 0.05 {
				t.Errorf("Drop(%v) dropped %.3f of the datagrams", p, frac)
			}
		}
	})
}

func TestDirectionDropRejectsBadProbability(t *testing.T) {
	for _, p := range []float64{-0.1, 1.1, math.NaN(), math.Inf(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Drop(%v) did not panic", p)
				}
			}()
			newDirection("forward", rand.New(rand.NewPCG(1, 1)), nil, sendPacket).Drop(p)
		}()
	}
}

func TestDirectionHealClearsFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := newTestDirection(t, 1)
		td.Cut(true)
		td.Drop(1)
		td.Delay(time.Hour)
		td.in(0)
		td.Heal()
		td.in(1)
		if got, want := td.sentSoFar(), []sentPacket{{1, 0}}; !slices.Equal(got, want) {
			t.Fatalf("sent %v, want %v", got, want)
		}
		if got, want := td.Stats(), (Stats{Forwarded: 1, Dropped: 1}); got != want {
			t.Fatalf("stats %v, want %v", got, want)
		}
	})
}
