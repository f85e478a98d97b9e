package storage

import (
	"math"
	"time"
)

// retainPlan decides, batch by batch from the oldest, which batches a
// RetentionPolicy deletes (see Log.Retain). It does no I/O: both logs walk
// their batch index and feed it, so they decide alike.
type retainPlan struct {
	// age is whether the policy has an age bound.
	age bool
	// cutoff is now-MaxAge in Unix nanoseconds: a batch with an older
	// Timestamp is expired. Meaningful only when age is set.
	cutoff int64
	// maxBytes is the byte bound; 0 means none.
	maxBytes int64
	// bytes is the Records bytes of the batches not deleted yet; kept only
	// with a byte bound.
	bytes int64
	// batches is the number of batches not deleted yet; kept only with a
	// byte bound.
	batches int
}

// newRetainPlan returns the plan of p at now for a shard holding batches
// batches of bytes Records bytes in all. The totals matter only with a byte
// bound (see needsTotals).
func newRetainPlan(p RetentionPolicy, now time.Time, batches int, bytes int64) retainPlan {
	r := retainPlan{batches: batches, bytes: bytes}
	if p.MaxAge > 0 {
		r.age = true
		n := now.UnixNano()
		if n < math.MinInt64+int64(p.MaxAge) {
			r.cutoff = math.MinInt64 // nothing is older
		} else {
			r.cutoff = n - int64(p.MaxAge)
		}
	}
	if p.MaxBytes > 0 {
		r.maxBytes = p.MaxBytes
	}
	return r
}

// needsTotals reports whether the plan of p needs the shard's batch count and
// bytes: only a byte bound does.
func needsTotals(p RetentionPolicy) bool { return p.MaxBytes > 0 }

// deletes reports whether b, the oldest batch not deleted yet, is deleted,
// and if so accounts for it. The walk must stop at the first false: Retain
// deletes a prefix of the log.
func (r *retainPlan) deletes(b BatchInfo) bool {
	expired := r.age && b.Timestamp < r.cutoff
	over := r.maxBytes > 0 && r.bytes > r.maxBytes && r.batches > 1
	if !expired && !over {
		return false
	}
	r.bytes -= b.Bytes
	r.batches--
	return true
}
