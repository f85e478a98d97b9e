package supervisors

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// BenchmarkPublish measures acked publish throughput through a real node
// over QUIC on loopback: batches of 64 records × 128 B, acked per batch,
// pipelined from one client. One op is one batch.
//
//	go test -run '^$' -bench BenchmarkPublish -benchtime 5s ./supervisors/
func BenchmarkPublish(b *testing.B) {
	for _, bc := range []struct {
		name    string
		durable bool
	}{{"durable-64x128B", true}, {"ephemeral-64x128B", false}} {
		b.Run(bc.name, func(b *testing.B) {
			n := testNode(b, b.TempDir())
			c := dialClient(b, n)
			ctx := context.Background()
			name := client.StreamName{Tenant: "bench", Namespace: "bench", Stream: bc.name}
			if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: bc.durable}); err != nil {
				b.Fatal(err)
			}
			pipelinePublishes(b, c, name)
		})
	}
}

// pipelinePublishes publishes batches of 64 × 128 B to name, acked per
// batch, keeping up to 256 in flight (the node's publish window), one batch
// per op, and reports records/s.
func pipelinePublishes(b *testing.B, c *client.Client, name client.StreamName) {
	ctx := context.Background()
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = make([]byte, 128)
		_, _ = rand.Read(batch[i])
	}
	inflight := make(chan *client.PublishFuture, 256)
	done := make(chan error, 1)
	go func() {
		for f := range inflight {
			if _, err := f.Wait(ctx); err != nil {
				done <- err
				for range inflight {
				}
				return
			}
		}
		done <- nil
	}()
	b.ReportAllocs()
	b.SetBytes(64 * 128)
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		f, err := c.PublishAsync(ctx, name, batch, client.WithAck(client.AckPerBatch))
		if err != nil {
			b.Fatal(err)
		}
		inflight <- f
	}
	close(inflight)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*64)/time.Since(start).Seconds(), "records/s")
}
