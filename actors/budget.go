package actors

import "sync/atomic"

// Budget is a node-wide byte budget shared by many actors (the
// subscriber_queue_max_bytes_total and replay_ring_max_bytes_total
// settings). A nil *Budget is no budget: every call succeeds. It is safe for
// concurrent use.
type Budget struct {
	// limit is the budget's size in bytes.
	limit int64
	// used is what is currently taken.
	used atomic.Int64
}

// NewBudget returns a budget of limit bytes, or nil (no budget) when limit
// is 0 or less.
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit}
}

// TryAcquire takes n bytes if they fit and reports whether it did.
func (b *Budget) TryAcquire(n int64) bool {
	if b == nil {
		return true
	}
	for {
		used := b.used.Load()
		if used+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// fits reports whether n more bytes would fit now (without taking them).
func (b *Budget) fits(n int64) bool {
	return b == nil || b.used.Load()+n <= b.limit
}

// Acquire takes n bytes even past the limit (for what the budget must cover
// but must not refuse, such as history replay).
func (b *Budget) Acquire(n int64) {
	if b != nil {
		b.used.Add(n)
	}
}

// Release gives n bytes back.
func (b *Budget) Release(n int64) {
	if b != nil {
		b.used.Add(-n)
	}
}

// Used returns what is taken (0 for no budget).
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}
