package actors

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// heldWrite is a MetaWriteRequest the test's storage writer holds until the
// test answers it.
type heldWrite struct {
	req    *MetaWriteRequest
	answer func(err error)
}

// ackHarness is a coordinator of group "g" over one shard of 10 records,
// whose storage writer hands every write to the test (writes) and whose
// answer frames come back decoded (frames).
type ackHarness struct {
	t      *testing.T
	sys    *actor.ActorSystem
	h      *StreamHandle
	coord  *actor.PID
	lane   *actor.PID
	writes chan heldWrite
	frames chan wire.Frame
}

func newAckHarness(t *testing.T) *ackHarness {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	mem := storage.NewMemoryLog(storage.MemoryOptions{})
	h := &StreamHandle{ID: 7, Log: mem, Progress: []*ShardProgress{{}}}
	if err := mem.Commit([]storage.Append{{Shard: h.ShardKey(0), Batch: testBatch(0, 0, 10)}}, nil); err != nil {
		t.Fatal(err)
	}
	a := &ackHarness{t: t, sys: sys, h: h, writes: make(chan heldWrite, 64), frames: make(chan wire.Frame, 64)}
	writer := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*MetaWriteRequest); ok {
			to := ctx.Sender()
			a.writes <- heldWrite{req: m, answer: func(err error) { sys.Root.Send(to, &MetaWriteResponse{Token: m.Token, Err: err}) }}
		}
	}))
	shard := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*ShardInfoRequest); ok {
			ctx.Respond(&ShardInfoResponse{Tail: 10})
		}
	}))
	h.Shards = []*actor.PID{shard}
	a.lane = sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*WriteFrame); ok {
			f, err := wire.ReadFrame(bytes.NewReader(m.Frame), 1<<20)
			if err != nil {
				t.Error(err)
			}
			a.frames <- f
		}
	}))
	a.coord = sys.Root.Spawn(NewGroupCoordinatorProps(GroupCoordinatorConfig{Stream: h, Group: "g", Writer: writer}))
	a.nextWrite().answer(nil) // the barrier of onStarted
	return a
}

func (a *ackHarness) target(id uint64) GroupTarget {
	return GroupTarget{Stream: a.h, Group: "g", ReplyTo: a.lane, ReqID: id}
}

func (a *ackHarness) nextWrite() heldWrite {
	a.t.Helper()
	select {
	case w := <-a.writes:
		return w
	case <-time.After(10 * time.Second):
		a.t.Fatal("no write reached the storage writer")
		return heldWrite{}
	}
}

// noWrite fails if a write reaches the writer now.
func (a *ackHarness) noWrite(why string) {
	a.t.Helper()
	select {
	case w := <-a.writes:
		a.t.Fatalf("a write of %d puts reached the writer %s", len(w.req.Puts), why)
	case <-time.After(50 * time.Millisecond):
	}
}

func (a *ackHarness) nextFrame(id uint64) wire.Frame {
	a.t.Helper()
	select {
	case f := <-a.frames:
		if f.Header.RequestID != id {
			a.t.Fatalf("answer to request %d (%v), want one to %d", f.Header.RequestID, f.Header.Type, id)
		}
		return f
	case <-time.After(10 * time.Second):
		a.t.Fatalf("no answer to request %d", id)
		return wire.Frame{}
	}
}

// noFrame fails if an answer comes now.
func (a *ackHarness) noFrame(why string) {
	a.t.Helper()
	select {
	case f := <-a.frames:
		a.t.Fatalf("an answer to request %d came %s", f.Header.RequestID, why)
	case <-time.After(50 * time.Millisecond):
	}
}

// pollAll claims the shard's 10 records (the writes that follow are answered).
func (a *ackHarness) pollAll() {
	a.t.Helper()
	a.sys.Root.Send(a.coord, &GroupPollRequest{GroupTarget: a.target(1), Shard: 0, Max: 10})
	f := a.nextFrame(1)
	recs, err := wire.DecodeGroupRecords(f.Body)
	if err != nil || len(recs.Records) != 10 {
		a.t.Fatalf("poll: %d records, %v; want 10", len(recs.Records), err)
	}
	// The group's creation and the claims: answer every write until none
	// comes.
	for {
		select {
		case w := <-a.writes:
			w.answer(nil)
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

func (a *ackHarness) outcomes(id uint64) []wire.GroupAckOutcome {
	a.t.Helper()
	f := a.nextFrame(id)
	if f.Header.Type != wire.TypeGroupAcksDone {
		a.t.Fatalf("answer %v, want group_acks_done", f.Header.Type)
	}
	outs, err := wire.DecodeGroupAcksDone(f.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return outs
}

func (a *ackHarness) describe(id uint64) wire.GroupShardInfo {
	a.t.Helper()
	a.sys.Root.Send(a.coord, &GroupDescribeRequest{GroupTarget: a.target(id)})
	info, err := wire.DecodeGroupInfo(a.nextFrame(id).Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return info.Shards[0]
}

// A GroupAcks is settled entry by entry: each entry gets its own count or
// its own error, an entry's error changes nothing of the others, and all
// are answered once, when the one write that holds them is durable.
func TestCoordinatorAcksAnswerEachEntry(t *testing.T) {
	a := newAckHarness(t)
	a.pollAll()
	a.sys.Root.Send(a.coord, &GroupAcksRequest{GroupTarget: a.target(2), Entries: []wire.GroupAckEntry{
		{Shard: 0, Offsets: []uint64{0, 1}},
		{Shard: 0, Offsets: []uint64{3, 99}}, // 99 was never delivered: the entry fails, 3 stays claimed
		{Shard: 5, Offsets: []uint64{2}},     // no such shard
		{Shard: 0, Offsets: []uint64{1, 2}},  // 1 is the first entry's: this one settles 2 only
	}})
	w := a.nextWrite()
	a.noFrame("before the acks' write was durable")
	w.answer(nil)
	outs := a.outcomes(2)
	if len(outs) != 4 {
		t.Fatalf("%d outcomes, want 4", len(outs))
	}
	if outs[0].Err != nil || outs[0].Count != 2 {
		t.Errorf("entry 0: %+v, want 2 settled", outs[0])
	}
	if outs[1].Err == nil || outs[1].Err.Code != wire.CodeNotDelivered {
		t.Errorf("entry 1: %+v, want not_delivered", outs[1])
	}
	if outs[2].Err == nil || outs[2].Err.Code != wire.CodeInvalidShard {
		t.Errorf("entry 2: %+v, want invalid_shard", outs[2])
	}
	if outs[3].Err != nil || outs[3].Count != 1 {
		t.Errorf("entry 3: %+v, want 1 settled", outs[3])
	}
	if s := a.describe(3); s.Committed != 3 || s.Claims != 7 {
		t.Fatalf("after the acks: committed %d with %d claims, want 3 with 7 (offset 3 still claimed)", s.Committed, s.Claims)
	}
}

// A GroupAcks whose write fails answers every entry with the storage
// error and settles nothing: the records stay claimed, and acking them
// again settles them.
func TestCoordinatorAcksFailedWriteSettlesNothing(t *testing.T) {
	a := newAckHarness(t)
	a.pollAll()
	a.sys.Root.Send(a.coord, &GroupAcksRequest{GroupTarget: a.target(2), Entries: []wire.GroupAckEntry{
		{Shard: 0, Offsets: []uint64{0}}, {Shard: 0, Offsets: []uint64{1, 2}}}})
	a.nextWrite().answer(errors.New("disk on fire"))
	for i, o := range a.outcomes(2) {
		if o.Err == nil || o.Err.Code != wire.CodeStorageFailure {
			t.Errorf("entry %d: %+v, want storage_failure", i, o)
		}
	}
	if s := a.describe(3); s.Committed != 0 || s.Claims != 10 {
		t.Fatalf("after the failed write: committed %d with %d claims, want 0 with 10", s.Committed, s.Claims)
	}
	a.sys.Root.Send(a.coord, &GroupAcksRequest{GroupTarget: a.target(4), Entries: []wire.GroupAckEntry{
		{Shard: 0, Offsets: []uint64{0}}, {Shard: 0, Offsets: []uint64{1, 2}}}})
	a.nextWrite().answer(nil)
	if outs := a.outcomes(4); len(outs) != 2 || outs[0].Count != 1 || outs[1].Count != 2 {
		t.Fatalf("acked again: %+v, want 1 and 2 settled", outs)
	}
}

// The coordinator's writes are group-committed: while one is being
// committed, the acks that arrive wait and then go together in one write,
// answered when that write is durable.
func TestCoordinatorGroupCommitsItsWrites(t *testing.T) {
	a := newAckHarness(t)
	a.pollAll()
	a.sys.Root.Send(a.coord, &GroupAckRequest{GroupTarget: a.target(2), Shard: 0, Offsets: []uint64{0}})
	first := a.nextWrite()
	for i := uint64(1); i <= 5; i++ {
		a.sys.Root.Send(a.coord, &GroupAckRequest{GroupTarget: a.target(10 + i), Shard: 0, Offsets: []uint64{i}})
	}
	a.sys.Root.Send(a.coord, &GroupAcksRequest{GroupTarget: a.target(20), Entries: []wire.GroupAckEntry{{Shard: 0, Offsets: []uint64{6, 7}}}})
	a.noWrite("while the first was being committed")
	first.answer(nil)
	if f := a.nextFrame(2); f.Header.Type != wire.TypeGroupDone {
		t.Fatalf("first ack answered %v", f.Header.Type)
	}
	second := a.nextWrite()
	a.noWrite("beside the one holding every ack that waited")
	a.noFrame("before the second write was durable")
	second.answer(nil)
	seen := map[uint64]bool{}
	for range 6 {
		select {
		case f := <-a.frames:
			seen[f.Header.RequestID] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("answers to %v only", seen)
		}
	}
	for _, id := range []uint64{11, 12, 13, 14, 15, 20} {
		if !seen[id] {
			t.Fatalf("no answer to request %d after the second write (answers: %v)", id, seen)
		}
	}
	if s := a.describe(30); s.Committed != 8 || s.Claims != 2 {
		t.Fatalf("committed %d with %d claims, want 8 with 2", s.Committed, s.Claims)
	}
}
