package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// ValidateRecords' fast path accepts every well-formed block itself, with
// the iterator's payload count: without it, valid batches would still
// validate (through the iterator) and only the speed would be lost, which
// no other test sees.
func TestScanRecordsAcceptsWellFormedBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		recs := make([]Record, 1+rng.IntN(40))
		want := 0
		for j := range recs {
			r := &recs[j]
			if rng.IntN(2) == 0 {
				r.Key = bytes.Repeat([]byte{'k'}, rng.IntN(300))
			}
			for range rng.IntN(4) {
				r.Headers = append(r.Headers, RecordHeader{Key: fmt.Sprint("h", rng.IntN(200)), Value: bytes.Repeat([]byte{'v'}, rng.IntN(200))})
			}
			r.Payload = bytes.Repeat([]byte{'p'}, rng.IntN(3000))
			want += len(r.Payload)
		}
		block := AppendRecords(nil, recs)
		got, ok := scanRecords(block, uint32(len(recs)))
		if !ok || got != want {
			t.Fatalf("block %d (%d records): scanRecords = %d, %v; want %d, true", i, len(recs), got, ok, want)
		}
		if _, ok := scanRecords(block, uint32(len(recs)+1)); ok {
			t.Fatalf("block %d: accepted with one record more than it holds", i)
		}
		if _, ok := scanRecords(block[:len(block)-1], uint32(len(recs))); ok {
			t.Fatalf("block %d: accepted cut short by a byte", i)
		}
	}
}

// BenchmarkValidateRecords validates a batch of 64 records of 128 bytes,
// the shape of a publish in the fan-out bench.
func BenchmarkValidateRecords(b *testing.B) {
	recs := make([]Record, 64)
	for i := range recs {
		recs[i].Payload = bytes.Repeat([]byte{'p'}, 128)
	}
	block := AppendRecords(nil, recs)
	b.SetBytes(int64(len(block)))
	for b.Loop() {
		if _, err := ValidateRecords(block, 64); err != nil {
			b.Fatal(err)
		}
	}
}
