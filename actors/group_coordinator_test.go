package actors

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// testBatch is a batch of n records whose payloads say their shard and
// offset ("s1-o50").
func testBatch(shard uint32, base uint64, n int) storage.Batch {
	recs := make([]wire.Record, n)
	for i := range recs {
		recs[i] = wire.Record{Payload: fmt.Appendf(nil, "s%d-o%d", shard, base+uint64(i))}
	}
	return storage.Batch{Base: base, Count: uint32(n), Records: wire.AppendRecords(nil, recs)}
}

// A push read over two shards whose first pick, on shard 0, retention
// deleted: shard 1's picks are read from shard 1, not judged against what
// was read of shard 0 (which settled them undelivered as gone, or handed
// out shard 0's record as shard 1's). Found in review.
func TestReadPicksReadsEachShardAfterAGonePick(t *testing.T) {
	for _, tc := range []struct {
		name string
		// shard0 are shard 0's batches (base, count); retention then keeps
		// those from first on.
		shard0 [][2]int
		first  uint64
	}{
		{"retained batch past the other shard's picks", [][2]int{{0, 10}, {100, 10}}, 100},
		{"retained batch covering the other shard's picks", [][2]int{{0, 10}, {40, 20}}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := storage.NewMemoryLog(storage.MemoryOptions{})
			h := &StreamHandle{ID: 7, Log: log}
			var appends []storage.Append
			for _, b := range tc.shard0 {
				appends = append(appends, storage.Append{Shard: h.ShardKey(0), Batch: testBatch(0, uint64(b[0]), b[1])})
			}
			appends = append(appends, storage.Append{Shard: h.ShardKey(1), Batch: testBatch(1, 0, 60)})
			if err := log.Commit(appends, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := log.DeleteBefore(h.ShardKey(0), tc.first); err != nil {
				t.Fatal(err)
			}
			picks := []pick{{shard: 0, offset: 5}, {shard: 1, offset: 50}, {shard: 1, offset: 51}}
			recs, used, gone, _, err := readPicks(log, h, picks, 1<<20, maxCursorRanges)
			if err != nil {
				t.Fatal(err)
			}
			if used != 3 || len(gone) != 1 || !gone[picks[0]] || len(recs) != 2 {
				t.Fatalf("used %d, gone %v, %d records; want shard 0's pick gone and shard 1's two read", used, gone, len(recs))
			}
			for i, r := range recs {
				var rec wire.Record
				if !wire.NewRecordIter(r.Record).Next(&rec) {
					t.Fatal("empty record")
				}
				if want := fmt.Sprintf("s1-o%d", 50+i); r.Shard != 1 || r.Offset != uint64(50+i) || string(rec.Payload) != want {
					t.Fatalf("record %d: shard %d offset %d payload %q, want shard 1's %q", i, r.Shard, r.Offset, rec.Payload, want)
				}
			}
		})
	}
}

// stallReads blocks every log read until released.
type stallReads struct {
	*storage.MemoryLog
	release chan struct{}
}

func (l *stallReads) Read(k storage.ShardKey, from uint64, n, b int) ([]storage.Batch, error) {
	<-l.release
	return l.MemoryLog.Read(k, from, n, b)
}

// While a read of shard 0 stalls, a second poll of shard 0 whose wait ends
// waits for the read: the coordinator does not arm its timer again and
// again for that past deadline (a busy loop, found in review). Timers fire
// at once here, so a loop would queue a tick before every message.
func TestCoordinatorPollBehindAStalledReadDoesNotSpin(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	mem := storage.NewMemoryLog(storage.MemoryOptions{})
	h := &StreamHandle{ID: 7, Progress: []*ShardProgress{{}}}
	if err := mem.Commit([]storage.Append{{Shard: h.ShardKey(0), Batch: testBatch(0, 0, 10)}}, nil); err != nil {
		t.Fatal(err)
	}
	log := &stallReads{MemoryLog: mem, release: make(chan struct{})}
	h.Log = log
	writer := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*MetaWriteRequest); ok {
			ctx.Respond(&MetaWriteResponse{Token: m.Token})
		}
	}))
	shard := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*ShardInfoRequest); ok {
			ctx.Respond(&ShardInfoResponse{Tail: 10})
		}
	}))
	h.Shards = []*actor.PID{shard}
	frames := make(chan wire.Frame, 64)
	lane := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*WriteFrame); ok {
			f, err := wire.ReadFrame(bytes.NewReader(m.Frame), 1<<20)
			if err != nil {
				t.Error(err)
			}
			frames <- f
		}
	}))
	var zero atomic.Int64
	now := time.Unix(1_800_000_000, 0)
	after := func(d time.Duration, f func()) func() bool {
		if d <= 0 {
			zero.Add(1)
			f()
		}
		return func() bool { return true }
	}
	coord := sys.Root.Spawn(NewGroupCoordinatorProps(GroupCoordinatorConfig{Stream: h, Group: "g", Writer: writer,
		Now: func() time.Time { return now }, AfterFunc: after}))
	t.Cleanup(func() { close(log.release) })
	target := func(id uint64) GroupTarget { return GroupTarget{Stream: h, Group: "g", ReplyTo: lane, ReqID: id} }
	sys.Root.Send(coord, &GroupPollRequest{GroupTarget: target(1), Shard: 0, Max: 1})          // its read stalls
	sys.Root.Send(coord, &GroupPollRequest{GroupTarget: target(2), Shard: 0, Max: 1, Wait: 0}) // waits behind it
	for id := uint64(10); id < 60; id++ {
		sys.Root.Send(coord, &GroupDescribeRequest{GroupTarget: target(id)})
		select {
		case f := <-frames:
			if f.Header.RequestID != id {
				t.Fatalf("answer to request %d while the read stalls, want the describe %d", f.Header.RequestID, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no answer to a describe while the read stalls")
		}
	}
	if n := zero.Load(); n > 1 {
		t.Fatalf("the coordinator armed %d timers due at once while the read stalled (a busy loop)", n)
	}
}

// A coordinator still loading (its writer has not answered yet, as after a
// restart) gets a TailAdvanced its failed instance asked for: it must not
// fail on it (found in review).
func TestCoordinatorIgnoresTailNoticesWhileLoading(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	writer := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {})) // never answers: the coordinator stays loading
	shard := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	h := &StreamHandle{ID: 7, Log: storage.NewMemoryLog(storage.MemoryOptions{}), Shards: []*actor.PID{shard}, Progress: []*ShardProgress{{}}}
	var failures atomic.Int32
	coordPID := make(chan *actor.PID, 1)
	sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); ok {
			coordPID <- ctx.Spawn(NewGroupCoordinatorProps(GroupCoordinatorConfig{Stream: h, Group: "g", Writer: writer}))
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Second, func(reason any) actor.Directive {
		failures.Add(1)
		return actor.RestartDirective
	}))))
	coord := <-coordPID
	sys.Root.Send(coord, &TailAdvanced{Shard: 0, Tail: 5})
	// The poison pill is handled after the notice.
	if err := sys.Root.PoisonFuture(coord).Wait(); err != nil {
		t.Fatal(err)
	}
	if n := failures.Load(); n > 0 {
		t.Fatalf("the loading coordinator failed %d times on a TailAdvanced", n)
	}
}

// countReads counts the log reads and the record bytes they returned.
type countReads struct {
	*storage.MemoryLog
	reads, bytes int
}

func (l *countReads) Read(k storage.ShardKey, from uint64, n, b int) ([]storage.Batch, error) {
	out, err := l.MemoryLog.Read(k, from, n, b)
	l.reads++
	for _, bt := range out {
		l.bytes += len(bt.Records)
	}
	return out, err
}

// Producer batching stores up to 256 KiB in one batch. A poll of a few
// records reads one such batch, not readPicksBatches of them (a poll of
// 100 records read 2 MB and the cache, over its bound, kept none of it:
// group pull spent most of its node CPU copying values), and what it read
// serves the next polls with no read.
func TestReadPicksOfBigBatchesReadsOneAndCachesIt(t *testing.T) {
	log := &countReads{MemoryLog: storage.NewMemoryLog(storage.MemoryOptions{})}
	h := &StreamHandle{ID: 7, Log: log}
	const perBatch = 1500
	// Batches of about 200 KiB: one fits the cache, 8 are over its bound.
	big := make([]storage.Append, 0, 8)
	for i := range 8 {
		recs := make([]wire.Record, perBatch)
		for j := range recs {
			recs[j] = wire.Record{Payload: fmt.Appendf(bytes.Repeat([]byte{'x'}, 120), "o%d", i*perBatch+j)}
		}
		big = append(big, storage.Append{Shard: h.ShardKey(1), Batch: storage.Batch{Base: uint64(i * perBatch), Count: perBatch, Records: wire.AppendRecords(nil, recs)}})
	}
	if err := log.Commit(big, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(big[0].Batch.Records); 8*n <= readCacheMaxBytes || n > readCacheMaxBytes {
		t.Fatalf("batches of %d bytes: the test wants one to fit the cache and 8 not to", n)
	}
	var cache readCache
	poll := func(from uint64) {
		t.Helper()
		picks := make([]pick, 100)
		for i := range picks {
			picks[i] = pick{shard: 1, offset: from + uint64(i)}
		}
		recs, used, _, last, err := readPicks(&cache, h, picks, 1<<24, 0)
		if err == nil {
			cache.at = last.at // as startRead does
		} else {
			recs, used, _, last, err = readPicks(log, h, picks, 1<<24, 0)
			cache.keep(last)
		}
		if err != nil || used != len(picks) || len(recs) != len(picks) {
			t.Fatalf("read from %d: %d records, %d used, %v", from, len(recs), used, err)
		}
		for i, r := range recs {
			var rec wire.Record
			if !wire.NewRecordIter(r.Record).Next(&rec) {
				t.Fatal("empty record")
			}
			if want := fmt.Sprintf("o%d", from+uint64(i)); r.Offset != from+uint64(i) || !bytes.HasSuffix(rec.Payload, []byte(want)) {
				t.Fatalf("record %d of the poll from %d: offset %d payload ...%q, want %s", i, from, r.Offset, rec.Payload[120:], want)
			}
		}
	}
	for from := uint64(0); from < 1000; from += 100 {
		poll(from)
		// The next walk resumes where this one stopped.
		if cache.at.base != 0 || cache.at.off != from+100 {
			t.Fatalf("after the poll from %d the cache's walk stopped at %+v, want offset %d", from, cache.at, from+100)
		}
	}
	if log.reads != 1 || log.bytes != len(big[0].Batch.Records) {
		t.Fatalf("10 polls of 100 records within one batch: %d reads of %d bytes, want 1 of %d", log.reads, log.bytes, len(big[0].Batch.Records))
	}
	// A pick behind the walk (a redelivery) walks the batch from its start.
	poll(50)
	// So does one in another batch, and the walk moves there.
	poll(perBatch + 10)
	if cache.at.base != perBatch || cache.at.off != perBatch+110 {
		t.Fatalf("after a poll in the second batch the walk stopped at %+v", cache.at)
	}
}

// A poll whose picks start in the cached batch and run past it reads only
// the batches after it: the read used to start at the first pick, so it
// read the cached batch (up to 256 KiB) again for its last few records.
func TestReadPicksPastTheCachedBatchReadsOnlyWhatFollows(t *testing.T) {
	log := &countReads{MemoryLog: storage.NewMemoryLog(storage.MemoryOptions{})}
	h := &StreamHandle{ID: 7, Log: log}
	const perBatch = 1000
	var appends []storage.Append
	for i := range 3 {
		appends = append(appends, storage.Append{Shard: h.ShardKey(0), Batch: testBatch(0, uint64(i*perBatch), perBatch)})
	}
	if err := log.Commit(appends, nil); err != nil {
		t.Fatal(err)
	}
	picksFrom := func(from uint64, n int) []pick {
		picks := make([]pick, n)
		for i := range picks {
			picks[i] = pick{shard: 0, offset: from + uint64(i)}
		}
		return picks
	}
	// The first poll reads batch 0 and caches it (one batch per read, as
	// batches of 256 KiB are).
	recs, _, _, last, err := readPicks(cacheThenLog{log: onePerRead{log}}, h, picksFrom(0, 900), 1<<24, 0)
	if err != nil || len(recs) != 900 || log.reads != 1 {
		t.Fatalf("first poll: %d records, %d reads, %v", len(recs), log.reads, err)
	}
	var cache readCache
	cache.keep(last)
	log.reads, log.bytes = 0, 0
	recs, used, _, last, err := readPicks(cacheThenLog{cache: cache, log: onePerRead{log}}, h, picksFrom(900, 200), 1<<24, 0)
	if err != nil || used != 200 || len(recs) != 200 {
		t.Fatalf("poll across the batch boundary: %d records, %d used, %v", len(recs), used, err)
	}
	for i, r := range recs {
		var rec wire.Record
		if !wire.NewRecordIter(r.Record).Next(&rec) || string(rec.Payload) != fmt.Sprintf("s0-o%d", 900+i) {
			t.Fatalf("record %d: offset %d payload %q", i, r.Offset, rec.Payload)
		}
	}
	if want := len(appends[1].Batch.Records); log.reads != 1 || log.bytes != want {
		t.Fatalf("the poll across the boundary read the log %d times, %d bytes; want once, batch 1's %d bytes", log.reads, log.bytes, want)
	}
	if cache.keep(last); cache.batches[0].Base != perBatch || cache.at.off != 1100 {
		t.Fatalf("the cache now holds batches from %d, walk at %+v; want batch 1, offset 1100", cache.batches[0].Base, cache.at)
	}
}

// onePerRead reads one batch at a time.
type onePerRead struct{ r batchReader }

func (o onePerRead) Read(key storage.ShardKey, from uint64, _, maxBytes int) ([]storage.Batch, error) {
	return o.r.Read(key, from, 1, maxBytes)
}
