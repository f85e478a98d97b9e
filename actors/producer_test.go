package actors

import (
	"slices"
	"testing"
)

// forgetFrom drops what a recovered tail cut off a producer's memory, and
// only that.
func TestProducerForgetFrom(t *testing.T) {
	// Sequences 5, 6, 7 at [10,12), [12,15), [20,21): another producer
	// wrote [15,20).
	batches := []producerBatch{{seq: 5, base: 10, count: 2}, {seq: 6, base: 12, count: 3}, {seq: 7, base: 20, count: 1}}
	tests := []struct {
		tail    uint64
		changed bool
		lastSeq uint64
		kept    int
	}{
		{tail: 21, changed: false, lastSeq: 7, kept: 3},
		{tail: 30, changed: false, lastSeq: 7, kept: 3},
		{tail: 20, changed: true, lastSeq: 6, kept: 2},
		{tail: 15, changed: true, lastSeq: 6, kept: 2},
		{tail: 14, changed: true, lastSeq: 5, kept: 1},
		{tail: 12, changed: true, lastSeq: 5, kept: 1},
		{tail: 3, changed: true, lastSeq: 4, kept: 0},
	}
	for _, tt := range tests {
		p := &producerState{id: 9}
		for _, b := range batches {
			p.admit(b)
		}
		if changed := p.forgetFrom(tt.tail); changed != tt.changed || p.lastSeq != tt.lastSeq || !slices.Equal(p.recent, batches[:tt.kept]) {
			t.Errorf("tail %d: changed %v, last sequence %d, remembered %v; want %v, %d, %v",
				tt.tail, changed, p.lastSeq, p.recent, tt.changed, tt.lastSeq, batches[:tt.kept])
		}
		// What is persisted says the same.
		q, err := decodeProducerState(p.encode())
		if err != nil || q.lastSeq != p.lastSeq || !slices.Equal(q.recent, p.recent) {
			t.Errorf("tail %d: persisted as %+v, %v", tt.tail, q, err)
		}
	}
}
