package actors

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/storage"
)

// Reading a shard this node holds no replica of. A group's coordinator
// runs on the leader of its stream's shard 0, which need not hold every
// other shard (a stream of three replicas on four nodes or more): it reads
// those shards' records from a replica, with the fetch a replica installing
// a snapshot uses (peerwire ShardFetch / ShardPage), and the shard's stub
// here learns its tail the same way while someone watches it
// (shard_remote.go).

// fetchWaiters are the pages goroutines wait for, by token. Tokens have
// the top bit set, so they never collide with a snapshot install's (whose
// pages go to the installing shard).
type fetchWaiters struct {
	next atomic.Uint64
	mu   sync.Mutex
	m    map[uint64]chan *peerwire.ShardPage
}

const fetchTokenBit = 1 << 63

func (w *fetchWaiters) add() (uint64, chan *peerwire.ShardPage) {
	tok := w.next.Add(1) | fetchTokenBit
	ch := make(chan *peerwire.ShardPage, 1)
	w.mu.Lock()
	if w.m == nil {
		w.m = map[uint64]chan *peerwire.ShardPage{}
	}
	w.m[tok] = ch
	w.mu.Unlock()
	return tok, ch
}

func (w *fetchWaiters) remove(tok uint64) {
	w.mu.Lock()
	delete(w.m, tok)
	w.mu.Unlock()
}

// deliver hands p to its waiter, reporting whether it was a Fetch's.
func (w *fetchWaiters) deliver(p *peerwire.ShardPage) bool {
	if p.Token&fetchTokenBit == 0 {
		return false
	}
	w.mu.Lock()
	ch := w.m[p.Token]
	delete(w.m, p.Token)
	w.mu.Unlock()
	if ch != nil {
		ch <- p
	}
	return true
}

// errNoLink is a fetch from a node this one has no link to.
var errNoLink = errors.New("no link to the node")

// Fetch asks node to for a page of shard's log, [from, to) and at most
// maxBytes of records (the server clamps it to between 64 KiB and 4 MiB),
// and waits for it until ctx ends. It blocks: goroutines call it, never an
// actor. A page may be lost like any peer message: ctx bounds the wait.
func (r *RaftRouter) Fetch(ctx context.Context, to uint64, shard storage.ShardKey, from, until uint64, maxBytes int) (*peerwire.ShardPage, error) {
	link := r.Link(to)
	if link == nil {
		return nil, fmt.Errorf("fetching shard %d of stream %d from node %d: %w", shard.Shard, shard.Stream, to, errNoLink)
	}
	tok, ch := r.fetches.add()
	defer r.fetches.remove(tok)
	r.root.Send(link, &PeerSendFrame{Frame: peerwire.AppendShardFetch(nil, peerwire.ShardFetch{
		Group: peerwire.Group{Stream: shard.Stream, Shard: shard.Shard}, Token: tok,
		From: from, To: until, MaxBytes: uint32(min(maxBytes, math.MaxUint32))})})
	select {
	case p := <-ch:
		return p, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("fetching shard %d of stream %d from node %d: %w", shard.Shard, shard.Stream, to, ctx.Err())
	}
}

// remoteFetchTimeout is how long a remote read waits for one replica
// before it asks the next.
const remoteFetchTimeout = time.Second

// RemoteShards reads the shards a node holds no replica of from their
// replicas (Fetch): the batches of Read, from the first replica that
// answers with what is asked. It is the group coordinators' reader of
// such shards.
type RemoteShards struct {
	Router *RaftRouter
}

// errRemoteUnavailable is a remote read that no replica answered with what
// it asked within its time: the shard's replicas are down, electing, or
// behind; the read is tried again later.
var errRemoteUnavailable = errors.New("no replica of the shard served the read")

// Read returns batches of shard from the batch holding from on, at most
// maxBytes of records (at least one batch when there is one), as
// storage.Log's Read does, read from one of replicas. A replica behind
// from (a lagging follower: its log ends before it) is passed over; while
// none serves it (a replica down, the others behind until the next leader
// tells them the commit), it asks them all again after a pause, until ctx
// ends, and then fails with an error that is errRemoteUnavailable: the
// caller reads only offsets it knows were committed, and tries later.
func (rs *RemoteShards) Read(ctx context.Context, replicas []uint64, shard storage.ShardKey, from uint64, maxBytes int) ([]storage.Batch, error) {
	var last error
	pause := 20 * time.Millisecond
	for {
		for _, to := range replicas {
			if to == rs.Router.Self {
				continue
			}
			fctx, cancel := context.WithTimeout(ctx, remoteFetchTimeout)
			p, err := rs.Router.Fetch(fctx, to, shard, from, math.MaxUint64, maxBytes)
			cancel()
			if err != nil {
				last = err
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%w: %w", errRemoteUnavailable, last)
				}
				continue
			}
			if len(p.Batches) == 0 {
				// The coordinator reads offsets it knows were committed: a
				// replica without them is behind (an empty answer would read as
				// records deleted by retention).
				last = fmt.Errorf("node %d holds no batch of shard %d at offset %d yet (its tail is %d)", to, shard.Shard, from, p.Tail)
				continue
			}
			out := make([]storage.Batch, len(p.Batches))
			for i, b := range p.Batches {
				out[i] = storage.Batch{Base: b.Base, Count: b.Count, Timestamp: b.Timestamp, Records: b.Records}
			}
			return out, nil
		}
		if last == nil {
			last = fmt.Errorf("shard %d of stream %d has no other replica to read from", shard.Shard, shard.Stream)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", errRemoteUnavailable, last)
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}
