package actors

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// A durable shard asks the storage writer for its tail when it starts; a
// ShardInfoRequest that comes meanwhile (a describe or a range read right
// after a restart) is answered once the tail is known, not with 0.
func TestShardInfoWaitsForTheRecoveredTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := actor.NewActorSystem()
		defer sys.Shutdown()
		// A storage writer that hands the tail request to the test.
		tailRequests := make(chan *actor.PID, 1)
		writer := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if _, ok := ctx.Message().(*TailRequest); ok {
				tailRequests <- ctx.Sender()
			}
		}))
		shard := sys.Root.Spawn(NewShardProps(ShardConfig{
			Key: storage.ShardKey{Stream: 1}, Durable: true, Writer: writer, Stream: wire.StreamName{Tenant: "t", Namespace: "n", Stream: "s"},
			Log: storage.NewMemoryLog(storage.MemoryOptions{}), RingRecords: 16, RingBytes: 1 << 20,
		}))
		recovering := <-tailRequests
		answered := make(chan *ShardInfoResponse, 1)
		go func() {
			res, err := sys.Root.RequestFuture(shard, &ShardInfoRequest{}, time.Minute).Result()
			if err != nil {
				t.Error(err)
			}
			r, _ := res.(*ShardInfoResponse)
			answered <- r
		}()
		synctest.Wait() // the shard has handled the request
		select {
		case r := <-answered:
			t.Fatalf("shard info while the tail is unknown: %+v", r)
		default:
		}
		sys.Root.Send(recovering, &TailResponse{Tail: 7, First: 2})
		if r := <-answered; r == nil || r.Tail != 7 || r.First != 2 {
			t.Fatalf("shard info after recovery: %+v; want tail 7, first 2", r)
		}
		if err := sys.Root.StopFuture(shard).Wait(); err != nil {
			t.Fatal(err)
		}
	})
}
