package client

import (
	"fmt"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// pop is popInto returning the event, for the tests.
func (q *eventQueue) pop() (ev Event, gap *GapError, ok bool, finished int) {
	gap, ok, finished = q.popInto(&ev)
	return ev, gap, ok, finished
}

// section builds a decoded section of n records from base.
func section(base uint64, n int) wire.BatchView {
	return wire.BatchView{Shard: 1, Base: base, Timestamp: 7, Count: uint32(n), Records: wire.AppendRecords(nil, recs(base, n))}
}

func TestEventQueue(t *testing.T) {
	tests := []struct {
		name   string
		next   uint64
		frames [][]wire.BatchView
		want   []uint64
		// dropped is how many records the queue drops.
		dropped uint64
	}{
		{name: "in order", next: 0,
			frames: [][]wire.BatchView{{section(0, 3)}, {section(3, 2)}},
			want:   []uint64{0, 1, 2, 3, 4}},
		{name: "starts inside a batch", next: 5,
			frames: [][]wire.BatchView{{section(3, 4)}},
			want:   []uint64{5, 6}, dropped: 2},
		{name: "whole sections below next", next: 10,
			frames: [][]wire.BatchView{{section(0, 5), section(5, 5)}, {section(10, 1)}},
			want:   []uint64{10}, dropped: 10},
		{name: "repeats dropped", next: 0,
			frames: [][]wire.BatchView{{section(0, 3)}, {section(1, 4)}},
			want:   []uint64{0, 1, 2, 3, 4}, dropped: 2},
		{name: "gap passed over", next: 0,
			frames: [][]wire.BatchView{{section(0, 2), section(7, 2)}, {section(8, 3)}},
			want:   []uint64{0, 1, 7, 8, 9, 10}, dropped: 1},
		{name: "everything old", next: 100,
			frames: [][]wire.BatchView{{section(0, 2)}, {section(2, 2)}},
			want:   nil, dropped: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newEventQueue(tc.next)
			for _, f := range tc.frames {
				q.push(f)
			}
			var got []uint64
			finished := 0
			for {
				// ready bounds what pop can still yield, exactly when
				// nothing below next is held.
				if r := q.ready(); r < len(tc.want)-len(got) {
					t.Fatalf("ready %d with %d events to come", r, len(tc.want)-len(got))
				}
				ev, _, ok, fin := q.pop()
				finished += fin
				if !ok {
					break
				}
				if string(ev.Payload) != fmt.Sprint("p", ev.Offset) || ev.Shard != 1 || ev.Timestamp.UnixNano() != 7 {
					t.Fatalf("event %+v", ev)
				}
				got = append(got, ev.Offset)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("offsets %v, want %v", got, tc.want)
			}
			if finished != len(tc.frames) || q.frameCount() != 0 {
				t.Fatalf("finished %d frames (holding %d), want %d", finished, q.frameCount(), len(tc.frames))
			}
			if q.ready() != 0 {
				t.Fatalf("ready %d after the queue ran dry", q.ready())
			}
			if q.dropped != tc.dropped {
				t.Fatalf("dropped %d, want %d", q.dropped, tc.dropped)
			}
		})
	}
}

// TestEventQueueFinishesFrameWithLastEvent: the frame that yields the last
// event is reported finished by the same pop, so its slot is returned at
// once.
func TestEventQueueFinishesFrameWithLastEvent(t *testing.T) {
	q := newEventQueue(0)
	q.push([]wire.BatchView{section(0, 2)})
	if _, _, ok, fin := q.pop(); !ok || fin != 0 {
		t.Fatalf("first pop: ok %v finished %d", ok, fin)
	}
	if ev, _, ok, fin := q.pop(); !ok || fin != 1 || ev.Offset != 1 {
		t.Fatalf("last pop: %d ok %v finished %d", ev.Offset, ok, fin)
	}
	if q.frameCount() != 0 {
		t.Fatalf("holding %d frames", q.frameCount())
	}
}

// popFront zeroes the slot it removes, and removing the last element keeps
// the slice where it is, so a queue kept empty by its consumer reuses its
// array.
func TestPopFrontKeepsTheArray(t *testing.T) {
	a, b := new(int), new(int)
	arr := []*int{a, b, nil, nil}
	s := popFront(arr[:2])
	if len(s) != 1 || s[0] != b || arr[0] != nil {
		t.Fatalf("after the first pop: %v (array %v)", s, arr)
	}
	s = popFront(s)
	if len(s) != 0 || cap(s) != 3 || arr[1] != nil {
		t.Fatalf("popping the last element: len %d cap %d, array %v; want 0, 3 and both slots cleared", len(s), cap(s), arr)
	}
	if got := testing.AllocsPerRun(100, func() {
		s = append(s, a)
		s = popFront(s)
	}); got != 0 {
		t.Fatalf("a push and a pop on an emptied queue allocated %v times", got)
	}
}
