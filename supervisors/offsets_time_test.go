package supervisors

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Offsets for a time, spoken by hand through a real node: the first offset
// committed at or after a time, per shard, from the batch index.

// batchStamps reads a shard's committed batches and returns each batch's
// base and timestamp, as the node stamped them.
func (r *rawConn) batchStamps(name wire.StreamName, shard uint32) (bases []uint64, stamps []int64) {
	r.t.Helper()
	f := r.call(60, wire.AppendRead(nil, 60, wire.Read{Name: name, Shard: shard, End: wire.NoEnd}))
	res, err := wire.DecodeReadResult(f.Body)
	if err != nil {
		r.t.Fatalf("read: %v %s", err, errFrame(f))
	}
	for _, b := range res.Batches {
		bases, stamps = append(bases, b.Base), append(stamps, b.Timestamp)
	}
	return bases, stamps
}

// offsetsAt asks the node for the offsets at a time.
func (r *rawConn) offsetsAt(id uint64, name wire.StreamName, shard uint32, at int64) []wire.ShardOffset {
	r.t.Helper()
	f := r.call(id, wire.AppendOffsetsForTime(nil, id, wire.OffsetsForTime{Name: name, Shard: shard, UnixNano: at}))
	if f.Header.Type != wire.TypeShardOffsets {
		r.t.Fatalf("offsets at %d: %s %s", at, f.Header.Type, errFrame(f))
	}
	offs, err := wire.DecodeShardOffsets(f.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return offs
}

// stampClock is the node's batch clock in a test: it stamps what it is set
// to.
type stampClock struct{ ns atomic.Int64 }

func (c *stampClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

func withStampClock(c *stampClock) func(*Config, *Options) {
	return func(_ *Config, o *Options) { o.Now = c.now }
}

// publishAt publishes one batch of n records to shard at the clock's time t.
func (r *rawConn) publishAt(clk *stampClock, t int64, name wire.StreamName, shard uint32, n int) {
	r.t.Helper()
	clk.ns.Store(t)
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = "r"
	}
	block, count := records(payloads...)
	pub := r.stream()
	defer pub.Close()
	r.write(pub, wire.AppendPublish(nil, 1, wire.Publish{Name: name, Ack: wire.AckPerBatch, Shard: shard, Count: count, Records: block}))
	if f := r.read(pub); f.Header.Type != wire.TypePublishAck {
		r.t.Fatalf("publish: %s %s", f.Header.Type, errFrame(f))
	}
}

// The first batch in offset order stamped at or after the time, per shard
// and for every shard, with a clock that stepped back; the first offset
// for a time before everything, the tail for one after; the same after a
// restart (the index is durable), and on an ephemeral stream.
func TestOffsetsForTime(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	sec := int64(time.Second)
	clk := &stampClock{}
	dir := t.TempDir()
	n := testNode(t, dir, withStampClock(clk))
	c := dialRaw(t, n)
	c.createDurable(jobs, 2)
	// Shard 0: [0,2)@t0 [2,5)@t0+10s [5,6)@t0+10s [6,8)@t0+5s (the clock
	// stepped back) [8,9)@t0+20s. Shard 1: [0,4)@t0+15s.
	c.publishAt(clk, t0, jobs, 0, 2)
	c.publishAt(clk, t0+10*sec, jobs, 0, 3)
	c.publishAt(clk, t0+10*sec, jobs, 0, 1)
	c.publishAt(clk, t0+5*sec, jobs, 0, 2)
	c.publishAt(clk, t0+20*sec, jobs, 0, 1)
	c.publishAt(clk, t0+15*sec, jobs, 1, 4)

	check := func(c *rawConn, when string) {
		t.Helper()
		id := uint64(1000)
		for _, tc := range []struct {
			shard uint32
			at    int64
			want  uint64
		}{
			{0, math.MinInt64, 0}, {0, t0 - 1, 0}, {0, t0, 0},
			{0, t0 + 1, 2},          // the next batch in offset order
			{0, t0 + 5*sec, 2},      // not 6: a batch before it is later
			{0, t0 + 10*sec, 2},     // two batches share the time: the first
			{0, t0 + 10*sec + 1, 8}, // past both, and past the one that stepped back
			{0, t0 + 20*sec, 8},
			{0, t0 + 20*sec + 1, 9}, {0, math.MaxInt64, 9}, // the future: the tail
			{1, t0, 0}, {1, t0 + 15*sec, 0}, {1, t0 + 15*sec + 1, 4},
		} {
			id++
			got := c.offsetsAt(id, jobs, tc.shard, tc.at)
			if len(got) != 1 || got[0] != (wire.ShardOffset{Shard: tc.shard, Offset: tc.want}) {
				t.Fatalf("%s: shard %d at t0%+d: %+v, want offset %d", when, tc.shard, tc.at-t0, got, tc.want)
			}
		}
		// Every shard at once, in shard order.
		for at, want := range map[int64][2]uint64{t0 - 1: {0, 0}, t0 + 12*sec: {8, 0}, t0 + 16*sec: {8, 4}, math.MaxInt64: {9, 4}} {
			id++
			got := c.offsetsAt(id, jobs, wire.AnyShard, at)
			if len(got) != 2 || got[0] != (wire.ShardOffset{Shard: 0, Offset: want[0]}) || got[1] != (wire.ShardOffset{Shard: 1, Offset: want[1]}) {
				t.Fatalf("%s: every shard at t0%+d: %+v, want %v", when, at-t0, got, want)
			}
		}
		wantErrCode(t, c.call(2002, wire.AppendOffsetsForTime(nil, 2002, wire.OffsetsForTime{Name: jobs, Shard: 2})), wire.CodeInvalidShard)
		wantErrCode(t, c.call(2003, wire.AppendOffsetsForTime(nil, 2003, wire.OffsetsForTime{Name: wire.StreamName{Tenant: "acme", Namespace: "shop", Stream: "nope"}})), wire.CodeStreamNotFound)
	}
	check(c, "live")
	// The stamps are what a read reports.
	if bases, stamps := c.batchStamps(jobs, 0); fmt.Sprint(bases) != "[0 2 5 6 8]" || stamps[3] != t0+5*sec {
		t.Fatalf("shard 0 batches %v stamped %v", bases, stamps)
	}

	sCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(sCtx); err != nil {
		t.Fatal(err)
	}
	n = testNode(t, dir, withStampClock(clk))
	c = dialRaw(t, n)
	check(c, "after a restart")

	// An ephemeral stream is answered from its memory log.
	eph := wire.StreamName{Tenant: "acme", Namespace: "shop", Stream: "ticks"}
	if f := c.call(3000, wire.AppendCreateStream(nil, 3000, wire.CreateStream{Name: eph, Config: wire.StreamConfig{Shards: 1}})); f.Header.Type != wire.TypeStreamInfo {
		t.Fatal(errFrame(f))
	}
	c.publishAt(clk, t0, eph, 0, 3)
	c.publishAt(clk, t0+sec, eph, 0, 3)
	for at, want := range map[int64]uint64{t0: 0, t0 + 1: 3, t0 + sec + 1: 6} {
		if got := c.offsetsAt(3001, eph, 0, at); got[0].Offset != want {
			t.Fatalf("ephemeral at t0%+d: %+v, want %d", at-t0, got, want)
		}
	}
}

// Retention moves the answer for a time before the first retained batch
// up to the first retained offset; once every batch has expired, any time
// answers the tail.
func TestOffsetsForTimeAfterRetention(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	clk := &stampClock{}
	n := testNode(t, t.TempDir(), withStampClock(clk))
	c := dialRaw(t, n)
	if f := c.call(1, wire.AppendCreateStream(nil, 1, wire.CreateStream{Name: jobs, Config: wire.StreamConfig{Shards: 1, Durable: true,
		RetentionAgeMillis: uint64(time.Hour.Milliseconds())}})); f.Header.Type != wire.TypeStreamInfo {
		t.Fatal(errFrame(f))
	}
	c.publishAt(clk, t0, jobs, 0, 2)                       // [0,2)
	c.publishAt(clk, t0+int64(30*time.Minute), jobs, 0, 2) // [2,4)
	c.publishAt(clk, t0+int64(50*time.Minute), jobs, 0, 2) // [4,6)
	clk.ns.Store(t0 + int64(95*time.Minute))               // the first two have expired
	if err := n.ApplyRetention(); err != nil {
		t.Fatal(err)
	}
	for at, want := range map[int64]uint64{0: 4, t0: 4, t0 + int64(50*time.Minute): 4, t0 + int64(50*time.Minute) + 1: 6} {
		if got := c.offsetsAt(10, jobs, 0, at); got[0].Offset != want {
			t.Fatalf("after retention, at t0%+d: %+v, want %d", at-t0, got, want)
		}
	}
	clk.ns.Store(t0 + int64(3*time.Hour))
	if err := n.ApplyRetention(); err != nil {
		t.Fatal(err)
	}
	if got := c.offsetsAt(11, jobs, 0, 0); got[0].Offset != 6 {
		t.Fatalf("everything expired: %+v, want the tail 6", got)
	}
}

// OffsetsForTime needs subscribe or consume: a publisher is refused.
func TestOffsetsForTimePermissions(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	admin := dialRawToken(t, n, tokenAcme)
	admin.createDurable(jobs, 1)
	admin.publishN(jobs, 0, 2)
	reader := dialRawToken(t, n, tokenAcmeRead)
	if got := reader.offsetsAt(1, jobs, 0, 0); len(got) != 1 || got[0].Offset != 0 {
		t.Fatalf("reader: %+v", got)
	}
	pub := dialRawToken(t, n, tokenShopPub)
	wantErrCode(t, pub.call(2, wire.AppendOffsetsForTime(nil, 2, wire.OffsetsForTime{Name: jobs})), wire.CodePermissionDenied)
	other := wire.StreamName{Tenant: "globex", Namespace: "shop", Stream: "jobs"}
	wantErrCode(t, reader.call(3, wire.AppendOffsetsForTime(nil, 3, wire.OffsetsForTime{Name: other})), wire.CodePermissionDenied)
}
