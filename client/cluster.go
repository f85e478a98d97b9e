package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// ClusterClient is a client of a Herald cluster: it holds a connection to
// each node it can reach (one Client per node, each without reconnecting of
// its own), learns which node leads each shard of a replicated stream from
// the nodes' not-leader answers (which name the leader), and sends each
// publish to its shard's leader. When a node is lost its connection is
// dropped and dialled again on demand; a publish the leader did not answer
// goes to the next leader only through a ClusterProducer, whose re-sends
// the nodes recognise (an unacknowledged plain publish fails with its
// error: it may or may not have been written). A leader it has no address
// for (a node added to the cluster since) it finds by asking the nodes it
// reaches for the cluster's nodes and their advertised client addresses.
//
// Streams without replicas live on one node: the ClusterClient sends their
// publishes to whichever node it reaches first, as a Client would; use
// Node to talk to one node.
type ClusterClient struct {
	// addrs are the nodes' addresses: those given, then those learned
	// (discover), which only grow; read with addrList.
	addrs []string
	opts  []Option
	mu    sync.Mutex
	// discovered is when the nodes were last asked for the cluster's
	// nodes (discover).
	discovered time.Time
	// members are the connections by address (nil: not connected).
	members map[string]*clusterMember
	// leaders caches each shard's leader by node id.
	leaders map[clusterShard]uint64
	// shards caches each stream's shard count and routing.
	shards map[wire.StreamName]StreamConfig
	// hosts caches, per shard, a node known to hold a replica (a node
	// without one named it in its not-leader answer): where a read or a
	// subscription of the nearest replica goes when the first address
	// holds none.
	hosts  map[clusterShard]uint64
	closed bool
	// replica is which replica serves reads and subscriptions
	// (WithReplica).
	replica Replica
}

type clusterMember struct {
	addr string
	c    *Client
	id   uint64
	// failedAt is when the last dial failed (the next waits a little);
	// quietUntil is when a node that stopped answering is dialled again.
	failedAt, quietUntil time.Time
}

// clusterConn is one node's connection as a request took it: a copy, so
// that a request keeps using the Client it started with while another
// drops or replaces the member's.
type clusterConn struct {
	c  *Client
	id uint64
}

type clusterShard struct {
	name  wire.StreamName
	shard uint32
}

const (
	// clusterRedialAfter is how long an address that failed to dial is
	// left alone before it is tried again.
	clusterRedialAfter = 200 * time.Millisecond
	// clusterIdleTimeout is each node connection's idle timeout (unless
	// WithIdleTimeout says otherwise): a node that died is noticed within
	// it, and its shards' leaders looked for elsewhere.
	clusterIdleTimeout = 2 * time.Second
	// clusterAttemptTimeout bounds the first attempt of a ClusterProducer's
	// batch: one not answered by then is sent again (to the leader of the
	// moment), each later attempt given twice as long, up to
	// clusterAttemptTimeoutMax. The node that did not answer is left alone
	// for clusterQuiet, then dialled again.
	clusterAttemptTimeout    = time.Second
	clusterAttemptTimeoutMax = 8 * time.Second
	clusterQuiet             = time.Second
	// clusterDialTimeout is each node's dial timeout (unless
	// WithDialTimeout says otherwise): a dead node costs a lookup no more.
	clusterDialTimeout = time.Second
)

// DialCluster connects to the nodes at addrs (comma-separated
// "host:port"s: every node of the cluster, or as many as the application
// knows). It fails only if no node answers; the others are dialled again
// when needed. opts apply to every node's Client (WithReconnect is ignored:
// the ClusterClient moves to another node instead).
func DialCluster(ctx context.Context, addrs string, opts ...Option) (*ClusterClient, error) {
	list := splitSeeds(addrs, nil)
	if len(list) == 0 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "herald: dial cluster: no address given")
	}
	cc := &ClusterClient{addrs: list, opts: append(append([]Option{WithIdleTimeout(clusterIdleTimeout), WithDialTimeout(clusterDialTimeout)}, opts...), WithoutReconnect()),
		members: map[string]*clusterMember{}, leaders: map[clusterShard]uint64{}, shards: map[wire.StreamName]StreamConfig{},
		hosts: map[clusterShard]uint64{}}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cc.replica = o.replica
	var errs []error
	for _, a := range list {
		if _, err := cc.connect(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(list) {
		return nil, errors.Join(errs...)
	}
	return cc, nil
}

// connect dials addr if it has no live connection.
func (cc *ClusterClient) connect(ctx context.Context, addr string) (*clusterConn, error) {
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		return nil, ErrClosed
	}
	m := cc.members[addr]
	if m != nil && time.Now().Before(m.quietUntil) {
		cc.mu.Unlock()
		return nil, fmt.Errorf("herald: %s: stopped answering; tried again in %s", addr, time.Until(m.quietUntil).Round(time.Millisecond))
	}
	if m != nil && m.c != nil {
		if m.c.usable() == nil {
			cc.mu.Unlock()
			return &clusterConn{c: m.c, id: m.id}, nil
		}
		_ = m.c.Close()
		m.c = nil
	}
	if m != nil && time.Since(m.failedAt) < clusterRedialAfter {
		cc.mu.Unlock()
		return nil, fmt.Errorf("herald: %s: dialled %s ago and failed", addr, time.Since(m.failedAt).Round(time.Millisecond))
	}
	cc.mu.Unlock()
	c, err := Dial(ctx, addr, cc.opts...)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if m = cc.members[addr]; m == nil {
		m = &clusterMember{addr: addr}
		cc.members[addr] = m
	}
	if err != nil {
		m.failedAt = time.Now()
		return nil, err
	}
	if cc.closed {
		_ = c.Close()
		return nil, ErrClosed
	}
	if m.c != nil { // another call connected meanwhile
		_ = c.Close()
		return &clusterConn{c: m.c, id: m.id}, nil
	}
	m.c = c
	m.id, _ = strconv.ParseUint(c.NodeID(), 10, 64)
	return &clusterConn{c: m.c, id: m.id}, nil
}

// Close closes every node's connection.
func (cc *ClusterClient) Close() error {
	cc.mu.Lock()
	cc.closed = true
	var cs []*Client
	for _, m := range cc.members {
		if m.c != nil {
			cs = append(cs, m.c)
			m.c = nil
		}
	}
	cc.mu.Unlock()
	var errs []error
	for _, c := range cs {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Node returns the connection to node id (dialling the addresses not
// connected yet to find it), or nil if no reachable node has that id. A
// node the client was not given (one added to the cluster later) is found
// by asking the connected nodes for the cluster's nodes and the client
// addresses they advertise (at most every clusterDiscoverEvery), then
// dialled with the client's options (its TLS roots must cover it).
func (cc *ClusterClient) Node(ctx context.Context, id uint64) *Client {
	if m := cc.member(id); m != nil {
		return m.c
	}
	for _, a := range cc.addrList() {
		if m, err := cc.connect(ctx, a); err == nil && m.id == id {
			return m.c
		}
	}
	if addr := cc.discover(ctx, id); addr != "" {
		if m, err := cc.connect(ctx, addr); err == nil && m.id == id {
			return m.c
		}
	}
	return nil
}

// clusterDiscoverEvery bounds how often the nodes are asked for the
// cluster's nodes.
const clusterDiscoverEvery = 500 * time.Millisecond

// addrList is a copy of the addresses known.
func (cc *ClusterClient) addrList() []string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return slices.Clone(cc.addrs)
}

// discover asks a connected node for the cluster's nodes, adds the
// addresses it did not know to addrs, and returns node id's ("" if no
// node advertises one, or the nodes were asked too lately).
func (cc *ClusterClient) discover(ctx context.Context, id uint64) string {
	cc.mu.Lock()
	if time.Since(cc.discovered) < clusterDiscoverEvery {
		cc.mu.Unlock()
		return ""
	}
	cc.discovered = time.Now()
	var live []*Client
	for _, m := range cc.members {
		if m.c != nil && m.c.usable() == nil {
			live = append(live, m.c)
		}
	}
	cc.mu.Unlock()
	for _, c := range live {
		if c.session().welcome.Features&wire.FeatureClusterNodes == 0 {
			continue
		}
		nodes, err := c.clusterNodes(ctx)
		if err != nil {
			continue
		}
		found := ""
		cc.mu.Lock()
		for _, n := range nodes {
			if n.Addr != "" && !slices.Contains(cc.addrs, n.Addr) {
				cc.addrs = append(cc.addrs, n.Addr)
			}
			if n.ID == id {
				found = n.Addr
			}
		}
		cc.mu.Unlock()
		return found
	}
	return ""
}

// member is the live connection to node id, if any.
func (cc *ClusterClient) member(id uint64) *clusterConn {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, m := range cc.members {
		if m.id == id && m.c != nil && m.c.usable() == nil && !time.Now().Before(m.quietUntil) {
			return &clusterConn{c: m.c, id: m.id}
		}
	}
	return nil
}

// quiet leaves conn's node alone for clusterQuiet (it did not answer in
// time): requests go to the other nodes meanwhile. Its connection stays
// (other calls may be using it); one that is dead is seen so within the
// idle timeout and dialled again.
func (cc *ClusterClient) quiet(conn *clusterConn) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, m := range cc.members {
		if m.c == conn.c {
			m.quietUntil = time.Now().Add(clusterQuiet)
		}
	}
}

// any returns a live connection, starting after the one named skip (so
// that retries move around the cluster).
func (cc *ClusterClient) any(ctx context.Context, skip uint64) (*clusterConn, error) {
	var errs []error
	for pass := 0; pass < 2; pass++ {
		for _, a := range cc.addrList() {
			m, err := cc.connect(ctx, a)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if pass == 0 && m.id == skip && skip != 0 {
				continue
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("herald: no node of the cluster answers: %w", errors.Join(errs...))
}

// CreateStream creates name on the cluster (see Client.CreateStream). A
// replicated stream's create is retried while the cluster has no metadata
// leader (ErrNotLeader) or did not commit it in time (a create of the same
// config again is answered with the stream).
func (cc *ClusterClient) CreateStream(ctx context.Context, name StreamName, cfg StreamConfig) (StreamInfo, error) {
	return retrying(ctx, cc, cc.anyPick(ctx), func(m *clusterConn) (StreamInfo, error) {
		info, err := m.c.CreateStream(ctx, name, cfg)
		if err == nil {
			cc.learn(info)
		}
		return info, err
	}, cc.retryable)
}

// SetReplicas changes the replica count of the cluster stream name (see
// Client.SetReplicas) through any node, retried while the cluster has no
// metadata leader or did not commit the change in time (asking for the
// count the stream has is answered at once).
func (cc *ClusterClient) SetReplicas(ctx context.Context, name StreamName, replicas int) (StreamInfo, error) {
	return retrying(ctx, cc, cc.anyPick(ctx), func(m *clusterConn) (StreamInfo, error) {
		info, err := m.c.SetReplicas(ctx, name, replicas)
		if err == nil {
			cc.learn(info)
		}
		return info, err
	}, func(err error, m *clusterConn) bool {
		return !errors.Is(err, ErrStreamNotFound) && !errors.Is(err, ErrInvalidConfig) && cc.retryable(err, m)
	})
}

// DescribeStream describes name (see Client.DescribeStream) from any node
// that knows it; for a replicated stream each shard's tail and replication
// are its leader's (so every replica's lag is known), where the leader
// answers.
func (cc *ClusterClient) DescribeStream(ctx context.Context, name StreamName) (StreamInfo, error) {
	info, err := cc.describeAny(ctx, name)
	if err != nil || len(info.Replication) == 0 {
		return info, err
	}
	views := map[uint64]StreamInfo{}
	for i, r := range info.Replication {
		if r.Leader == 0 {
			continue
		}
		v, ok := views[r.Leader]
		if !ok {
			c := cc.Node(ctx, r.Leader)
			if c == nil {
				continue
			}
			if v, err = c.DescribeStream(ctx, name); err != nil {
				continue
			}
			views[r.Leader] = v
		}
		if i < len(v.Replication) && v.Replication[i].Leader == r.Leader && i < len(v.Tails) {
			info.Replication[i], info.Tails[i] = v.Replication[i], v.Tails[i]
		}
	}
	return info, nil
}

// describeAny describes name from any node that knows it.
func (cc *ClusterClient) describeAny(ctx context.Context, name StreamName) (StreamInfo, error) {
	return retrying(ctx, cc, cc.anyPick(ctx), func(m *clusterConn) (StreamInfo, error) {
		info, err := m.c.DescribeStream(ctx, name)
		if err == nil {
			cc.learn(info)
		}
		return info, err
	}, func(err error, m *clusterConn) bool {
		return !errors.Is(err, ErrStreamNotFound) && cc.retryable(err, m)
	})
}

func (cc *ClusterClient) learn(info StreamInfo) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.shards[info.Name] = info.Config
}

// shardOf is the shard a publish with key goes to.
func (cc *ClusterClient) shardOf(ctx context.Context, name StreamName, key []byte) (uint32, StreamConfig, error) {
	cc.mu.Lock()
	cfg, ok := cc.shards[name]
	cc.mu.Unlock()
	if !ok {
		info, err := cc.describeAny(ctx, name)
		switch {
		case errors.Is(err, ErrStreamNotFound):
			// Not known (yet): the publish goes to shard 0, where a node
			// that auto-creates streams creates it (with one shard).
			return 0, StreamConfig{}, nil
		case err != nil:
			return 0, StreamConfig{}, err
		}
		cfg = info.Config
	}
	return wire.ShardFor(key, uint32(max(cfg.Shards, 1)), cfg.Routing), cfg, nil
}

// leaderFor is the connection to the shard's leader as last learned (or
// any node, when not known yet).
func (cc *ClusterClient) leaderFor(ctx context.Context, k clusterShard, skip uint64) (*clusterConn, error) {
	cc.mu.Lock()
	lead := cc.leaders[k]
	cc.mu.Unlock()
	if lead != 0 && lead != skip {
		if c := cc.Node(ctx, lead); c != nil {
			if m := cc.member(lead); m != nil {
				return m, nil
			}
		}
	}
	return cc.any(ctx, skip)
}

// observe learns from err, a node's answer for shard k: a not-leader
// answer names the leader.
func (cc *ClusterClient) observe(k clusterShard, m *clusterConn, err error) {
	var werr *wire.Error
	cc.mu.Lock()
	defer cc.mu.Unlock()
	switch {
	case err == nil:
		cc.leaders[k] = m.id
	case errors.As(err, &werr) && werr.Code == wire.CodeNotLeader:
		if werr.Detail != 0 {
			cc.leaders[k] = werr.Detail
		} else {
			delete(cc.leaders, k)
		}
	case errors.Is(err, ErrInvalidShard) || errors.Is(err, ErrStreamNotFound):
		delete(cc.shards, k.name)
		delete(cc.leaders, k)
	}
}

// forgetLeader forgets that node id leads k (it stopped answering).
func (cc *ClusterClient) forgetLeader(k clusterShard, id uint64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.leaders[k] == id {
		delete(cc.leaders, k)
	}
}

// retryable reports whether a request that failed with err, from m, may be
// sent again (to another node) without risk of applying it twice: it was
// refused, not applied, or m's connection is gone before it was sent.
func (cc *ClusterClient) retryable(err error, m *clusterConn) bool {
	var werr *wire.Error
	if errors.As(err, &werr) {
		switch werr.Code {
		case wire.CodeNotLeader, wire.CodeShuttingDown, wire.CodeReplicationTimeout, wire.CodeStreamNotFound, wire.CodeReplicaBehind:
			return true
		}
		return false
	}
	return m.c.usable() != nil && !errors.Is(err, ErrOutcomeUnknown)
}

// retrying calls call on the node pick chooses and, while again says its
// failure applied nothing, once more on the node pick chooses next (told
// which node failed), after a pause, until ctx ends.
func retrying[T any](ctx context.Context, cc *ClusterClient, pick func(skip uint64) (*clusterConn, error),
	call func(*clusterConn) (T, error), again func(error, *clusterConn) bool) (T, error) {
	var skip uint64
	for attempt := 0; ; attempt++ {
		m, err := pick(skip)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := call(m)
		if err == nil || !again(err, m) {
			return v, err
		}
		skip = m.id
		if perr := cc.pause(ctx, err, attempt); perr != nil {
			var zero T
			return zero, perr
		}
	}
}

// anyPick picks any live node; leaderPick shard k's leader.
func (cc *ClusterClient) anyPick(ctx context.Context) func(uint64) (*clusterConn, error) {
	return func(skip uint64) (*clusterConn, error) { return cc.any(ctx, skip) }
}

func (cc *ClusterClient) leaderPick(ctx context.Context, k clusterShard) func(uint64) (*clusterConn, error) {
	return func(skip uint64) (*clusterConn, error) { return cc.leaderFor(ctx, k, skip) }
}

// refusedNotLeader reports whether err is a node's refusal as not the
// leader (or draining): the request was not applied.
func refusedNotLeader(err error) bool {
	var werr *wire.Error
	return errors.As(err, &werr) && (werr.Code == wire.CodeNotLeader || werr.Code == wire.CodeShuttingDown)
}

// pause waits a little before a retry (longer while there is no leader).
//
// attempt counts the retries of one request so far. A not-leader answer
// naming the leader is followed after 5 ms; one naming none (an election
// is under way) is asked again every 50 ms, since an election ends within
// two election timeouts; a lost node is given 100 ms, doubling to 1 s; any
// other refusal (a node's storage failure, an overload) 20 ms, doubling to
// 2 s. Up to half of each pause is random, so that many clients do not
// retry in step.
func (cc *ClusterClient) pause(ctx context.Context, err error, attempt int) error {
	var werr *wire.Error
	var d time.Duration
	switch {
	case errors.As(err, &werr) && werr.Code == wire.CodeNotLeader && werr.Detail != 0:
		d = 5 * time.Millisecond
	case errors.As(err, &werr) && werr.Code == wire.CodeNotLeader:
		d = 50 * time.Millisecond
	case !errors.As(err, &werr):
		d = min((100*time.Millisecond)<<min(attempt, 8), time.Second)
	default:
		d = min((20*time.Millisecond)<<min(attempt, 8), 2*time.Second)
	}
	d -= time.Duration(rand.Int64N(int64(d/2) + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
	case <-t.C:
		return nil
	}
}

// Publish publishes one payload (see PublishBatch).
func (cc *ClusterClient) Publish(ctx context.Context, name StreamName, payload []byte, opts ...PublishOption) (PublishAck, error) {
	return cc.PublishBatch(ctx, name, [][]byte{payload}, opts...)
}

// PublishBatch publishes payloads as one batch to its shard's leader (see
// Client.PublishBatch), following not-leader answers until ctx ends. A
// publish sent and not answered (the leader was lost, or it answered
// ErrReplicationTimeout) is not sent again: its error says the outcome is
// unknown. Publish through a ClusterProducer to have it re-sent safely.
func (cc *ClusterClient) PublishBatch(ctx context.Context, name StreamName, payloads [][]byte, opts ...PublishOption) (PublishAck, error) {
	o := publishOptionsOf(opts)
	shard, _, err := cc.shardOf(ctx, name, o.key)
	if err != nil {
		return PublishAck{}, err
	}
	k := clusterShard{name: name, shard: shard}
	return retrying(ctx, cc, cc.leaderPick(ctx, k), func(m *clusterConn) (PublishAck, error) {
		ack, err := m.c.PublishBatch(ctx, name, payloads, opts...)
		cc.observe(k, m, err)
		return ack, err
	}, func(err error, m *clusterConn) bool {
		// Refused by a node that does not lead, or never sent (the node
		// was gone before it went out): nothing was written.
		var werr *wire.Error
		return refusedNotLeader(err) || (!errors.As(err, &werr) && m.c.usable() != nil && !errors.Is(err, ErrOutcomeUnknown))
	})
}

// PublishIf publishes payloads as one batch only if its shard's tail is
// expectedOffset (see Client.PublishIf), at the shard's leader, following
// not-leader answers. The condition is checked when the entry applies, on
// every replica alike, so of two racing writers exactly one wins, across a
// failover too. A conditional publish the leader did not answer is not
// sent again (it may have been written): its error says so, and a read of
// the shard tells.
func (cc *ClusterClient) PublishIf(ctx context.Context, name StreamName, payloads [][]byte, expectedOffset uint64, opts ...PublishOption) (ConditionalResult, error) {
	o := publishOptionsOf(opts)
	shard, _, err := cc.shardOf(ctx, name, o.key)
	if err != nil {
		return ConditionalResult{}, err
	}
	k := clusterShard{name: name, shard: shard}
	return retrying(ctx, cc, cc.leaderPick(ctx, k), func(m *clusterConn) (ConditionalResult, error) {
		res, err := m.c.PublishIf(ctx, name, payloads, expectedOffset, opts...)
		cc.observe(k, m, err)
		return res, err
	}, func(err error, _ *clusterConn) bool { return refusedNotLeader(err) })
}

// Read reads a page of shard (see Client.Read) from the replica
// WithReplica chose: by default the first of the client's addresses that
// answers and holds a replica of the shard, leader or follower, or, with
// ReplicaLeader, the shard's leader, following not-leader answers. A
// follower behind its leader refuses (ErrReplicaBehind) and the read goes
// to another node. Every replica serves committed records only, and the
// tail a page reports is linearizable: a read that starts after a publish
// was acknowledged sees it, from any replica.
func (cc *ClusterClient) Read(ctx context.Context, name StreamName, shard uint32, start, end uint64, opts ...ReadOption) (ReadPage, error) {
	k := clusterShard{name: name, shard: shard}
	return retrying(ctx, cc, cc.replicaPick(ctx, k), func(m *clusterConn) (ReadPage, error) {
		page, err := m.c.Read(ctx, name, shard, start, end, opts...)
		cc.observeReplica(k, m, err)
		return page, err
	}, cc.retryable)
}

// ClusterProducer is an idempotent producer over a cluster: each batch
// carries the producer's id and its shard's next sequence, and is sent to
// the shard's leader until one acknowledges it. A re-send after a leader
// was lost, or after ErrReplicationTimeout, is recognised by whichever
// node leads then (deduplication is part of the replicated log), so a
// failover neither loses nor duplicates a batch. One ClusterProducer sends
// one batch at a time; use one per (stream, id) and one id per
// application instance.
type ClusterProducer struct {
	cc   *ClusterClient
	name StreamName
	id   uint64
	mu   sync.Mutex
	seq  map[uint32]uint64
	// resume asks each shard's leader for the producer's next sequence
	// before the first publish to it (known: asked, or set).
	resume bool
	known  map[uint32]bool
}

// NewProducer returns an idempotent producer of name with producer id id.
func (cc *ClusterClient) NewProducer(name StreamName, id uint64) *ClusterProducer {
	return &ClusterProducer{cc: cc, name: name, id: id, seq: map[uint32]uint64{}, known: map[uint32]bool{}}
}

// Resume makes the producer go on from the sequences an earlier run of the
// same id left on each shard: before its first publish to a shard it asks
// the shard's leader for the next sequence (a publish numbered past any
// sequence, which the leader refuses with ErrSequenceGap naming the one it
// expects, writing nothing).
func (p *ClusterProducer) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resume = true
}

// SetSequence sets the last sequence written to shard (a producer that
// restarts continues its sequences; see Producer.SetSequence).
func (p *ClusterProducer) SetSequence(shard uint32, last uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq[shard] = last
	p.known[shard] = true
}

// Publish writes payloads as one batch exactly once, re-sending it to the
// shard's leader (after a not-leader answer, a lost node or
// ErrReplicationTimeout) until it is acknowledged or ctx ends. If ctx ends
// first, the error wraps the last failure and the batch may or may not
// have been written: publish it again with the same producer to find out
// (a duplicate is acknowledged with its first offsets).
func (p *ClusterProducer) Publish(ctx context.Context, payloads [][]byte, opts ...PublishOption) (PublishAck, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := publishOptionsOf(opts)
	shard, _, err := p.cc.shardOf(ctx, p.name, o.key)
	if err != nil {
		return PublishAck{}, err
	}
	if p.resume && !p.known[shard] {
		next, err := p.send(ctx, shard, ^uint64(0), payloads, opts)
		var werr *wire.Error
		if err == nil || !errors.As(err, &werr) || werr.Code != wire.CodeSequenceGap || werr.Detail == 0 {
			return next, fmt.Errorf("herald: producer %d: asking shard %d for its next sequence: %w", p.id, shard, cmp.Or(err, errors.New("the probe was written")))
		}
		p.seq[shard], p.known[shard] = werr.Detail-1, true
	}
	seq := p.seq[shard] + 1
	ack, err := p.send(ctx, shard, seq, payloads, opts)
	if err == nil {
		p.seq[shard], p.known[shard] = seq, true
	}
	return ack, err
}

// send sends one batch numbered seq to shard's leader until a node answers
// with an ack or an error a re-send would get again.
func (p *ClusterProducer) send(ctx context.Context, shard uint32, seq uint64, payloads [][]byte, opts []PublishOption) (PublishAck, error) {
	k := clusterShard{name: p.name, shard: shard}
	var skip uint64
	attempt := clusterAttemptTimeout
	for attempts := 0; ; attempts++ {
		m, err := p.cc.leaderFor(ctx, k, skip)
		if err != nil {
			if ctx.Err() != nil {
				return PublishAck{}, fmt.Errorf("%w (batch of sequence %d may or may not be written)", err, seq)
			}
			if werr := p.cc.pause(ctx, err, attempts); werr != nil {
				return PublishAck{}, werr
			}
			continue
		}
		prod := m.c.NewProducer(p.name, p.id)
		actx, cancel := context.WithTimeout(ctx, attempt)
		ack, err := prod.PublishSequence(actx, seq, payloads, opts...)
		timedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if timedOut {
			// It did not answer in time: leave it alone for a while, ask
			// the others who leads, and give the next attempt longer.
			p.cc.quiet(m)
			p.cc.forgetLeader(k, m.id)
			attempt = min(2*attempt, clusterAttemptTimeoutMax)
		}
		p.cc.observe(k, m, err)
		if err == nil {
			return ack, nil
		}
		if ctx.Err() != nil {
			return PublishAck{}, fmt.Errorf("herald: producer %d sequence %d: %w (it may or may not be written)", p.id, seq, err)
		}
		var werr *wire.Error
		if errors.As(err, &werr) {
			switch werr.Code {
			case wire.CodeNotLeader, wire.CodeShuttingDown, wire.CodeReplicationTimeout, wire.CodeStorageFailure,
				wire.CodeInternal, wire.CodeOverloaded, wire.CodeStreamNotFound:
			default:
				return PublishAck{}, err // refused for what it is: a re-send would be too
			}
		}
		skip = m.id
		if werr := p.cc.pause(ctx, err, attempts); werr != nil {
			return PublishAck{}, werr
		}
	}
}

// clusterNodes asks the node for the cluster's nodes and the client
// addresses they advertise.
func (c *Client) clusterNodes(ctx context.Context) ([]wire.ClusterNode, error) {
	v, err := c.call(ctx, wire.TypeNodeList, readOnly, func(dst []byte, id uint64) []byte {
		return wire.AppendClusterNodes(dst, id)
	})
	if err != nil {
		return nil, err
	}
	return v.([]wire.ClusterNode), nil
}
