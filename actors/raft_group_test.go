package actors

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/peerwire"
	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/storage"
)

// raftTestReplica is one node of a three-node test cluster: its peer
// transport, its Badger log and storage writer, and its replica of one
// group.
type raftTestReplica struct {
	node   *testPeerNode
	dir    string
	log    *storage.BadgerLog
	writer *actor.PID
	group  *actor.PID
	mu     sync.Mutex
	// applied is what the replica's applies appended, as "proposal@offset".
	applied []string
}

func (r *raftTestReplica) appliedNow() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied)
}

// startGroup opens r's log, starts its writer and its replica of g from
// what the log holds.
func (r *raftTestReplica) startGroup(t *testing.T, g storage.ShardKey, peers []uint64) {
	t.Helper()
	var err error
	if r.log, err = storage.OpenBadger(storage.DefaultBadgerOptions(r.dir)); err != nil {
		t.Fatal(err)
	}
	r.writer = r.node.sys.Root.Spawn(NewStorageWriterProps(StorageWriterConfig{Log: r.log, Goroutines: r.node.gor}))
	d, err := loadRaftDurable(r.log, g)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.applied = nil // applies start again from the snapshot (none here)
	r.mu.Unlock()
	links := map[uint64]*actor.PID{}
	for _, p := range peers {
		if p != r.node.id {
			links[p] = r.node.linkPID(p)
		}
	}
	r.group = r.node.sys.Root.Spawn(NewRaftGroupProps(RaftGroupConfig{Group: g, Self: r.node.id, Peers: peers, Durable: d,
		Writer: r.writer, Links: links, Tick: 5 * time.Millisecond,
		OnApply: func(a raftApplied) {
			if a.Publish {
				r.mu.Lock()
				r.applied = append(r.applied, fmt.Sprintf("%d@%d", a.Proposal, a.Batch.Base))
				r.mu.Unlock()
			}
		}}))
	group := r.group
	r.node.setRoute(func(_ uint64, msgs []peerwire.Message) {
		for _, m := range msgs {
			if m.Group == (peerwire.Group{Stream: g.Stream, Shard: g.Shard}) {
				r.node.sys.Root.Send(group, &RaftInbound{Data: m.Data})
			}
		}
	})
}

func (r *raftTestReplica) stopGroup() {
	_ = r.node.sys.Root.StopFuture(r.group).Wait()
	_ = r.node.sys.Root.StopFuture(r.writer).Wait()
	_ = r.log.Close()
}

func (r *raftTestReplica) status(t *testing.T) *RaftStatus {
	t.Helper()
	v, err := r.node.sys.Root.RequestFuture(r.group, &RaftStatusRequest{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v.(*RaftStatus)
}

// Three replicas of one group, each on its own node with its own Badger
// database, over real QUIC: a leader is elected, what it accepts is
// applied by every replica at the same offsets, and a replica stopped and
// started again from its database catches up with what was committed
// while it was down.
func TestRaftGroupReplicatesOverQUIC(t *testing.T) {
	peers := []uint64{1, 2, 3}
	g := storage.ShardKey{Stream: 5, Shard: 0}
	reps := map[uint64]*raftTestReplica{}
	addrs := map[uint64]string{}
	for _, id := range peers {
		addrs[id] = freeUDPAddr(t)
	}
	for _, id := range peers {
		tlsConf, err := transport.DevPeerTLS()
		if err != nil {
			t.Fatal(err)
		}
		n := newTestPeerNode(t, id, addrs[id], tlsConf)
		defer n.stop()
		for _, p := range peers {
			if p != id {
				n.link(p, addrs[p])
			}
		}
		reps[id] = &raftTestReplica{node: n, dir: t.TempDir()}
	}
	for _, id := range peers {
		reps[id].startGroup(t, g, peers)
	}
	leader := func() *raftTestReplica {
		t.Helper()
		var l *raftTestReplica
		waitFor(t, "a leader", func() bool {
			for _, r := range reps {
				if r.group != nil && r.status(t).Leader {
					l = r
					return true
				}
			}
			return false
		})
		return l
	}
	// applied reports whether r applied proposal p.
	applied := func(r *raftTestReplica, p uint64) bool {
		return slices.ContainsFunc(r.appliedNow(), func(a string) bool { return strings.HasPrefix(a, fmt.Sprintf("%d@", p)) })
	}
	// propose has each proposal applied by the leader of the moment before
	// the next goes: one accepted by a leader that lost its leadership
	// before it committed (a busy machine can miss a heartbeat) is proposed
	// again, so it may apply twice, never out of order.
	propose := func(from, to uint64) {
		t.Helper()
		for p := from; p < to; {
			l := leader()
			v, err := l.node.sys.Root.RequestFuture(l.group, &RaftPropose{Publish: raftPublish{Proposal: p, Count: 2, Records: []byte("rr")}}, 5*time.Second).Result()
			if err != nil {
				t.Fatal(err)
			}
			if v.(*RaftProposed).Err != nil {
				continue
			}
			deadline := time.Now().Add(2 * time.Second)
			for !applied(l, p) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if applied(l, p) {
				p++
			}
		}
	}
	// check waits until every replica applied the same sequence, holding
	// each proposal below to, at the offsets a publish of two records
	// each gets in that order.
	check := func(to uint64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("proposals 1 to %d applied alike everywhere", to-1), func() bool {
			want := reps[1].appliedNow()
			for _, r := range reps {
				if !slices.Equal(r.appliedNow(), want) {
					return false
				}
				for p := uint64(1); p < to; p++ {
					if !applied(r, p) {
						return false
					}
				}
			}
			return true
		})
		for i, a := range reps[1].appliedNow() {
			if _, off, _ := strings.Cut(a, "@"); off != strconv.Itoa(2*i) {
				t.Fatalf("apply %d is %s: offsets are not assigned in apply order, two records each", i, a)
			}
		}
	}
	propose(1, 51)
	check(51)
	// A follower stops; the other two go on.
	var down *raftTestReplica
	for _, r := range reps {
		if !r.status(t).Leader {
			down = r
			break
		}
	}
	down.stopGroup()
	down.group = nil
	propose(51, 81)
	// Started again from its database, it catches up.
	down.startGroup(t, g, peers)
	check(81)
	for _, r := range reps {
		r.stopGroup()
	}
}
