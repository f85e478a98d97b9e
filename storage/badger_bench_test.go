package storage

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkBadgerCommit measures synced commits of G batches (one per shard,
// as the storage writer gathers them) of 64 records of 128 bytes, with
// DefaultBadgerOptions. It reports records/s; the bytes are the stored
// envelopes.
func BenchmarkBadgerCommit(b *testing.B) {
	const (
		recordsPerBatch = 64
		recordBytes     = 128 + 3 // payload and a few bytes of framing
	)
	rng := rand.New(rand.NewPCG(3, 4))
	records := randBytes(rng, recordsPerBatch*recordBytes)
	for _, g := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("G=%d", g), func(b *testing.B) {
			l, err := OpenBadger(DefaultBadgerOptions(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			appends := make([]Append, g)
			for i := range appends {
				appends[i] = Append{
					Shard: ShardKey{Stream: 1, Shard: uint32(i)},
					Batch: Batch{Count: recordsPerBatch, Records: records},
				}
			}
			b.SetBytes(int64(g * (envelopeHeaderLen + len(records))))
			commits := 0
			for b.Loop() {
				for i := range appends {
					appends[i].Batch.Base += recordsPerBatch
					appends[i].Batch.Timestamp++
				}
				if err := l.Commit(appends, nil); err != nil {
					b.Fatal(err)
				}
				commits++
			}
			b.ReportMetric(float64(commits*g*recordsPerBatch)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
