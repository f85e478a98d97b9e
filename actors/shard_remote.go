package actors

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// A shard of a cluster stream that this node holds no replica of is a
// stub: it refuses publishes and subscriptions, naming a replica. A group
// coordinator here still needs its tail (the coordinator runs on the
// leader of the stream's shard 0, which need not hold every shard): while
// someone watches the stub's tail (WatchTail), the stub asks a replica for
// it every remoteTailEvery (a fetch of no records, whose page says where
// the replica's log starts and ends), publishes it, and tells the
// watchers once it passes what they know. The coordinator reads such a
// shard's records from its replicas (RemoteShards), which it finds in the
// shard's progress (ShardProgress.Remote).

// remoteTailEvery is how often a watched stub asks a replica for the tail.
const remoteTailEvery = 100 * time.Millisecond

// remoteTailRead carries what a stub's fetch of the tail learned.
type remoteTailRead struct {
	first, tail uint64
	ok          bool
}

// remoteTailPoll is a stub's timer: time to ask again.
type remoteTailPoll struct{}

// remoteStub reports whether this shard is a cluster stream's stub.
func (s *shard) remoteStub() bool {
	return s.cfg.Raft != nil && !s.cfg.Raft.hosted() && s.cfg.Raft.Router != nil
}

// publishRemote publishes where the shard's replicas are, for readers of
// a stub (nil once a replica runs here).
func (s *shard) publishRemote(replicas []uint64) {
	if p := s.cfg.Progress; p != nil {
		if replicas == nil {
			p.Remote.Store(nil)
			return
		}
		r := slices.Clone(replicas)
		p.Remote.Store(&r)
	}
}

// pollRemoteTail asks a replica for the tail, unless a question is out.
func (s *shard) pollRemoteTail(ctx actor.Context) {
	if s.remotePolling || len(s.watchers) == 0 || !s.remoteStub() {
		return
	}
	target, _ := s.cfg.Raft.target(s.cfg.Key.Shard)
	if len(target) == 0 {
		return
	}
	s.remotePolling = true
	to := target[s.remoteAttempt%len(target)]
	router, key, self, root := s.cfg.Raft.Router, s.cfg.Key, ctx.Self(), ctx.ActorSystem().Root
	if !s.cfg.Raft.Goroutines.Go(func() {
		fctx, cancel := context.WithTimeout(context.Background(), remoteFetchTimeout)
		defer cancel()
		p, err := router.Fetch(fctx, to, key, math.MaxUint64, math.MaxUint64, 0)
		if err != nil {
			root.Send(self, &remoteTailRead{})
			return
		}
		root.Send(self, &remoteTailRead{first: p.First, tail: p.Tail, ok: true})
	}) {
		s.remotePolling = false
	}
}

// onRemoteTailRead takes a tail a replica told, tells the watchers it
// passed, and asks again after remoteTailEvery while some still wait.
func (s *shard) onRemoteTailRead(ctx actor.Context, m *remoteTailRead) {
	s.remotePolling = false
	if !s.remoteStub() || s.core == nil {
		return
	}
	if m.ok {
		if m.tail > s.core.committed {
			s.core.committed, s.core.tail = m.tail, m.tail
		}
		s.core.first = max(s.core.first, min(m.first, s.core.committed))
		s.publishProgress()
		s.notifyWatchers(ctx, false)
	} else {
		s.remoteAttempt++ // that replica did not answer: the next, next time
	}
	if len(s.watchers) > 0 && s.remoteTimer == nil {
		self, root := ctx.Self(), ctx.ActorSystem().Root
		s.remoteTimer = s.raftAfterFunc()(remoteTailEvery, func() { root.Send(self, &remoteTailPoll{}) })
	}
}

// onRemoteTailPoll asks again.
func (s *shard) onRemoteTailPoll(ctx actor.Context) {
	s.remoteTimer = nil
	s.pollRemoteTail(ctx)
}
