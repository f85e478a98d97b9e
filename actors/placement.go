package actors

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Placement: where the raft replicas of a replicated shard live, and which
// of them is its preferred leader. Both rules are pure functions of their
// arguments (no I/O, no goroutines, no randomness, no map iteration order),
// so every node of the cluster that evaluates them on the same membership
// reaches the same answer without talking to the others.
//
// Replicas are placed by rendezvous (highest random weight) hashing: each
// node gets a weight for the shard from a fixed 64-bit hash of (stream,
// shard, node), and the shard's replicas are the nodes of highest weight.
// A node's weight does not depend on the other nodes, which is what makes the
// placement independent of the order of the node list and moves no replica
// that need not move when a node joins or leaves.
//
// Leaders are spread by a capacitated assignment: every shard that has an up
// replica gets one of them as leader, no node leads more shards than the
// smallest maximum any assignment can reach, and among the assignments that
// reach it the one chosen moves the fewest leaders away from a reference
// (ties broken towards the rendezvous order of each shard's replicas). See
// moveLeaders for the algorithm and the guarantees, and spreadLeaders for
// the stateless form.

// Errors of placeReplicas. They are wrapped with the offending value; test
// them with errors.Is.
var (
	// errPlacementReplicas: the replica count is below 1 or above the
	// number of nodes.
	errPlacementReplicas = errors.New("actors: placement: replica count out of range")
	// errPlacementZeroNode: a node id is 0 (node ids are non-zero).
	errPlacementZeroNode = errors.New("actors: placement: node id 0")
	// errPlacementDuplicateNode: a node id appears twice in the node list.
	errPlacementDuplicateNode = errors.New("actors: placement: duplicate node id")
)

// placeReplicas returns the replicas-many nodes that hold the raft replicas
// of shard shard of stream stream, in decreasing rendezvous weight
// (placementWeight); the first is the shard's preferred leader before
// leaders are balanced (spreadLeaders).
//
// The result is a fresh slice of distinct ids taken from nodes, and depends
// only on the arguments' values: not on the order of nodes, the process or
// the run. Removing a node from nodes changes the result only if that node
// was in it: it is dropped, and the node of next highest weight is appended.
// Adding a node changes it only if the new node outweighs the last replica:
// the new node takes its place by weight and the last one is dropped. The
// relative order of the other replicas never changes.
//
// It fails, wrapping a sentinel, if replicas < 1 or replicas > len(nodes)
// (errPlacementReplicas), or if nodes holds 0 (errPlacementZeroNode) or an
// id twice (errPlacementDuplicateNode). It does not modify nodes.
func placeReplicas(stream uint64, shard uint32, nodes []uint64, replicas int) ([]uint64, error) {
	if replicas < 1 || replicas > len(nodes) {
		return nil, fmt.Errorf("%w: %d replicas of %d nodes", errPlacementReplicas, replicas, len(nodes))
	}
	type weighted struct {
		node, weight uint64
	}
	ws := make([]weighted, len(nodes))
	for i, n := range nodes {
		if n == 0 {
			return nil, fmt.Errorf("%w (at index %d)", errPlacementZeroNode, i)
		}
		ws[i] = weighted{node: n, weight: placementWeight(stream, shard, n)}
	}
	// Decreasing weight; equal weights (a 2^-64 event) by increasing id, so
	// the order is total and independent of the input order.
	slices.SortFunc(ws, func(a, b weighted) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.node, b.node)
	})
	// Duplicates are found by id, wherever their weights put them.
	seen := make(map[uint64]struct{}, len(nodes))
	for _, n := range nodes {
		if _, dup := seen[n]; dup {
			return nil, fmt.Errorf("%w: %d", errPlacementDuplicateNode, n)
		}
		seen[n] = struct{}{}
	}
	out := make([]uint64, replicas)
	for i := range out {
		out[i] = ws[i].node
	}
	return out, nil
}

// placementWeight is node's rendezvous weight for shard shard of stream
// stream. It is part of the cluster's persistent contract: every node must
// compute the same weights, in every version, or replicas move. It is built
// from the splitmix64 finalizer (mix64) with fixed constants only (not
// hash/maphash, which is seeded per process).
func placementWeight(stream uint64, shard uint32, node uint64) uint64 {
	key := mix64(stream + 0x9e3779b97f4a7c15)
	key = mix64(key ^ (uint64(shard) + 0xd1b54a32d192ed03))
	return mix64(key ^ mix64(node^0x8cb92ba72f3d8dd7))
}

// mix64 is the splitmix64 finalizer (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014): a bijection of uint64
// in which every input bit affects every output bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// shardRef names one shard of the cluster: a stream id and the shard's
// index in that stream.
type shardRef struct {
	// Stream is the stream's id.
	Stream uint64
	// Shard is the shard's index within the stream.
	Shard uint32
}

// spreadLeaders returns the preferred leader of every shard of replicas
// (each shard's replica list, in rendezvous order, as placeReplicas returns
// it) when the nodes in up are up. It is stateless: the answer depends only
// on the values of its arguments (not on map or slice order).
//
// Call a node a holder if it appears in some replica list, and let N be the
// number of up holders and S the number of shards (len(replicas)).
// Guarantees:
//
//   - A shard with at least one up replica gets one of its up replicas as
//     leader; a shard with none (an empty list included) is absent from the
//     result. Nodes in up that hold no replica lead nothing.
//   - No node leads more shards than L, the smallest maximum that any
//     assignment of leaders to up replicas can reach (min-max optimal).
//     Every assignment has a maximum of at least ceil(S'/N), S' being the
//     shards with an up replica, so when every holder is up the maximum is
//     at most ceil(S/N) whenever some assignment achieves that. When none
//     does (say every shard's only replica is the same node), the maximum is
//     still the least possible, and there is a set T of shards whose up
//     replicas are all among R nodes with |T| > (L-1)·|R|, which is why
//     L-1 cannot be met (Hall's theorem); the tests check that certificate.
//   - With every holder up the result is the balanced assignment B: among
//     the assignments reaching L, one with the fewest shards not led by
//     the first replica of their list, then the smallest sum of the chosen
//     replicas' positions in their lists.
//   - With some holders down, the result is moveLeaders(replicas, up, B):
//     among the assignments reaching L for that set of up nodes, one that
//     differs from B on the fewest shards. So leadership changes from B
//     only as much as the down nodes force, and when they come back it
//     returns exactly to B. The bound on the number of changes is spelt
//     out on moveLeaders; for one node x going down from all up it reads:
//     at most |D| + (|K|+E)·N' leaders change, where K are the shards x
//     led in B that still have an up replica, D those that have none
//     left, N' the up holders left, and E the number of shards the survivors lead in B
//     beyond the new L (0 unless losing x made L smaller, which only shards
//     held by x alone can do). The same bound holds for x coming back.
//
// It does not modify its arguments. Its cost is that of two moveLeaders
// calls.
func spreadLeaders(replicas map[shardRef][]uint64, up []uint64) map[shardRef]uint64 {
	first := make(map[shardRef]uint64, len(replicas))
	for ref, nodes := range replicas {
		for _, n := range nodes {
			if n != 0 {
				first[ref] = n
				break
			}
		}
	}
	balanced := moveLeaders(replicas, replicaHolders(replicas), first)
	return moveLeaders(replicas, up, balanced)
}

// replicaHolders returns every non-zero node id found in replicas, once
// each, in increasing order.
func replicaHolders(replicas map[shardRef][]uint64) []uint64 {
	var holders []uint64
	for _, nodes := range replicas {
		for _, n := range nodes {
			if n != 0 {
				holders = append(holders, n)
			}
		}
	}
	slices.Sort(holders)
	return slices.Compact(holders)
}

// moveLeaders returns leaders for the shards of replicas when the nodes in
// up are up, moving as few of the leaders in current as the balance bound
// allows. It is the stateful form of spreadLeaders, for a controller that
// knows the leaders in place and wants to disturb them least on a
// membership change; current may name any node for any shard (entries that
// are not an up replica of their shard, or not a shard of replicas, are
// simply not kept).
//
// Replica lists are read as placeReplicas returns them; a 0 in a list is
// ignored and a repeated id counts at its first position. The result:
//
//   - gives every shard that has an up replica one of its up replicas as
//     leader, and no other shard a leader;
//   - has the least possible maximum number of shards led by one node, L
//     (the guarantee spreadLeaders documents);
//   - among the assignments reaching L, differs from current on the fewest
//     shards, and among those has the smallest sum of the leaders'
//     positions in their replica lists (the rendezvous order is preferred);
//   - is a function of the argument values only.
//
// The bound on changes. Let K be the shards that have an up replica but
// whose current leader is not one (it went down, or they had none), D the
// shards that had a leader and have no up replica now, N' the up holders,
// and E the sum over nodes of how many more shards they lead in current,
// counting only the leaders kept valid, than L. Then the result differs
// from current on at most |D| + (|K|+E)·N' shards. Proof: drop the leaders
// of K and E shards from overfull nodes; the rest of current respects L.
// Because an assignment reaching L exists, while a shard is unplaced there
// is an alternating path that places it: the shard moves to an up replica
// v1, if v1 is full one of its shards moves on to v2, and so on to a node
// below L. On a shortest such path the nodes are distinct, so it moves at
// most N' shards. |K|+E paths complete the assignment, having changed at
// most (|K|+E)·N' shards besides D, and the result changes no more than
// that because it changes the fewest. When current is an earlier result
// and one node goes down without L shrinking, E is 0 and the bound is
// k·N' for the k shards the node led; the exact minimum is checked against
// brute force in the tests.
//
// Algorithm: every shard starts at its cheapest up replica, the cost of a
// replica being W if it is not the shard's current leader plus its position
// in the list (W exceeds any sum of positions, so fewer changes always win).
// Phase one finds L: while a node of maximum load M has an alternating path
// (breadth first, over "a shard led by u has an up replica v") to a node of
// load M-2 or less, move the shards along it; when it has none, the nodes
// it reaches all lead at least M-1 shards and the shards they lead have no
// up replica elsewhere, which is the certificate that M-1 is out of reach.
// Phase two starts over (reset) at the cheapest assignment, which has no
// negative cost cycle, and runs successive shortest paths (Bellman-Ford over the up
// holders, an edge u→v weighing the cheapest move of a shard from u to v)
// from each node above L to the cheapest node below it, which keeps the
// assignment of least cost for its loads and ends at the least-cost
// assignment within L. Each path costs O(N'³) plus heap work; there are as
// many paths as shards above L in the cheapest assignment.
//
// It does not modify its arguments.
func moveLeaders(replicas map[shardRef][]uint64, up []uint64, current map[shardRef]uint64) map[shardRef]uint64 {
	s := newLeaderSolver(replicas, up, current)
	limit := s.minMax()
	s.reset()
	s.cheapestWithin(limit)
	return s.leaders()
}

// leaderSolver is the working state of moveLeaders: an assignment of
// leaders to up replicas being improved by alternating paths. Nodes are
// numbered by their index in nodes, shards by their index in shards.
type leaderSolver struct {
	// shards are the shards to assign, in increasing (Stream, Shard)
	// order.
	shards []shardRef
	// nodes are the up holders, in increasing id order.
	nodes []uint64
	// cands[i] are shard i's up replicas, in the order of its list, with
	// the cost of each as leader. A shard with none gets no leader.
	cands [][]leaderCand
	// at[i] is the index in cands[i] of shard i's leader, or -1.
	at []int
	// load[u] is the number of shards node u leads.
	load []int
	// moves[u*len(nodes)+v] holds the possible moves of a shard led by u
	// to its replica v, cheapest first. Entries are left behind when a
	// shard moves and discarded when they reach the top (bestMove).
	moves []leaderMoveHeap
}

// leaderCand is one up replica of a shard, as a candidate leader.
type leaderCand struct {
	// node is the replica's node index.
	node int
	// cost is W if the node is not the shard's current leader, plus the
	// replica's position in the shard's list.
	cost int64
}

// leaderMove is the move of shard from the node it leads on (the heap's u)
// to its replica v (the heap's v); delta is how much the move adds to the
// assignment's cost.
type leaderMove struct {
	// delta is cost(v) - cost(u) for the shard.
	delta int64
	// shard is the shard's index.
	shard int
}

// leaderMoveHeap orders moves by delta, then by shard index (so the choice
// of move is deterministic). It implements heap.Interface.
type leaderMoveHeap []leaderMove

// Len is the number of moves.
func (h leaderMoveHeap) Len() int { return len(h) }

// Less orders by delta, then shard.
func (h leaderMoveHeap) Less(i, j int) bool {
	if h[i].delta != h[j].delta {
		return h[i].delta < h[j].delta
	}
	return h[i].shard < h[j].shard
}

// Swap swaps two moves.
func (h leaderMoveHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

// Push appends x, a leaderMove.
func (h *leaderMoveHeap) Push(x any) { *h = append(*h, x.(leaderMove)) }

// Pop removes the last move.
func (h *leaderMoveHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

// newLeaderSolver builds the solver for moveLeaders, every shard with an
// up replica on its cheapest one (reset).
func newLeaderSolver(replicas map[shardRef][]uint64, up []uint64, current map[shardRef]uint64) *leaderSolver {
	s := &leaderSolver{shards: make([]shardRef, 0, len(replicas))}
	for ref := range replicas {
		s.shards = append(s.shards, ref)
	}
	slices.SortFunc(s.shards, func(a, b shardRef) int {
		if c := cmp.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		return cmp.Compare(a.Shard, b.Shard)
	})

	isUp := make(map[uint64]bool, len(up))
	for _, n := range up {
		if n != 0 {
			isUp[n] = true
		}
	}
	maxLen := 0
	for _, nodes := range replicas {
		for _, n := range nodes {
			if isUp[n] {
				s.nodes = append(s.nodes, n)
			}
		}
		maxLen = max(maxLen, len(nodes))
	}
	slices.Sort(s.nodes)
	s.nodes = slices.Compact(s.nodes)
	index := make(map[uint64]int, len(s.nodes))
	for i, n := range s.nodes {
		index[n] = i
	}

	// w outweighs any sum of list positions.
	w := int64(maxLen)*int64(len(s.shards)) + 1
	n := len(s.nodes)
	s.cands = make([][]leaderCand, len(s.shards))
	s.at = make([]int, len(s.shards))
	s.load = make([]int, n)
	s.moves = make([]leaderMoveHeap, n*n)
	for i, ref := range s.shards {
		keep, hasKeep := current[ref]
		var cs []leaderCand
		for pos, id := range replicas[ref] {
			u, ok := index[id]
			if !ok || slices.ContainsFunc(cs, func(c leaderCand) bool { return c.node == u }) {
				continue
			}
			cost := int64(pos)
			if !hasKeep || id != keep {
				cost += w
			}
			cs = append(cs, leaderCand{node: u, cost: cost})
		}
		s.cands[i] = cs
	}
	s.reset()
	return s
}

// reset puts every shard with an up replica on its cheapest one, and
// forgets every recorded move.
func (s *leaderSolver) reset() {
	clear(s.load)
	for m := range s.moves {
		s.moves[m] = s.moves[m][:0]
	}
	for i, cs := range s.cands {
		s.at[i] = -1
		if len(cs) > 0 {
			cheapest := 0
			for c := range cs {
				if cs[c].cost < cs[cheapest].cost {
					cheapest = c
				}
			}
			s.place(i, cheapest)
		}
	}
}

// place makes candidate c of shard i its leader (the shard must have
// none) and records the moves it can make from there.
func (s *leaderSolver) place(i, c int) {
	s.at[i] = c
	u := s.cands[i][c].node
	s.load[u]++
	for _, other := range s.cands[i] {
		if other.node == u {
			continue
		}
		heap.Push(&s.moves[u*len(s.nodes)+other.node], leaderMove{delta: other.cost - s.cands[i][c].cost, shard: i})
	}
}

// move moves shard i's leadership to node v, one of its up replicas.
func (s *leaderSolver) move(i, v int) {
	s.load[s.cands[i][s.at[i]].node]--
	s.at[i] = -1
	for c, cand := range s.cands[i] {
		if cand.node == v {
			s.place(i, c)
			return
		}
	}
	panic("actors: placement: moved a shard to a node that holds no replica of it")
}

// bestMove returns the cheapest move of a shard led by u to its replica
// v, discarding moves of shards that u no longer leads.
func (s *leaderSolver) bestMove(u, v int) (leaderMove, bool) {
	h := &s.moves[u*len(s.nodes)+v]
	for h.Len() > 0 {
		m := (*h)[0]
		if s.at[m.shard] >= 0 && s.cands[m.shard][s.at[m.shard]].node == u {
			return m, true
		}
		heap.Pop(h)
	}
	return leaderMove{}, false
}

// shift applies an alternating path: path[0] is where it starts and each
// next node receives a shard from the one before it. The shards are
// chosen before any moves, so no shard moves twice.
func (s *leaderSolver) shift(path []int) {
	shards := make([]int, len(path)-1)
	for k := range shards {
		m, ok := s.bestMove(path[k], path[k+1])
		if !ok {
			panic("actors: placement: alternating path over a missing move")
		}
		shards[k] = m.shard
	}
	for k, i := range shards {
		s.move(i, path[k+1])
	}
}

// minMax balances the loads (phase one of moveLeaders) and returns the
// least possible maximum load, 0 if no shard has an up replica.
func (s *leaderSolver) minMax() int {
	n := len(s.nodes)
	if n == 0 {
		return 0
	}
	led := 0
	for _, l := range s.load {
		led += l
	}
	lower := (led + n - 1) / n
	pred := make([]int, n)
	queue := make([]int, 0, n)
	for {
		top := 0
		for u := range n {
			if s.load[u] > s.load[top] {
				top = u
			}
		}
		most := s.load[top]
		if most <= lower {
			return most
		}
		// Breadth first from top to the nearest node of load most-2 or
		// less.
		for v := range pred {
			pred[v] = -1
		}
		pred[top] = top
		queue = append(queue[:0], top)
		target := -1
		for q := 0; q < len(queue) && target < 0; q++ {
			u := queue[q]
			for v := range n {
				if pred[v] >= 0 {
					continue
				}
				if _, ok := s.bestMove(u, v); !ok {
					continue
				}
				pred[v] = u
				if s.load[v] <= most-2 {
					target = v
					break
				}
				queue = append(queue, v)
			}
		}
		if target < 0 {
			return most
		}
		s.shift(pathTo(pred, top, target))
	}
}

// cheapestWithin runs phase two of moveLeaders: successive shortest paths
// from the cheapest assignment until no node leads more than limit shards.
// limit must be reachable (minMax's answer).
func (s *leaderSolver) cheapestWithin(limit int) {
	n := len(s.nodes)
	const inf = math.MaxInt64
	weight := make([]int64, n*n)
	has := make([]bool, n*n)
	dist := make([]int64, n)
	pred := make([]int, n)
	for {
		from := -1
		for u := range n {
			if s.load[u] > limit {
				from = u
				break
			}
		}
		if from < 0 {
			return
		}
		for u := range n {
			for v := range n {
				m, ok := s.bestMove(u, v)
				weight[u*n+v], has[u*n+v] = m.delta, ok
			}
		}
		for v := range n {
			dist[v], pred[v] = inf, -1
		}
		dist[from], pred[from] = 0, from
		// Bellman-Ford: the assignment has no negative cycle, so n-1
		// rounds suffice and the predecessors form a tree.
		for range n - 1 {
			changed := false
			for u := range n {
				if dist[u] == inf {
					continue
				}
				for v := range n {
					if has[u*n+v] && dist[u]+weight[u*n+v] < dist[v] {
						dist[v], pred[v] = dist[u]+weight[u*n+v], u
						changed = true
					}
				}
			}
			if !changed {
				break
			}
		}
		target := -1
		for v := range n {
			if s.load[v] < limit && dist[v] != inf && (target < 0 || dist[v] < dist[target]) {
				target = v
			}
		}
		if target < 0 {
			panic("actors: placement: the load limit cannot be met")
		}
		s.shift(pathTo(pred, from, target))
	}
}

// pathTo returns the path from root to v in a predecessor tree (pred[root]
// is root), root first.
func pathTo(pred []int, root, v int) []int {
	path := []int{v}
	for v != root {
		v = pred[v]
		path = append(path, v)
		if len(path) > len(pred) {
			panic("actors: placement: cycle in a predecessor tree")
		}
	}
	slices.Reverse(path)
	return path
}

// leaders returns the solver's assignment by shard and node id.
func (s *leaderSolver) leaders() map[shardRef]uint64 {
	out := make(map[shardRef]uint64, len(s.shards))
	for i, ref := range s.shards {
		if s.at[i] >= 0 {
			out[ref] = s.nodes[s.cands[i][s.at[i]].node]
		}
	}
	return out
}
