package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/heraldmq/herald/client"
)

// runCluster publishes through the cluster --server names, always as an
// idempotent producer (--producer-id, else a random id for this run), one
// batch at a time, each to its shard's leader: a batch whose leader is
// lost before it answers is sent again to the next one, which recognises
// it, so a failover during the run neither loses nor duplicates a record.
// A given --producer-id goes on from the sequences its earlier runs left.
func (cmd *pubCmd) runCluster(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	switch {
	case cmd.conditional:
		return usageErrorf("--if-offset writes at one node's tail: give --server the shard's leader alone")
	case cmd.ack != client.AckPerBatch:
		return usageErrorf("publishing to a cluster (several --server addresses) is idempotent: it takes only --ack batch")
	}
	cc, err := cmd.conn.dialCluster(ctx)
	if err != nil {
		return err
	}
	defer cc.Close()
	id := cmd.producerID
	for id == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = binary.BigEndian.Uint64(b[:]) >> 1
	}
	prod := cc.NewProducer(cmd.name, id)
	if cmd.producerID != 0 {
		prod.Resume()
	}
	opts := cmd.publishOptions()
	out, f, rw, bar := cmd.outputs(stdout)
	defer out.Flush()
	next := cmd.source(stdin)
	var records, bytes int
	start := time.Now()
	for done := false; !done; {
		batch := make([][]byte, 0, cmd.batch)
		size := 0
		for len(batch) < cmd.batch {
			p, ok, err := next()
			if err != nil {
				return fmt.Errorf("read input: %w", err)
			}
			if !ok {
				done = true
				break
			}
			batch = append(batch, p)
			size += len(p)
		}
		if len(batch) == 0 {
			break
		}
		// Each batch gets --timeout to be acknowledged, failovers included.
		pctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		ack, err := prod.Publish(pctx, batch, opts...)
		cancel()
		if err != nil {
			return err
		}
		records += len(batch)
		bytes += size
		if bar != nil {
			bar.add(len(batch), size)
		}
		if cmd.count == 0 {
			if err := printAck(out, rw, ack); err != nil {
				return err
			}
			out.Flush()
		}
	}
	if bar != nil {
		bar.finish()
	}
	if cmd.count > 0 {
		return writePubSummary(out, stdout, f, records, bytes, time.Since(start))
	}
	return nil
}
