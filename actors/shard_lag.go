package actors

import (
	"cmp"
	"sort"
)

// Replication lag in records and bytes. raft's progress says, on the
// leader, which raft index each replica's log holds (Match); what that
// leaves the replica lacking of the shard log is the records and records
// bytes of the batches the leader applied above that index. applyMarks
// remembers, for the batches a replica applied lately, the raft index each
// applied at and the shard's tail and total records bytes after it, so
// that the lag is read off at any Match it covers. Entries that take no
// offset (a new leader's empty entry, a configuration change, a
// compaction, a refused or duplicate publish) leave no mark: the records
// and bytes after them are those of the last mark before.
//
// The marks are bounded. On the leader they are trimmed, on each raft
// tick, to the least Match of its replicas (marks below it are needed by
// no one); a follower keeps its last followerMarks, for the replicas it may
// come to lead. Nobody keeps more than maxMarks: past it, every other mark
// of the older half is dropped (thinned), so that a replica down for long
// is still covered, at a coarser grain: its lag is then at most a few
// batches more than it is, never less. A replica behind the first mark
// (it was behind before this replica started or installed a snapshot, or
// before a follower dropped its oldest marks) is counted from there: its
// lag in records and bytes is then at least what is shown. Either way its
// lag in entries, which raft knows exactly, says how far behind it is.

const (
	// followerMarks is how many marks a follower keeps.
	followerMarks = 256
	// maxMarks is how many marks anyone keeps (48 KiB).
	maxMarks = 2048
)

// applyMark is the shard after the batch applied at raft index index: its
// tail, and the records bytes applied in all (since the replica started).
type applyMark struct {
	index, tail, bytes uint64
}

// applyMarks are a replica's marks, oldest first. All fields are owned by
// the shard actor.
type applyMarks struct {
	// base is the shard before the first mark (at the index the replica
	// started at, installed a snapshot at, or the last mark dropped).
	base applyMark
	// marks are the batches applied since base, in index order (thinned
	// where there were more than limit).
	marks []applyMark
	// limit bounds the marks (0: maxMarks).
	limit int
}

// reset starts the marks afresh at index, with the shard's tail there.
func (a *applyMarks) reset(index, tail uint64) {
	a.base = applyMark{index: index, tail: tail, bytes: a.last().bytes}
	a.marks = a.marks[:0]
}

// last is the shard after the newest batch applied (base if none).
func (a *applyMarks) last() applyMark {
	if n := len(a.marks); n > 0 {
		return a.marks[n-1]
	}
	return a.base
}

// add records the batch of size records bytes applied at index, after
// which the shard's tail is tail.
func (a *applyMarks) add(index, tail uint64, size int) {
	a.marks = append(a.marks, applyMark{index: index, tail: tail, bytes: a.last().bytes + uint64(size)})
	if limit := cmp.Or(a.limit, maxMarks); len(a.marks) > limit {
		a.thin()
	}
}

// thin drops every other mark of the older half, the first kept.
func (a *applyMarks) thin() {
	half := len(a.marks) / 2
	kept := a.marks[:0]
	for i := 0; i < half; i += 2 {
		kept = append(kept, a.marks[i])
	}
	a.marks = append(kept, a.marks[half:]...)
}

// at is the shard after the last batch held applied at or below index;
// covered is false when index is below the first mark held (at is then
// the base). Where the marks were thinned, at may be before the batches
// up to index: the lag it gives is then somewhat more than the true one.
func (a *applyMarks) at(index uint64) (m applyMark, covered bool) {
	i := sort.Search(len(a.marks), func(i int) bool { return a.marks[i].index > index })
	if i > 0 {
		return a.marks[i-1], true
	}
	return a.base, index >= a.base.index
}

// lag is how many records and records bytes applied here a replica whose
// log holds the entries up to match lacks.
func (a *applyMarks) lag(match uint64) (records, bytes uint64) {
	m, _ := a.at(match)
	l := a.last()
	return l.tail - min(m.tail, l.tail), l.bytes - min(m.bytes, l.bytes)
}

// trim drops the marks no replica needs: those a replica whose log holds
// the entries up to least would not look at, keeping at most keep (keep
// <= 0: no bound but the limit, by thinning).
func (a *applyMarks) trim(least uint64, keep int) {
	n := sort.Search(len(a.marks), func(i int) bool { return a.marks[i].index > least })
	if keep > 0 {
		n = max(n, len(a.marks)-keep)
	}
	a.drop(n)
}

// drop drops the n oldest marks; the last one dropped becomes the base.
func (a *applyMarks) drop(n int) {
	if n <= 0 {
		return
	}
	a.base = a.marks[n-1]
	if rest := len(a.marks) - n; rest < cap(a.marks)/4 {
		// Most of the array is behind: copy what is left to a smaller one
		// rather than keep the large one alive.
		a.marks = append(make([]applyMark, 0, max(2*rest, 8)), a.marks[n:]...)
		return
	}
	a.marks = a.marks[n:]
}
