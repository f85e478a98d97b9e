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

// BenchmarkBadgerCommitFileSize measures synced commits of one 64 × 128 B
// batch each (what a lone shard commits under single-record publishing)
// over the whole life of a value log file, for the default file size and
// the 64 MiB default before it. One op writes a file's worth of such
// commits; commit-ms is the mean commit. Badger writes its value log
// through a shared mapping, and a sync of it costs more the more of the
// file has been written (see defaultValueLogFileSize): on this machine,
// with -benchtime 1x, the mean was 1.27-1.67 ms per commit with 64 MiB
// files against 0.56-0.65 ms with 32 MiB.
func BenchmarkBadgerCommitFileSize(b *testing.B) {
	const (
		recordsPerBatch = 64
		recordBytes     = 128 + 3
	)
	rng := rand.New(rand.NewPCG(5, 6))
	records := randBytes(rng, recordsPerBatch*recordBytes)
	for _, size := range []int64{defaultValueLogFileSize, 64 << 20} {
		b.Run(fmt.Sprintf("vlog=%dMiB", size>>20), func(b *testing.B) {
			o := DefaultBadgerOptions(b.TempDir())
			o.ValueLogFileSize = size
			l, err := OpenBadger(o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			appends := []Append{{Shard: ShardKey{Stream: 1}, Batch: Batch{Count: recordsPerBatch, Records: records}}}
			perFile := int(size / int64(envelopeHeaderLen+len(records)))
			commits := 0
			for b.Loop() {
				for range perFile {
					appends[0].Batch.Base += recordsPerBatch
					appends[0].Batch.Timestamp++
					if err := l.Commit(appends, nil); err != nil {
						b.Fatal(err)
					}
					commits++
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(commits), "commit-ms")
		})
	}
}
