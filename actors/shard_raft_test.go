package actors

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// A publish entry decodes to what was encoded, with every combination of
// a conditional's expected tail and an idempotent producer's sequence; a
// cut-short or unknown entry is an error, never a batch.
func TestRaftPublishEntryRoundTrip(t *testing.T) {
	for _, p := range []raftPublish{
		{Proposal: 1, Timestamp: 5, Count: 2, Records: []byte("ab")},
		{Proposal: 2, Timestamp: -1, Count: 1, HasExpected: true, Expected: 40, Records: []byte("c")},
		{Proposal: 3, Count: 3, Idempotent: true, ProducerID: 7, Sequence: 9, Records: []byte("def")},
		{Proposal: 4, Count: 1, HasExpected: true, Expected: 1, Idempotent: true, ProducerID: 1 << 60, Sequence: 1, Records: nil},
	} {
		data := appendRaftPublish(nil, p)
		got, err := decodeRaftPublish(data)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if got.Proposal != p.Proposal || got.Timestamp != p.Timestamp || got.Count != p.Count || got.HasExpected != p.HasExpected ||
			got.Expected != p.Expected || got.Idempotent != p.Idempotent || got.ProducerID != p.ProducerID ||
			got.Sequence != p.Sequence || !bytes.Equal(got.Records, p.Records) {
			t.Fatalf("decoded %+v, encoded %+v", got, p)
		}
		// Cut anywhere inside its head, it does not decode.
		head := raftEntryHeadLen
		if p.HasExpected {
			head += 8
		}
		if p.Idempotent {
			head += 16
		}
		for n := range head {
			if _, err := decodeRaftPublish(data[:n]); err == nil {
				t.Fatalf("%+v cut to %d bytes decoded", p, n)
			}
		}
	}
	bad := appendRaftPublish(nil, raftPublish{Proposal: 1, Count: 1})
	bad[21] |= 4
	if _, err := decodeRaftPublish(bad); err == nil {
		t.Fatal("an entry with an unknown flag decoded")
	}
}

// A replicated shard whose recovered log ends before the tail its raft
// replica applied through (recovery cut a corrupt tail off) does not start
// its replica: the next entries would get other offsets than on the other
// replicas. It refuses publishes with storage_failure, saying so.
func TestReplicatedShardRefusesALogBehindItsAppliedIndex(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := actor.NewActorSystem()
		defer sys.Shutdown()
		tailRequests := make(chan *actor.PID, 1)
		writer := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if r, ok := ctx.Message().(*TailRequest); ok {
				if !r.Raft {
					t.Error("a replicated shard's tail request does not ask for its raft state")
				}
				tailRequests <- ctx.Sender()
			}
		}))
		key := storage.ShardKey{Stream: replicatedIDBase + 5}
		shard := sys.Root.Spawn(NewShardProps(ShardConfig{
			Key: key, Durable: true, Writer: writer, Stream: wire.StreamName{Tenant: "t", Namespace: "n", Stream: "s"},
			Log: storage.NewMemoryLog(storage.MemoryOptions{}), RingRecords: 16, RingBytes: 1 << 20,
			Raft: &ShardRaft{Self: 1, Replicas: []uint64{1}, Router: NewRaftRouter(sys.Root, 1, []uint64{1})},
		}))
		recovering := <-tailRequests
		sys.Root.Send(recovering, &TailResponse{Tail: 3, Raft: raftDurable{Applied: 9, AppliedTail: 5, HasAppliedTail: true}})
		replies := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if r, ok := ctx.Message().(*PublishRejected); ok {
				if r.Err.Code != wire.CodeStorageFailure || !strings.Contains(r.Err.Message, "rebuild this replica") {
					t.Errorf("refused with %v", r.Err)
				}
				close(tailRequests)
			} else if _, ok := ctx.Message().(*PublishAcked); ok {
				t.Error("a publish was acknowledged by a replica whose log lost applied batches")
				close(tailRequests)
			}
		}))
		sys.Root.Send(shard, &PublishRequest{ReqID: 1, Ack: wire.AckPerBatch, Count: 1, Records: []byte("x"), ReplyTo: replies})
		synctest.Wait()
		if _, open := <-tailRequests; open {
			t.Fatal("the publish was not answered")
		}
	})
}
