package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/heraldmq/herald/net/wire"
)

// Reads and subscriptions over a cluster. A replicated shard is served by
// the replica WithReplica chose: ReplicaNearest (the default) is the first
// of the ClusterClient's addresses that answers and holds a replica of the
// shard (list the closest node first), leader or follower; ReplicaLeader
// is the shard's leader. A node that holds no replica names one in its
// not-leader answer and the request goes there; a follower asked for the
// leader names the leader; a follower behind its leader answers
// ErrReplicaBehind and the request goes to another node.

// replicaPick picks the node that serves shard k's reads and
// subscriptions (skip: the node that just failed them).
func (cc *ClusterClient) replicaPick(ctx context.Context, k clusterShard) func(uint64) (*clusterConn, error) {
	if cc.replica == ReplicaLeader {
		return cc.leaderPick(ctx, k)
	}
	return func(skip uint64) (*clusterConn, error) {
		cc.mu.Lock()
		host := cc.hosts[k]
		cc.mu.Unlock()
		if host != 0 && host != skip {
			if c := cc.Node(ctx, host); c != nil {
				if m := cc.member(host); m != nil {
					return m, nil
				}
			}
		}
		return cc.any(ctx, skip)
	}
}

// observeReplica learns from err, node m's answer to a read or subscribe
// of shard k: the leader a not-leader answer names (ReplicaLeader), or the
// replica it names (ReplicaNearest: the node holds none).
func (cc *ClusterClient) observeReplica(k clusterShard, m *clusterConn, err error) {
	if cc.replica == ReplicaLeader {
		cc.observe(k, m, err)
		return
	}
	var werr *wire.Error
	cc.mu.Lock()
	defer cc.mu.Unlock()
	switch {
	case errors.As(err, &werr) && werr.Code == wire.CodeNotLeader && werr.Detail != 0 && werr.Detail != m.id:
		cc.hosts[k] = werr.Detail
	case err != nil && cc.hosts[k] == m.id:
		delete(cc.hosts, k) // behind, gone, or no longer a replica: look again
	}
}

// ClusterSubscription receives the records of one or more shards of a
// stream from a cluster (ClusterClient.Subscribe). Each shard is
// subscribed at the replica WithReplica chose, and moved to another when
// that one cannot go on: its node is lost or drains, its replica falls
// behind its leader (ErrReplicaBehind), or, with ReplicaLeader, stops
// leading. A moved shard resumes at the offset after the last record it
// delivered, so on a durable stream its records go on with no gap and no
// duplicate. Next returns the shards' records merged, each shard's in
// offset order. Its methods are safe for concurrent use; Close it when
// done.
type ClusterSubscription struct {
	cc     *ClusterClient
	name   StreamName
	shards []uint32
	// items carries each shard's events and errors to Next, in each
	// shard's order; a shard's last item has end set.
	items chan clusterItem
	// ctx ends the shards' goroutines (Close); closed is closed by Close.
	ctx       context.Context
	cancel    context.CancelFunc
	closed    chan struct{}
	closeOnce sync.Once
	// wg waits for the shards' goroutines, which Close stops.
	wg sync.WaitGroup
	// moves counts the shards' resubscriptions at another replica (or
	// the same one, after it refused).
	moves atomic.Int64
	mu    struct {
		sync.Mutex
		// ended counts the shards that ended for good; last is the last
		// error one ended with, which Next returns once every shard ended.
		ended int
		last  error
		// serving is the node serving each shard now (0: none), and
		// starts where each shard's delivery started.
		serving map[uint32]uint64
		starts  map[uint32]uint64
	}
}

// clusterItem is one shard's event, or its error (a gap, which Next
// reports and goes on after, or the error it ended with: end).
type clusterItem struct {
	ev  Event
	err error
	end bool
}

// clusterItemsQueued is how many events the shards may have delivered
// that Next has not taken; past it their goroutines wait (and their
// subscriptions' own bounds push back to the nodes).
const clusterItemsQueued = 256

// Subscribe subscribes to name across the cluster (see Client.Subscribe
// for the options; WithReplica, given to DialCluster, chooses the
// replicas) and returns once every shard's subscription was accepted, or
// one was refused for good (ErrStreamNotFound, ErrInvalidShard, an
// *OffsetOutOfRangeError, ...). A refusal another node may not repeat
// (not the leader, a replica behind, a node lost or draining) is retried
// on another node until ctx ends; ctx bounds only that wait.
func (cc *ClusterClient) Subscribe(ctx context.Context, name StreamName, opts ...SubscribeOption) (*ClusterSubscription, error) {
	if err := name.Validate(); err != nil {
		return nil, err
	}
	o := subscribeOptions{start: wire.StartEarliest}
	for _, opt := range opts {
		opt(&o)
	}
	shards := []uint32{o.shard}
	if !o.oneShard {
		info, err := cc.describeAny(ctx, name)
		switch {
		case err == nil:
			shards = make([]uint32, max(info.Config.Shards, 1))
			for i := range shards {
				shards[i] = uint32(i)
			}
		case errors.Is(err, ErrStreamNotFound):
		default:
			return nil, err
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	cs := &ClusterSubscription{cc: cc, name: name, shards: shards, items: make(chan clusterItem, clusterItemsQueued),
		ctx: sctx, cancel: cancel, closed: make(chan struct{})}
	cs.mu.serving, cs.mu.starts = map[uint32]uint64{}, map[uint32]uint64{}
	started := make(chan error, len(shards))
	for _, n := range shards {
		cs.wg.Add(1)
		go cs.run(n, opts, o, started)
	}
	for range shards {
		var err error
		select {
		case err = <-started:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			_ = cs.Close()
			return nil, err
		}
	}
	return cs, nil
}

// run keeps shard n subscribed until the subscription is closed or the
// shard ends for good. It reports its first subscription's outcome on
// started.
func (cs *ClusterSubscription) run(n uint32, opts []SubscribeOption, o subscribeOptions, started chan<- error) {
	defer cs.wg.Done()
	k := clusterShard{name: cs.name, shard: n}
	pick := cs.cc.replicaPick(cs.ctx, k)
	first := true
	var next uint64 // where the shard resumes once it has started
	end := func(err error) {
		if first {
			started <- err
			return
		}
		cs.deliver(clusterItem{err: err, end: true})
	}
	var skip uint64
	for attempt := 0; ; attempt++ {
		if cs.ctx.Err() != nil {
			if first {
				started <- ErrSubscriptionClosed
			}
			return
		}
		m, err := pick(skip)
		if err != nil {
			if cs.cc.isClosed() {
				end(ErrClosed)
				return
			}
			if cs.pause(err, attempt) != nil {
				end(err)
				return
			}
			continue
		}
		sopts := append(slices.Clip(opts), WithShard(n))
		if !first {
			sopts = []SubscribeOption{WithShard(n), WithStartOffset(next), WithQueueCapacity(o.queue)}
			if o.autoResume {
				sopts = append(sopts, WithAutoResume())
			}
		}
		sub, err := m.c.Subscribe(cs.ctx, cs.name, sopts...)
		cs.cc.observeReplica(k, m, err)
		if err != nil {
			var oor *OffsetOutOfRangeError
			switch {
			case cs.ctx.Err() != nil:
			case !first && errors.As(err, &oor) && oor.Detail > next:
				// Retention deleted what the shard had yet to deliver
				// while it moved: it goes on from the first offset kept,
				// and Next reports the gap.
				if !cs.deliver(clusterItem{err: &GapError{Shard: n, From: next, To: oor.Detail}}) {
					return
				}
				next = oor.Detail
			case !movable(err, m):
				end(err)
				return
			}
			skip = m.id
			if cs.pause(err, attempt) != nil {
				end(err)
				return
			}
			continue
		}
		if first {
			next = sub.StartOffset()
			cs.mu.Lock()
			cs.mu.starts[n] = next
			cs.mu.Unlock()
			first = false
			started <- nil
		} else {
			cs.moves.Add(1)
		}
		cs.setServing(n, m.id)
		err = cs.pump(sub, &next)
		sub.Close()
		cs.setServing(n, 0)
		cs.cc.observeReplica(k, m, err)
		switch {
		case cs.ctx.Err() != nil:
			return
		case !movable(err, m):
			end(err)
			return
		}
		skip, attempt = m.id, 0
		if cs.pause(err, attempt) != nil {
			end(err)
			return
		}
	}
}

// pump delivers sub's events, from *next on, until it fails; it returns
// why.
func (cs *ClusterSubscription) pump(sub *Subscription, next *uint64) error {
	for {
		ev, err := sub.Next(cs.ctx)
		if err != nil {
			return err
		}
		if ev.Offset < *next {
			continue // delivered already: never twice
		}
		*next = ev.Offset + 1
		if !cs.deliver(clusterItem{ev: ev}) {
			return cs.ctx.Err()
		}
	}
}

// movable reports whether err, the end or refusal of a shard's
// subscription at m, is one another replica (or m, later) may not repeat:
// m is not the replica asked for, is behind, drains, or is gone.
func movable(err error, m *clusterConn) bool {
	var werr *wire.Error
	if errors.As(err, &werr) {
		switch werr.Code {
		case wire.CodeNotLeader, wire.CodeReplicaBehind, wire.CodeShuttingDown, wire.CodeSubscriptionAborted:
			return true
		}
		return false
	}
	// The connection to m was lost, or replaced (closing its Client).
	return m.c.usable() != nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrSubscriptionClosed)
}

// pause waits before the next attempt (ClusterClient.pause), unless the
// subscription is closed.
func (cs *ClusterSubscription) pause(err error, attempt int) error {
	if perr := cs.cc.pause(cs.ctx, err, attempt); perr != nil {
		return ErrSubscriptionClosed
	}
	return nil
}

// deliver hands an item to Next; false once the subscription is closed.
func (cs *ClusterSubscription) deliver(it clusterItem) bool {
	select {
	case cs.items <- it:
		return true
	case <-cs.ctx.Done():
		return false
	}
}

func (cs *ClusterSubscription) setServing(n uint32, id uint64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.mu.serving[n] = id
}

// Next returns the next event of any subscribed shard, waiting for one
// until ctx ends. Each shard's events come in offset order, each offset
// at most once, across its moves between replicas.
//
// When a shard ends for good (a refusal no replica would lift, such as
// ErrStreamNotFound, a *LaggedError without WithAutoResume, an
// *OffsetOutOfRangeError), Next returns its error once; the other shards
// go on. Where a shard moved and the new replica no longer had its next
// records (retention deleted them), Next returns a *GapError, once, and
// then the shard's next events. Once every shard has ended, Next returns
// the last error on every call; after Close, ErrSubscriptionClosed.
func (cs *ClusterSubscription) Next(ctx context.Context) (Event, error) {
	cs.mu.Lock()
	if cs.mu.ended == len(cs.shards) {
		err := cs.mu.last
		cs.mu.Unlock()
		return Event{}, err
	}
	cs.mu.Unlock()
	select {
	case <-cs.closed:
		return Event{}, ErrSubscriptionClosed
	default:
	}
	select {
	case it := <-cs.items:
		if it.end {
			cs.mu.Lock()
			cs.mu.ended++
			cs.mu.last = it.err
			cs.mu.Unlock()
		}
		if it.err != nil {
			return Event{}, it.err
		}
		return it.ev, nil
	case <-cs.closed:
		return Event{}, ErrSubscriptionClosed
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Shards returns the subscribed shards, in ascending order.
func (cs *ClusterSubscription) Shards() []uint32 { return slices.Clone(cs.shards) }

// StartOffsets returns, per subscribed shard, the offset its delivery
// started at.
func (cs *ClusterSubscription) StartOffsets() map[uint32]uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make(map[uint32]uint64, len(cs.mu.starts))
	for n, off := range cs.mu.starts {
		out[n] = off
	}
	return out
}

// ServedBy returns the node id of the replica serving each subscribed
// shard now (0 while a shard moves).
func (cs *ClusterSubscription) ServedBy() map[uint32]uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make(map[uint32]uint64, len(cs.shards))
	for _, n := range cs.shards {
		out[n] = cs.mu.serving[n]
	}
	return out
}

// Moves returns how many times a shard was subscribed again at another
// replica (or, after a refusal, at the same one).
func (cs *ClusterSubscription) Moves() int { return int(cs.moves.Load()) }

// Close ends the subscription: it stops every shard's goroutine and
// closes its subscription, waiting for them. Pending and later Next calls
// return ErrSubscriptionClosed. It is idempotent and returns nil.
func (cs *ClusterSubscription) Close() error {
	cs.closeOnce.Do(func() {
		close(cs.closed)
		cs.cancel()
		cs.wg.Wait()
	})
	return nil
}

// isClosed reports whether Close was called on the ClusterClient.
func (cc *ClusterClient) isClosed() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.closed
}
