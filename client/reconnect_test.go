package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// TestReconnectNormalized: the zero Reconnect is the documented defaults;
// out-of-range fields are clamped.
func TestReconnectNormalized(t *testing.T) {
	tests := []struct {
		name string
		in   Reconnect
		want Reconnect
	}{
		{"zero is the defaults", Reconnect{}, Reconnect{Timeout: DefaultReconnectTimeout, InitialDelay: DefaultReconnectInitialDelay,
			MaxDelay: DefaultReconnectMaxDelay, Jitter: DefaultReconnectJitter}},
		{"kept", Reconnect{MaxAttempts: 3, Timeout: time.Minute, InitialDelay: time.Second, MaxDelay: 8 * time.Second, Jitter: 0.25},
			Reconnect{MaxAttempts: 3, Timeout: time.Minute, InitialDelay: time.Second, MaxDelay: 8 * time.Second, Jitter: 0.25}},
		{"negative: no time bound, no jitter", Reconnect{MaxAttempts: -1, Timeout: -1, Jitter: -1},
			Reconnect{Timeout: -1, InitialDelay: DefaultReconnectInitialDelay, MaxDelay: DefaultReconnectMaxDelay}},
		{"max delay at least the initial one, jitter at most 1", Reconnect{InitialDelay: 5 * time.Second, MaxDelay: time.Second, Jitter: 3},
			Reconnect{Timeout: DefaultReconnectTimeout, InitialDelay: 5 * time.Second, MaxDelay: 5 * time.Second, Jitter: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.in.normalized(); got != tc.want {
				t.Fatalf("normalized = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestBackoffSchedule: the first attempt is immediate, then the waits
// double from InitialDelay up to MaxDelay; jitter takes at most its fraction
// off; MaxAttempts and Timeout end the schedule.
func TestBackoffSchedule(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	tests := []struct {
		name string
		p    Reconnect
		// r is the random number every attempt draws.
		r float64
		// step is how long each attempt takes after its wait (a dial).
		step time.Duration
		// want are the waits allowed, in order; then next refuses.
		want []time.Duration
	}{
		{name: "doubling to the cap, attempts bound",
			p:    Reconnect{MaxAttempts: 7, InitialDelay: 100 * ms, MaxDelay: 1000 * ms, Jitter: -1},
			want: []time.Duration{0, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}},
		{name: "jitter at its most takes half off",
			p: Reconnect{MaxAttempts: 4, InitialDelay: 100 * ms, MaxDelay: 1000 * ms, Jitter: 0.5}, r: 1,
			want: []time.Duration{0, 50 * ms, 100 * ms, 200 * ms}},
		{name: "jitter at its least takes nothing off",
			p: Reconnect{MaxAttempts: 3, InitialDelay: 100 * ms, MaxDelay: 1000 * ms, Jitter: 0.5}, r: 0,
			want: []time.Duration{0, 100 * ms, 200 * ms}},
		{name: "timeout bound: no attempt would start at or past it",
			// Attempts start at 0, 1.1 s (0+1s dial+0.1 s), 2.3 s, 3.7 s; the
			// next would start at 5.5 s, past the 5 s timeout.
			p: Reconnect{Timeout: 5 * time.Second, InitialDelay: 100 * ms, MaxDelay: 10 * time.Second, Jitter: -1}, step: time.Second,
			want: []time.Duration{0, 100 * ms, 200 * ms, 400 * ms}},
		{name: "both unbounded runs on",
			p:    Reconnect{Timeout: -1, InitialDelay: 10 * ms, MaxDelay: 20 * ms, Jitter: -1},
			want: []time.Duration{0, 10 * ms, 20 * ms, 20 * ms, 20 * ms, 20 * ms, 20 * ms, 20 * ms, 20 * ms, 20 * ms}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackoff(tc.p, start)
			now := start
			var got []time.Duration
			for len(got) < 10 {
				wait, ok := b.next(now, tc.r)
				if !ok {
					break
				}
				got = append(got, wait)
				now = now.Add(wait + tc.step)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("waits %v, want %v", got, tc.want)
			}
			if len(tc.want) < 10 {
				if _, ok := b.next(now, tc.r); ok {
					t.Fatal("the schedule allowed an attempt after it ended")
				}
			}
			if b.attempts != len(got) {
				t.Fatalf("counted %d attempts, allowed %d", b.attempts, len(got))
			}
		})
	}
}

// TestBackoffJitterBounds: whatever the random number, every wait lies in
// [d·(1−Jitter), d] for the wait d without jitter.
func TestBackoffJitterBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Unix(0, 0)
	for _, jitter := range []float64{0.1, 0.5, 1} {
		p := Reconnect{Timeout: -1, InitialDelay: 100 * time.Millisecond, MaxDelay: 3 * time.Second, Jitter: jitter}
		plain := newBackoff(Reconnect{Timeout: -1, InitialDelay: p.InitialDelay, MaxDelay: p.MaxDelay, Jitter: -1}, start)
		jittered := newBackoff(p, start)
		for i := range 50 {
			d, _ := plain.next(start, 0)
			r := rng.Float64()
			w, ok := jittered.next(start, r)
			if !ok {
				t.Fatal("unbounded schedule ended")
			}
			lo := d - time.Duration(float64(d)*jitter)
			if w < lo || w > d {
				t.Fatalf("jitter %.1f, attempt %d, r %.3f: wait %v outside [%v, %v]", jitter, i+1, r, w, lo, d)
			}
		}
	}
}

// TestReconnectLoop: the loop waits as the backoff says (on its clock),
// dials every seed in turn from the one after the lost address, stops at
// the first that answers, and gives up when the attempts run out, at once
// when a node refuses the client, and promptly when the client closes.
func TestReconnectLoop(t *testing.T) {
	unreachable := &DialError{Addr: "x", Err: &noAnswerError{timeout: time.Second}}
	type dialCall struct {
		first int
		at    time.Time
	}
	run := func(t *testing.T, p Reconnect, results []error) (reconnectOutcome, []dialCall, *fakeClock) {
		t.Helper()
		clk := newFakeClock()
		start := clk.Now()
		var calls []dialCall
		loop := &reconnectLoop{
			b: newBackoff(p, start), clk: clk, jitter: func() float64 { return 0 }, first: 2,
			dial: func(ctx context.Context, first int) (dialed, int, error) {
				calls = append(calls, dialCall{first: first, at: clk.Now()})
				if len(calls) > len(results) {
					t.Fatalf("dial %d: more dials than scripted", len(calls))
				}
				if err := results[len(calls)-1]; err != nil {
					return dialed{}, 0, err
				}
				return dialed{s: &session{}}, 1, nil
			},
		}
		out := make(chan reconnectOutcome, 1)
		go func() { out <- loop.run(context.Background()) }()
		// Fire each wait as the loop sets it.
		for {
			select {
			case o := <-out:
				return o, calls, clk
			case due := <-clk.started:
				clk.Advance(due.Sub(clk.Now()))
			case <-time.After(10 * time.Second):
				t.Fatal("the reconnect loop neither waited nor ended")
			}
		}
	}
	p := Reconnect{MaxAttempts: 4, InitialDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: -1}

	t.Run("connects on the third attempt", func(t *testing.T) {
		out, calls, _ := run(t, p, []error{unreachable, unreachable, nil})
		if out.d.s == nil || out.err != nil || out.closed || out.attempts != 3 || out.seed != 1 {
			t.Fatalf("outcome %+v", out)
		}
		start := time.Unix(1_700_000_000, 0)
		wantAt := []time.Time{start, start.Add(100 * time.Millisecond), start.Add(300 * time.Millisecond)}
		for i, c := range calls {
			if c.first != 2 || !c.at.Equal(wantAt[i]) {
				t.Fatalf("dial %d: first seed %d at %v, want 2 at %v", i+1, c.first, c.at.Sub(start), wantAt[i].Sub(start))
			}
		}
	})
	t.Run("gives up after MaxAttempts with the last error", func(t *testing.T) {
		last := &DialError{Addr: "last", Err: errors.New("boom")}
		out, calls, _ := run(t, p, []error{unreachable, unreachable, unreachable, last})
		if out.d.s != nil || out.closed || out.attempts != 4 || !errors.Is(out.err, last.Err) || len(calls) != 4 {
			t.Fatalf("outcome %+v after %d dials", out, len(calls))
		}
	})
	t.Run("a node's refusal ends it at once", func(t *testing.T) {
		refusal := &DialError{Addr: "x", Err: wire.Errorf(wire.CodeUnauthenticated, "bad token")}
		out, calls, _ := run(t, p, []error{unreachable, refusal})
		if !errors.Is(out.err, ErrUnauthenticated) || out.attempts != 2 || len(calls) != 2 {
			t.Fatalf("outcome %+v after %d dials", out, len(calls))
		}
	})
	t.Run("a draining node is tried again", func(t *testing.T) {
		draining := &DialError{Addr: "x", Err: wire.Errorf(wire.CodeShuttingDown, "draining")}
		out, _, _ := run(t, p, []error{draining, nil})
		if out.d.s == nil || out.attempts != 2 {
			t.Fatalf("outcome %+v", out)
		}
	})
	t.Run("close ends the wait", func(t *testing.T) {
		clk := newFakeClock()
		ctx, cancel := context.WithCancel(context.Background())
		dials := 0
		loop := &reconnectLoop{b: newBackoff(p, clk.Now()), clk: clk, jitter: func() float64 { return 0 },
			dial: func(context.Context, int) (dialed, int, error) { dials++; return dialed{}, 0, unreachable }}
		out := make(chan reconnectOutcome, 1)
		go func() { out <- loop.run(ctx) }()
		<-clk.started // the loop waits before its second attempt
		cancel()
		select {
		case o := <-out:
			if !o.closed || dials != 1 {
				t.Fatalf("outcome %+v after %d dials", o, dials)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the loop did not end when the client closed")
		}
	})
}

// TestSplitSeeds: Dial's address list and WithSeeds, in order, each once.
func TestSplitSeeds(t *testing.T) {
	got := splitSeeds(" a:1, b:2 ,,a:1", []string{"c:3", "b:2,d:4"})
	if fmt.Sprint(got) != "[a:1 b:2 c:3 d:4]" {
		t.Fatalf("seeds %v", got)
	}
	if got := splitSeeds("", nil); len(got) != 0 {
		t.Fatalf("seeds of nothing: %v", got)
	}
}
