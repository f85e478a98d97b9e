package actors

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/storage"
)

// gatedLog is a MemoryLog whose Commit waits for the test to open a gate,
// so requests queue up behind a commit in progress the way they do behind a
// disk sync.
type gatedLog struct {
	*storage.MemoryLog
	entered chan struct{}
	gate    chan struct{}
	mu      sync.Mutex
	sizes   []int
	fail    error
}

func (g *gatedLog) Commit(a []storage.Append, m []storage.MetaPut) error {
	g.entered <- struct{}{}
	<-g.gate
	g.mu.Lock()
	g.sizes = append(g.sizes, len(a))
	fail := g.fail
	g.mu.Unlock()
	if fail != nil {
		return fail
	}
	return g.MemoryLog.Commit(a, m)
}

// probe collects the messages an actor receives.
func probe(sys *actor.ActorSystem, ch chan any) *actor.PID {
	return sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started, *actor.Stopping, *actor.Stopped:
		default:
			ch <- ctx.Message()
		}
	}))
}

func batch(base uint64) storage.Batch {
	return storage.Batch{Base: base, Count: 1, Records: []byte{0, 0, 1, 'x'}}
}

func TestStorageWriterGroupsWhatQueuesDuringACommit(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	log := &gatedLog{MemoryLog: storage.NewMemoryLog(storage.MemoryOptions{}), entered: make(chan struct{}, 10), gate: make(chan struct{})}
	writer := sys.Root.Spawn(NewStorageWriterProps(StorageWriterConfig{Log: log}))
	replies := make(chan any, 100)
	shardA, shardB := probe(sys, replies), probe(sys, replies)
	keyA, keyB := storage.ShardKey{Stream: 1}, storage.ShardKey{Stream: 2}

	// The first append is committed on its own, at once.
	sys.Root.RequestWithCustomSender(writer, &AppendRequest{Shard: keyA, Batch: batch(0)}, shardA)
	<-log.entered
	// While that commit "syncs", 20 batches from two shards queue up.
	for i := range 10 {
		sys.Root.RequestWithCustomSender(writer, &AppendRequest{Shard: keyA, Batch: batch(uint64(1 + i))}, shardA)
		sys.Root.RequestWithCustomSender(writer, &AppendRequest{Shard: keyB, Batch: batch(uint64(i))}, shardB)
	}
	// The sends above are in the writer's mailbox already (Send enqueues
	// synchronously), behind the commit that is held open.
	log.gate <- struct{}{}
	<-log.entered
	log.gate <- struct{}{}

	through := map[uint64]uint64{}
	for len(through) < 2 || through[1] < 11 || through[2] < 10 {
		select {
		case m := <-replies:
			c, ok := m.(*AppendsCommitted)
			if !ok {
				t.Fatalf("unexpected reply %T", m)
			}
			through[c.Shard.Stream] = max(through[c.Shard.Stream], c.Through)
		case <-time.After(10 * time.Second):
			t.Fatalf("replies missing: %v", through)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.sizes) != 2 || log.sizes[0] != 1 || log.sizes[1] != 20 {
		t.Fatalf("commit sizes %v, want [1 20]: one sync must cover every batch that queued", log.sizes)
	}
	if tail, _ := log.Tail(keyA); tail != 11 {
		t.Fatalf("shard A tail %d", tail)
	}
}

func TestStorageWriterFailureIsSticky(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	boom := errors.New("disk on fire")
	log := &gatedLog{MemoryLog: storage.NewMemoryLog(storage.MemoryOptions{}), entered: make(chan struct{}, 10), gate: make(chan struct{}), fail: boom}
	failures := make(chan error, 1)
	writer := sys.Root.Spawn(NewStorageWriterProps(StorageWriterConfig{Log: log, OnFailure: func(err error) { failures <- err }}))
	replies := make(chan any, 10)
	shard := probe(sys, replies)
	key := storage.ShardKey{Stream: 1}
	sys.Root.RequestWithCustomSender(writer, &AppendRequest{Shard: key, Batch: batch(0)}, shard)
	<-log.entered
	log.gate <- struct{}{}
	m := (<-replies).(*AppendFailed)
	if !errors.Is(m.Err, boom) || !errors.Is(m.Err, ErrStorageFailed) {
		t.Fatalf("failure %v", m.Err)
	}
	if err := <-failures; !errors.Is(err, boom) {
		t.Fatalf("OnFailure got %v", err)
	}
	// A later append is refused without touching the log.
	sys.Root.RequestWithCustomSender(writer, &AppendRequest{Shard: key, Batch: batch(0)}, shard)
	m = (<-replies).(*AppendFailed)
	if !errors.Is(m.Err, boom) {
		t.Fatalf("second failure %v", m.Err)
	}
	select {
	case <-log.entered:
		t.Fatal("the writer committed after a failure")
	default:
	}
}
