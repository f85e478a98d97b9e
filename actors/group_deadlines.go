package actors

import (
	"container/heap"
	"time"
)

// deadlineEntry is one claim's visibility deadline; seq tells a live claim
// from a settled or re-claimed one at the same offset.
type deadlineEntry struct {
	at     time.Time
	shard  uint32
	offset uint64
	seq    uint64
}

// deadlineQueue orders claim deadlines, earliest first. Claims are made
// with now plus the group's visibility timeout, so deadlines almost always
// arrive in order: those go to the back of a FIFO, in O(1) and without
// boxing an entry per claim as container/heap does. An entry earlier than
// the FIFO's last (a shorter visibility timeout configured, or a clock
// that stepped back) goes to a heap beside it; the earliest entry is the
// earlier of the FIFO's front and the heap's top. Entries are never
// removed but from the front: the owner skips dead ones (lazy deletion)
// and compacts when they pile up.
type deadlineQueue struct {
	// fifo[head:] are in non-decreasing order of at.
	fifo []deadlineEntry
	head int
	// late holds the entries that arrived out of order.
	late deadlineHeap
}

// len is the number of entries, live or dead.
func (q *deadlineQueue) len() int { return len(q.fifo) - q.head + len(q.late) }

// push adds e.
func (q *deadlineQueue) push(e deadlineEntry) {
	if n := len(q.fifo); n > q.head && e.at.Before(q.fifo[n-1].at) {
		heap.Push(&q.late, e)
		return
	}
	if q.head > 0 && q.head == len(q.fifo) {
		q.fifo, q.head = q.fifo[:0], 0
	}
	q.fifo = append(q.fifo, e)
}

// front returns the earliest entry and whether there is one.
func (q *deadlineQueue) front() (deadlineEntry, bool) {
	switch {
	case q.head < len(q.fifo) && (len(q.late) == 0 || !q.late[0].at.Before(q.fifo[q.head].at)):
		return q.fifo[q.head], true
	case len(q.late) > 0:
		return q.late[0], true
	}
	return deadlineEntry{}, false
}

// pop removes the entry front returns.
func (q *deadlineQueue) pop() {
	if q.head < len(q.fifo) && (len(q.late) == 0 || !q.late[0].at.Before(q.fifo[q.head].at)) {
		q.fifo[q.head] = deadlineEntry{}
		q.head++
		if q.head == len(q.fifo) {
			q.fifo, q.head = q.fifo[:0], 0
		} else if q.head >= 1024 && q.head*2 >= len(q.fifo) {
			// Most of the backing array is popped: move the rest down.
			n := copy(q.fifo, q.fifo[q.head:])
			clear(q.fifo[n:])
			q.fifo, q.head = q.fifo[:n], 0
		}
		return
	}
	if len(q.late) > 0 {
		heap.Pop(&q.late)
	}
}

// retain keeps only the entries live says are live, in the same order.
func (q *deadlineQueue) retain(live func(deadlineEntry) bool) {
	kept := q.fifo[:0]
	for _, e := range q.fifo[q.head:] {
		if live(e) {
			kept = append(kept, e)
		}
	}
	clear(q.fifo[len(kept):])
	q.fifo, q.head = kept, 0
	late := q.late[:0]
	for _, e := range q.late {
		if live(e) {
			late = append(late, e)
		}
	}
	clear(q.late[len(late):])
	q.late = late
	heap.Init(&q.late)
}

type deadlineHeap []deadlineEntry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadlineEntry)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
