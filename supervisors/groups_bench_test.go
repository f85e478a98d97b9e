package supervisors

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// preloadGroupStream publishes n records of 128 B (in batches of 64) to a
// fresh durable one-shard stream, outside the timer.
func preloadGroupStream(b *testing.B, c *client.Client, name client.StreamName, n int) {
	b.Helper()
	ctx := context.Background()
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = make([]byte, 128)
		_, _ = rand.Read(batch[i])
	}
	futures := make([]*client.PublishFuture, 0, n/64+1)
	for left := n; left > 0; left -= len(batch) {
		f, err := c.PublishAsync(ctx, name, batch[:min(left, len(batch))], client.WithAck(client.AckPerBatch))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGroupPush measures records consumed through a push member: the
// node pushes within the credit window, the member acks every delivery
// (each ack returns its credit and commits durably). One op is one record
// consumed and acked.
//
//	go test -run '^$' -bench BenchmarkGroupPush -benchtime 200000x ./supervisors/
func BenchmarkGroupPush(b *testing.B) {
	for _, window := range []int{100, 1000} {
		b.Run(fmt.Sprintf("window-%d", window), func(b *testing.B) {
			n := testNode(b, b.TempDir())
			c := dialClient(b, n)
			ctx := context.Background()
			name := client.StreamName{Tenant: "bench", Namespace: "bench", Stream: fmt.Sprintf("push-%d-%d", window, b.N)}
			if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
				b.Fatal(err)
			}
			preloadGroupStream(b, c, name, b.N)
			gs, err := c.Group(name, "bench").Subscribe(ctx, client.WithWindow(window), client.WithMaxPerPush(window/2))
			if err != nil {
				b.Fatal(err)
			}
			defer gs.Close()
			var acks sync.WaitGroup
			errs := make(chan error, 1)
			b.ReportAllocs()
			b.SetBytes(128)
			b.ResetTimer()
			start := time.Now()
			for got := 0; got < b.N; {
				d, err := gs.Next(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got += len(d.Records)
				acks.Add(1)
				go func() {
					defer acks.Done()
					if err := gs.Ack(ctx, d); err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				}()
			}
			acks.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
		})
	}
}

// BenchmarkGroupPull measures records consumed by polling (up to 100 per
// poll) and acking each record with its own request (up to 64 acks in
// flight). One op is one record consumed and acked.
//
//	go test -run '^$' -bench BenchmarkGroupPull -benchtime 50000x ./supervisors/
func BenchmarkGroupPull(b *testing.B) {
	n := testNode(b, b.TempDir())
	c := dialClient(b, n)
	ctx := context.Background()
	name := client.StreamName{Tenant: "bench", Namespace: "bench", Stream: fmt.Sprintf("pull-%d", b.N)}
	if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		b.Fatal(err)
	}
	preloadGroupStream(b, c, name, b.N)
	sem := make(chan struct{}, 64)
	var acks sync.WaitGroup
	errs := make(chan error, 1)
	b.ReportAllocs()
	b.SetBytes(128)
	b.ResetTimer()
	start := time.Now()
	for got := 0; got < b.N; {
		recs, err := c.Group(name, "bench").Poll(ctx, 0, 100, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		got += len(recs)
		for _, r := range recs {
			sem <- struct{}{}
			acks.Add(1)
			go func(off uint64) {
				defer func() { <-sem; acks.Done() }()
				if _, err := c.Group(name, "bench").AckOffsets(ctx, 0, off); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}(r.Offset)
		}
	}
	acks.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
}
