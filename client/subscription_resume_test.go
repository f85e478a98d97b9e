package client

import (
	"fmt"
	"strings"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// TestShardResume: where a shard resumes after a lost connection, what it
// asks after the node's refusals, and the gap it reports.
func TestShardResume(t *testing.T) {
	type step struct {
		// refuse is the detail of an offset_out_of_range refusal; accept
		// is the offset the node accepts at. One of them is set.
		refuse, accept *uint64
	}
	u := func(v uint64) *uint64 { return &v }
	tests := []struct {
		name  string
		from  uint64
		steps []step
		// asks are the starts asked, in order ("offset 5", "latest").
		asks []string
		// ended: the refusals ran out (the shard ends with the last).
		ended bool
		gap   *GapError
		watch bool
	}{
		{name: "durable: accepted where it left off, no gap, watched",
			from: 5, steps: []step{{accept: u(5)}}, asks: []string{"offset 5"}, watch: true},
		{name: "retention deleted part: resume at the first retained, gap",
			from: 5, steps: []step{{refuse: u(9)}, {accept: u(9)}}, asks: []string{"offset 5", "offset 9"},
			gap: &GapError{Shard: 3, From: 5, To: 9}},
		{name: "the shard restarted empty (ephemeral node restart): offsets reset",
			from: 100, steps: []step{{refuse: u(0)}, {accept: u(0)}}, asks: []string{"offset 100", "offset 0"},
			gap: &GapError{Shard: 3, From: 100, To: 0}},
		{name: "refused twice: the tail",
			from: 100, steps: []step{{refuse: u(0)}, {refuse: u(40)}, {accept: u(57)}}, asks: []string{"offset 100", "offset 0", "latest"},
			gap: &GapError{Shard: 3, From: 100, To: 57}},
		{name: "refused thrice: the shard ends",
			from: 100, steps: []step{{refuse: u(0)}, {refuse: u(40)}, {refuse: u(60)}}, asks: []string{"offset 100", "offset 0", "latest"},
			ended: true},
		{name: "the tail after a refusal is where it left off: no gap",
			from: 5, steps: []step{{refuse: u(5)}, {accept: u(5)}}, asks: []string{"offset 5", "offset 5"}, watch: true},
	}
	ask := func(k wire.StartKind, off uint64) string {
		if k == wire.StartLatest {
			return "latest"
		}
		return fmt.Sprint("offset ", off)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r shardResume
			asks := []string{ask(r.begin(tc.from))}
			var gap *GapError
			var watch, ended bool
			for _, st := range tc.steps {
				if st.refuse != nil {
					k, off, ok := r.refused(*st.refuse)
					if !ok {
						ended = true
						break
					}
					asks = append(asks, ask(k, off))
					continue
				}
				gap, watch = r.subscribed(3, *st.accept)
			}
			if strings.Join(asks, ", ") != strings.Join(tc.asks, ", ") {
				t.Fatalf("asked %v, want %v", asks, tc.asks)
			}
			if ended != tc.ended || watch != tc.watch || fmt.Sprint(gap) != fmt.Sprint(tc.gap) {
				t.Fatalf("ended %v watch %v gap %v, want ended %v watch %v gap %v", ended, watch, gap, tc.ended, tc.watch, tc.gap)
			}
			if r.active && !ended && len(tc.steps) > 0 && tc.steps[len(tc.steps)-1].accept != nil {
				t.Fatal("still resuming after the node accepted")
			}
		})
	}
	// Not resuming (a first subscribe, or a lag's resume): nothing to say.
	var r shardResume
	if _, _, ok := r.refused(3); ok {
		t.Fatal("a refusal outside a resume was handled")
	}
	if g, w := r.subscribed(0, 7); g != nil || w {
		t.Fatal("an answer outside a resume reported something")
	}
}

// TestEventQueueAcrossResume: the queue carries held records over a
// resume, resumes one past the last record received, and yields the gap
// and watch markers in line.
func TestEventQueueAcrossResume(t *testing.T) {
	// pops returns what the queue yields, as "5" for an event and
	// "gap 5-9" for a gap.
	pops := func(q *eventQueue) string {
		var out []string
		for {
			ev, gap, ok, _ := q.pop()
			if !ok {
				return strings.Join(out, " ")
			}
			if gap != nil {
				out = append(out, fmt.Sprintf("gap %d-%d", gap.From, gap.To))
				continue
			}
			out = append(out, fmt.Sprint(ev.Offset))
		}
	}
	t.Run("resume offset follows what was received, not what was yielded", func(t *testing.T) {
		q := newEventQueue(3)
		if q.resumeOffset() != 3 {
			t.Fatalf("resume offset %d before anything arrived", q.resumeOffset())
		}
		q.push([]wire.BatchView{section(0, 5), section(5, 2)}) // 0..6, from 3
		if q.resumeOffset() != 7 {
			t.Fatalf("resume offset %d, want 7", q.resumeOffset())
		}
		if got := pops(q); got != "3 4 5 6" {
			t.Fatalf("yielded %q", got)
		}
		if q.resumeOffset() != 7 {
			t.Fatalf("resume offset %d after yielding, want 7", q.resumeOffset())
		}
	})
	t.Run("no gap: the replay overlaps nothing, the watch passes", func(t *testing.T) {
		q := newEventQueue(0)
		q.push([]wire.BatchView{section(0, 3)})
		q.pushWatch(q.resumeOffset())
		q.push([]wire.BatchView{section(3, 2)})
		if got := pops(q); got != "0 1 2 3 4" {
			t.Fatalf("yielded %q", got)
		}
	})
	t.Run("a resumed batch that starts before the resume offset", func(t *testing.T) {
		q := newEventQueue(0)
		q.push([]wire.BatchView{section(0, 3)})
		q.pushWatch(3)
		q.push([]wire.BatchView{section(2, 3)}) // the node's batch 2..4
		if got := pops(q); got != "0 1 2 3 4" {
			t.Fatalf("yielded %q", got)
		}
	})
	t.Run("the node skipped records without refusing", func(t *testing.T) {
		q := newEventQueue(0)
		q.push([]wire.BatchView{section(0, 3)})
		q.pushWatch(3)
		q.push([]wire.BatchView{section(8, 2)})
		if got := pops(q); got != "0 1 2 gap 3-8 8 9" {
			t.Fatalf("yielded %q", got)
		}
	})
	t.Run("a gap after held records, then a reset shard's new offsets", func(t *testing.T) {
		q := newEventQueue(90)
		q.push([]wire.BatchView{section(90, 10)}) // 90..99 held at the loss
		q.pushGap(&GapError{Shard: 1, From: 100, To: 0})
		if q.resumeOffset() != 0 {
			t.Fatalf("resume offset %d after a reset, want 0", q.resumeOffset())
		}
		q.push([]wire.BatchView{section(0, 3)})
		if q.resumeOffset() != 3 {
			t.Fatalf("resume offset %d, want 3", q.resumeOffset())
		}
		// Lost again before anything was yielded: the watch sits after
		// the old records, so their offsets (above 3) are no gap.
		q.pushWatch(3)
		q.push([]wire.BatchView{section(3, 1)})
		want := "90 91 92 93 94 95 96 97 98 99 gap 100-0 0 1 2 3"
		if got := pops(q); got != want {
			t.Fatalf("yielded %q, want %q", got, want)
		}
	})
	t.Run("ready counts markers and a stashed record", func(t *testing.T) {
		q := newEventQueue(0)
		q.pushWatch(0)
		q.push([]wire.BatchView{section(4, 1)})
		q.pushGap(&GapError{From: 5, To: 9})
		if q.ready() != 3 {
			t.Fatalf("ready %d, want 3", q.ready())
		}
		if _, gap, ok, _ := q.pop(); !ok || gap == nil || gap.From != 0 || gap.To != 4 {
			t.Fatalf("first pop: gap %v ok %v", gap, ok)
		}
		if q.ready() != 2 || q.frameCount() != 0 {
			t.Fatalf("ready %d frames %d with the record stashed and a gap held", q.ready(), q.frameCount())
		}
		if got := pops(q); got != "4 gap 5-9" {
			t.Fatalf("then %q", got)
		}
		if q.ready() != 0 {
			t.Fatalf("ready %d when empty", q.ready())
		}
	})
}
