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

// RecordIter's inline path for plain records (no key, no headers, a
// payload under 16 KiB) yields what the general path yields, record for
// record and fault for fault, over well-formed blocks around its bounds
// and the same blocks cut short or with a byte changed.
func TestRecordIterPlainPathMatchesGeneral(t *testing.T) {
	type step struct {
		key, payload []byte
		headers      int
		pos          int
	}
	walk := func(block []byte, general bool) ([]step, error) {
		it := &RecordIter{b: block}
		var r Record
		var steps []step
		for it.err == nil && it.off < len(it.b) {
			var ok bool
			if general {
				ok = it.next(&r)
			} else {
				ok = it.Next(&r)
			}
			if !ok {
				break
			}
			steps = append(steps, step{key: r.Key, payload: r.Payload, headers: len(r.Headers), pos: it.Pos()})
		}
		return steps, it.Err()
	}
	same := func(name string, block []byte) {
		t.Helper()
		want, wantErr := walk(block, true)
		got, gotErr := walk(block, false)
		if len(got) != len(want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("%s: %d records, error %v; the general path: %d, %v", name, len(got), gotErr, len(want), wantErr)
		}
		// ValidateRecords' scan, with its own plain path, takes the block
		// exactly when the general path reads it whole.
		payload := 0
		for _, w := range want {
			payload += len(w.payload)
		}
		if n, ok := scanRecords(block, uint32(len(want))); len(want) > 0 && ok != (wantErr == nil) || ok && n != payload {
			t.Fatalf("%s: scanRecords = %d, %v; the general path read %d records, %d payload bytes, error %v", name, n, ok, len(want), payload, wantErr)
		}
		for j := range want {
			g, w := got[j], want[j]
			if !bytes.Equal(g.key, w.key) || !bytes.Equal(g.payload, w.payload) || g.headers != w.headers || g.pos != w.pos ||
				cap(g.payload) != cap(w.payload) || cap(g.key) != cap(w.key) {
				t.Fatalf("%s, record %d: %+v, the general path %+v", name, j, g, w)
			}
		}
	}
	// Every cut of a block of plain records around the one- and two-byte
	// length bounds.
	var plain []Record
	for _, n := range []int{0, 1, 127, 128, 129, 300} {
		plain = append(plain, Record{Payload: bytes.Repeat([]byte{'p'}, n)})
	}
	whole := AppendRecords(nil, plain)
	for cut := range len(whole) + 1 {
		same(fmt.Sprintf("cut at %d", cut), whole[:cut])
	}
	rng := rand.New(rand.NewPCG(5, 6))
	sizes := []int{0, 1, 127, 128, 129, 16383, 16384, 16385, 20000}
	for i := range 2000 {
		recs := make([]Record, 1+rng.IntN(6))
		for j := range recs {
			r := &recs[j]
			r.Payload = bytes.Repeat([]byte{byte(j)}, sizes[rng.IntN(len(sizes))])
			switch rng.IntN(4) {
			case 0:
				r.Key = []byte("k")
			case 1:
				r.Headers = []RecordHeader{{Key: "h", Value: []byte("v")}}
			}
		}
		block := AppendRecords(nil, recs)
		switch rng.IntN(3) {
		case 1:
			block = block[:rng.IntN(len(block)+1)]
		case 2:
			block[rng.IntN(len(block))] = byte(rng.IntN(256))
		}
		same(fmt.Sprintf("block %d", i), block)
	}
}
