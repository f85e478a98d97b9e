package actors

// StreamIfAny returns the counters of stream, or nil if it has none (it
// was deleted): unlike Stream it never brings a deleted stream's series
// back.
func (s *Stats) StreamIfAny(stream string) *StreamCounters {
	if s == nil {
		return nil
	}
	if v, ok := s.labels.streams.Load(stream); ok {
		return v.(*StreamCounters)
	}
	return nil
}

// ShardLag is one shard's part of a group's lag: the group's committed
// cursor there, as its coordinator last published it, and the shard's
// committed tail, as the shard last published it.
type ShardLag struct {
	Committed, Tail uint64
}

// Lag is the records between Committed and Tail (0 when the cursor is at or
// past the tail).
func (l ShardLag) Lag() uint64 {
	if l.Tail > l.Committed {
		return l.Tail - l.Committed
	}
	return 0
}

// ShardLags returns the group's lag shard by shard, read from the same
// atomics as Lag (nil before its coordinator has loaded).
func (g *GroupGauges) ShardLags() []ShardLag {
	l := g.lag.Load()
	if l == nil {
		return nil
	}
	out := make([]ShardLag, len(l.committed))
	for i := range l.committed {
		out[i] = ShardLag{Committed: l.committed[i].Load(), Tail: l.shards[i].Tail.Load()}
	}
	return out
}
