package actors

import (
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// Tests of the placement rules (placement.go). Replica placement is checked
// against what rendezvous hashing implies: the same answer for any order of
// the nodes, only the replicas of a node that leaves or joins move, and
// every node gets about its share. Leader spreading is checked on random
// clusters after every membership step: each leader is an up replica of its
// shard, the maximum load is proven least possible by a Hall certificate
// (so the ceil(S/N) bound is met whenever it can be), and the number of
// changed leaders stays within the bound moveLeaders proves; on small
// clusters the answer is compared with a brute force over every assignment.
// Counters make sure no check passes vacuously.

// testNodes returns n distinct non-zero node ids: small consecutive ids or
// random 64-bit ones.
func testNodes(rng *rand.Rand, n int) []uint64 {
	small := rng.IntN(2) == 0
	seen := map[uint64]bool{}
	var out []uint64
	for len(out) < n {
		id := rng.Uint64()
		if small {
			id = uint64(len(out) + 1)
		}
		if id == 0 || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, id)
	}
	return out
}

// mustPlace is placeReplicas for arguments known to be valid.
func mustPlace(t *testing.T, stream uint64, shard uint32, nodes []uint64, replicas int) []uint64 {
	t.Helper()
	got, err := placeReplicas(stream, shard, nodes, replicas)
	if err != nil {
		t.Fatalf("placeReplicas(%d, %d, %v, %d): %v", stream, shard, nodes, replicas, err)
	}
	return got
}

// without returns nodes minus x, in order, as a new slice.
func without(nodes []uint64, x uint64) []uint64 {
	return slices.DeleteFunc(slices.Clone(nodes), func(n uint64) bool { return n == x })
}

// TestPlacementErrors checks each invalid argument of placeReplicas
// against its sentinel.
func TestPlacementErrors(t *testing.T) {
	cases := []struct {
		name     string
		nodes    []uint64
		replicas int
		want     error
	}{
		{"zero replicas", []uint64{1, 2, 3}, 0, errPlacementReplicas},
		{"negative replicas", []uint64{1, 2, 3}, -1, errPlacementReplicas},
		{"more replicas than nodes", []uint64{1, 2, 3}, 4, errPlacementReplicas},
		{"no nodes", nil, 1, errPlacementReplicas},
		{"zero node", []uint64{1, 0, 3}, 2, errPlacementZeroNode},
		{"duplicate node", []uint64{1, 2, 1}, 2, errPlacementDuplicateNode},
		{"duplicate node, one replica", []uint64{7, 7}, 1, errPlacementDuplicateNode},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := placeReplicas(1, 0, c.nodes, c.replicas)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if got != nil {
				t.Fatalf("got %v with an error", got)
			}
		})
	}
}

// TestPlacementGolden pins placements, so a change of the weight function
// (which would move replicas across a cluster's upgrade) fails a test.
func TestPlacementGolden(t *testing.T) {
	nodes := []uint64{1, 2, 3, 4, 5, 6, 7}
	cases := []struct {
		stream uint64
		shard  uint32
		want   []uint64
	}{
		{1, 0, []uint64{3, 1, 5}},
		{1, 1, []uint64{2, 6, 5}},
		{42, 7, []uint64{1, 2, 4}},
		{1 << 63, 65535, []uint64{3, 6, 2}},
	}
	for _, c := range cases {
		got := mustPlace(t, c.stream, c.shard, nodes, 3)
		if !slices.Equal(got, c.want) {
			t.Errorf("placeReplicas(%d, %d) = %v, want %v", c.stream, c.shard, got, c.want)
		}
	}
	if w := placementWeight(1, 2, 3); w != 0x87eec3d6f33b63dc {
		t.Errorf("placementWeight(1, 2, 3) = %#x", w)
	}
}

// TestPlacementDeterministicAndOrderFree checks on random node sets that
// placeReplicas returns distinct nodes of the set, the heaviest ones in
// decreasing weight, the same for every order of the set, without touching
// it.
func TestPlacementDeterministicAndOrderFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	checks := 0
	for range 300 {
		nodes := testNodes(rng, 1+rng.IntN(12))
		replicas := 1 + rng.IntN(len(nodes))
		stream, shard := rng.Uint64(), rng.Uint32()
		want := mustPlace(t, stream, shard, nodes, replicas)
		if len(want) != replicas {
			t.Fatalf("%d replicas, want %d", len(want), replicas)
		}
		seen := map[uint64]bool{}
		for _, n := range want {
			if seen[n] || !slices.Contains(nodes, n) {
				t.Fatalf("replicas %v of nodes %v: repeated or foreign node %d", want, nodes, n)
			}
			seen[n] = true
		}
		// Ordered by weight.
		for i := 1; i < len(want); i++ {
			if placementWeight(stream, shard, want[i-1]) < placementWeight(stream, shard, want[i]) {
				t.Fatalf("replicas %v not in decreasing weight", want)
			}
		}
		// The heaviest nodes: no node left out outweighs the last replica.
		last := placementWeight(stream, shard, want[len(want)-1])
		for _, n := range nodes {
			if !seen[n] && placementWeight(stream, shard, n) > last {
				t.Fatalf("node %d outweighs replica %d but was left out", n, want[len(want)-1])
			}
		}
		for range 5 {
			perm := slices.Clone(nodes)
			rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			before := slices.Clone(perm)
			if got := mustPlace(t, stream, shard, perm, replicas); !slices.Equal(got, want) {
				t.Fatalf("nodes %v give %v, nodes %v give %v", nodes, want, perm, got)
			}
			if !slices.Equal(perm, before) {
				t.Fatalf("placeReplicas modified its nodes")
			}
			checks++
		}
	}
	if checks == 0 {
		t.Fatal("no permutation checked")
	}
}

// TestPlacementMinimalDisruption checks that a node leaving or joining
// changes exactly what rendezvous hashing implies, and nothing else.
func TestPlacementMinimalDisruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var shards, removedMoved, addedMoved int
	// The moves rendezvous hashing leads to expect: a node holds a
	// replica of a shard with probability replicas/len(nodes).
	var expectRemoved, expectAdded float64
	for range 200 {
		nodes := testNodes(rng, 2+rng.IntN(10))
		replicas := 1 + rng.IntN(len(nodes)-1) // so that one node may leave
		gone := nodes[rng.IntN(len(nodes))]
		var joiner uint64
		for joiner == 0 || slices.Contains(nodes, joiner) {
			joiner = rng.Uint64()
		}
		stream := rng.Uint64()
		for shard := range uint32(20) {
			shards++
			expectRemoved += float64(replicas) / float64(len(nodes))
			expectAdded += float64(replicas) / float64(len(nodes)+1)
			old := mustPlace(t, stream, shard, nodes, replicas)

			after := mustPlace(t, stream, shard, without(nodes, gone), replicas)
			if !slices.Contains(old, gone) {
				if !slices.Equal(after, old) {
					t.Fatalf("removing %d, not a replica of %v, gave %v", gone, old, after)
				}
			} else {
				removedMoved++
				kept := without(old, gone)
				if !slices.Equal(after[:replicas-1], kept) {
					t.Fatalf("removing %d from %v gave %v: the others moved", gone, old, after)
				}
				// The newcomer is the heaviest node that was not a replica.
				next := mustPlace(t, stream, shard, nodes, replicas+1)[replicas]
				if after[replicas-1] != next {
					t.Fatalf("removing %d from %v brought %d, want %d", gone, old, after[replicas-1], next)
				}
			}

			grown := mustPlace(t, stream, shard, append(slices.Clone(nodes), joiner), replicas)
			if !slices.Contains(grown, joiner) {
				if !slices.Equal(grown, old) {
					t.Fatalf("adding %d, not chosen, changed %v to %v", joiner, old, grown)
				}
			} else {
				addedMoved++
				if !slices.Equal(without(grown, joiner), old[:replicas-1]) {
					t.Fatalf("adding %d changed %v to %v: more than the last replica moved", joiner, old, grown)
				}
			}
		}
	}
	// Over thousands of shards the counts are within a few percent of
	// their expectation; a factor of 1.5 cannot flake, and catches a
	// placement that moves more than it must.
	for _, c := range []struct {
		what     string
		got      int
		expected float64
	}{{"left", removedMoved, expectRemoved}, {"joined", addedMoved, expectAdded}} {
		if g := float64(c.got); g < c.expected/1.5 || g > c.expected*1.5 {
			t.Errorf("a node %s: %d shards moved, about %.0f expected", c.what, c.got, c.expected)
		}
	}
	t.Logf("%d shards: %d moved when a node left (%.0f expected), %d when one joined (%.0f expected)",
		shards, removedMoved, expectRemoved, addedMoved, expectAdded)
}

// TestPlacementUniform checks that over many shards each node holds about
// its share of replicas and of first places. With a fixed seed the result
// is fixed; the bound (±10%, about 10 standard deviations) leaves room for
// any reasonable hash, and catches a biased one.
func TestPlacementUniform(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{3, 5, 7, 9} {
		nodes := testNodes(rng, n)
		const replicas, shards = 3, 30000
		held := map[uint64]int{}
		first := map[uint64]int{}
		for i := range shards {
			got := mustPlace(t, uint64(i/16)+1, uint32(i%16), nodes, replicas)
			first[got[0]]++
			for _, id := range got {
				held[id]++
			}
		}
		wantHeld := float64(shards*replicas) / float64(n)
		wantFirst := float64(shards) / float64(n)
		for _, id := range nodes {
			if h := float64(held[id]); h < 0.9*wantHeld || h > 1.1*wantHeld {
				t.Errorf("%d nodes: node %d holds %v replicas, want about %v", n, id, h, wantHeld)
			}
			if f := float64(first[id]); f < 0.9*wantFirst || f > 1.1*wantFirst {
				t.Errorf("%d nodes: node %d is first for %v shards, want about %v", n, id, f, wantFirst)
			}
		}
	}
}

// testCluster is a random cluster with its shards placed by placeReplicas.
type testCluster struct {
	nodes    []uint64
	replicas map[shardRef][]uint64
}

// randomCluster builds a cluster of 3-9 nodes with 1-maxStreams streams of
// 1-maxShards shards each. Each stream picks a replica count of 1-3; with
// mixed set, streams of one cluster differ in it.
func randomCluster(t *testing.T, rng *rand.Rand, maxStreams, maxShards int) testCluster {
	t.Helper()
	c := testCluster{nodes: testNodes(rng, 3+rng.IntN(7)), replicas: map[shardRef][]uint64{}}
	mixed := rng.IntN(4) == 0
	replicas := 1 + rng.IntN(3)
	for range 1 + rng.IntN(maxStreams) {
		stream := rng.Uint64()
		if mixed {
			replicas = 1 + rng.IntN(3)
		}
		for shard := range uint32(1 + rng.IntN(maxShards)) {
			c.replicas[shardRef{stream, shard}] = mustPlace(t, stream, shard, c.nodes, replicas)
		}
	}
	return c
}

// randomUp returns a random subset of nodes, in random order.
func randomUp(rng *rand.Rand, nodes []uint64) []uint64 {
	var up []uint64
	for _, n := range nodes {
		if rng.IntN(3) > 0 {
			up = append(up, n)
		}
	}
	rng.Shuffle(len(up), func(i, j int) { up[i], up[j] = up[j], up[i] })
	return up
}

// leaderLoads counts the shards each node leads.
func leaderLoads(leaders map[shardRef]uint64) map[uint64]int {
	loads := map[uint64]int{}
	for _, n := range leaders {
		loads[n]++
	}
	return loads
}

// maxLoad is the most shards one node leads.
func maxLoad(leaders map[shardRef]uint64) int {
	most := 0
	for _, l := range leaderLoads(leaders) {
		most = max(most, l)
	}
	return most
}

// upHolders counts the up nodes that hold a replica.
func upHolders(replicas map[shardRef][]uint64, up []uint64) int {
	n := 0
	for _, h := range replicaHolders(replicas) {
		if slices.Contains(up, h) {
			n++
		}
	}
	return n
}

// checkLeaders fails unless leaders gives every shard with an up replica
// one of its up replicas, and no other shard a leader.
func checkLeaders(t *testing.T, replicas map[shardRef][]uint64, up []uint64, leaders map[shardRef]uint64) {
	t.Helper()
	for ref, nodes := range replicas {
		hasUp := slices.ContainsFunc(nodes, func(n uint64) bool { return slices.Contains(up, n) })
		leader, ok := leaders[ref]
		switch {
		case hasUp && !ok:
			t.Fatalf("shard %v (replicas %v, up %v) has no leader", ref, nodes, up)
		case !hasUp && ok:
			t.Fatalf("shard %v (replicas %v, up %v) has leader %d but no up replica", ref, nodes, up, leader)
		case ok && (!slices.Contains(nodes, leader) || !slices.Contains(up, leader)):
			t.Fatalf("shard %v (replicas %v, up %v) led by %d, not an up replica", ref, nodes, up, leader)
		}
	}
	for ref := range leaders {
		if _, ok := replicas[ref]; !ok {
			t.Fatalf("leader for unknown shard %v", ref)
		}
	}
}

// certifyMinMax proves that no assignment of leaders to up replicas has a
// smaller maximum load L than leaders, by the argument moveLeaders relies
// on, reimplemented here. From a node of load L, follow "leads a shard that
// has an up replica on" breadth first. If that reaches a node of load L-2
// or less, moving the shards along the path lowers the start to L-1 and
// raises no node above it; the test applies it to a copy and looks again
// (the assignment then had more than one node of load L). If it reaches no
// such node, the reached nodes R lead shards T whose up replicas are all in
// R, each node of R leads at least L-1, so |T| > (L-1)·|R|, and by Hall's
// theorem no assignment puts T on R with at most L-1 each. If the copy's
// maximum ever drops below L, leaders was not least and the test fails. It
// reports whether a certificate was needed (L > 1).
func certifyMinMax(t *testing.T, replicas map[shardRef][]uint64, up []uint64, leaders map[shardRef]uint64) bool {
	t.Helper()
	most := maxLoad(leaders)
	if most <= 1 {
		return false // 0 or 1 is the least maximum whenever some shard is led
	}
	cur := maps.Clone(leaders)
	type step struct {
		from  uint64
		shard shardRef
	}
	for {
		loads := leaderLoads(cur)
		if maxLoad(cur) < most {
			t.Fatalf("leaders reach a maximum of %d, %d is possible", most, maxLoad(cur))
		}
		led := map[uint64][]shardRef{}
		for ref, n := range cur {
			led[n] = append(led[n], ref)
		}
		var tops []uint64
		for n, l := range loads {
			if l == most {
				tops = append(tops, n)
			}
		}
		slices.Sort(tops)
		var path map[uint64]step
		var end uint64
		for _, start := range tops {
			pred := map[uint64]step{start: {}}
			queue := []uint64{start}
			shards := 0
			for len(queue) > 0 && end == 0 {
				u := queue[0]
				queue = queue[1:]
				shards += len(led[u])
				for _, ref := range led[u] {
					for _, v := range replicas[ref] {
						if _, seen := pred[v]; seen || !slices.Contains(up, v) {
							continue
						}
						pred[v] = step{u, ref}
						queue = append(queue, v)
						if loads[v] <= most-2 {
							end = v
						}
					}
				}
			}
			if end != 0 {
				path = pred
				break
			}
			// Stuck: the certificate.
			if shards <= (most-1)*len(pred) {
				t.Fatalf("no certificate: %d shards on %d nodes with maximum %d", shards, len(pred), most)
			}
			return true
		}
		// Every node of load L has a path: apply the first one found.
		for v := end; ; {
			s := path[v]
			if s.from == 0 {
				break
			}
			cur[s.shard] = v
			v = s.from
		}
	}
}

// changedLeaders counts the shards whose leader differs between a and b
// (gaining or losing one included).
func changedLeaders(a, b map[shardRef]uint64) int {
	n := 0
	for ref, x := range a {
		if y, ok := b[ref]; !ok || x != y {
			n++
		}
	}
	for ref := range b {
		if _, ok := a[ref]; !ok {
			n++
		}
	}
	return n
}

// moveBound is the bound moveLeaders proves on the number of leaders that
// change from current when the up nodes are up and the least maximum load
// is limit: |D| + (|K|+E)·N'.
func moveBound(replicas map[shardRef][]uint64, up []uint64, current map[shardRef]uint64, limit int) int {
	var k, d int
	kept := map[uint64]int{}
	for ref, nodes := range replicas {
		hasUp := slices.ContainsFunc(nodes, func(n uint64) bool { return slices.Contains(up, n) })
		leader, ok := current[ref]
		valid := ok && slices.Contains(nodes, leader) && slices.Contains(up, leader)
		switch {
		case valid:
			kept[leader]++
		case hasUp:
			k++
		case ok:
			d++
		}
	}
	e := 0
	for _, l := range kept {
		e += max(0, l-limit)
	}
	return d + (k+e)*upHolders(replicas, up)
}

// leaderStats counts what the random-cluster test checked.
type leaderStats struct {
	clusters, steps, certified int
	// boundMet and boundImpossible count the all-up steps that meet
	// ceil(S/N) and those where certifyMinMax proved it out of reach;
	// impossibleReplicated counts the latter among clusters whose every
	// shard has two replicas or more.
	boundMet, boundImpossible, impossibleReplicated int
	// changed sums the leaders changed by the steps that had a previous
	// assignment, forced those that had to (their leader went down, or they
	// gained or lost every up replica), allowed the bounds.
	changed, forced, allowed int
}

// checkStep checks one membership step: leaders for up are valid and of
// least maximum load; if all holders are up, the ceil bound is met or
// certified impossible; and the change from prev is within moveBound.
func (st *leaderStats) checkStep(t *testing.T, replicas map[shardRef][]uint64, up []uint64, prev, leaders map[shardRef]uint64) {
	t.Helper()
	st.steps++
	checkLeaders(t, replicas, up, leaders)
	if certifyMinMax(t, replicas, up, leaders) {
		st.certified++
	}
	if n := upHolders(replicas, up); n == len(replicaHolders(replicas)) && n > 0 {
		bound := (len(replicas) + n - 1) / n
		if maxLoad(leaders) <= bound {
			st.boundMet++
		} else {
			st.boundImpossible++ // certifyMinMax proved it cannot be met
			if !slices.ContainsFunc(slices.Collect(maps.Values(replicas)), func(r []uint64) bool { return len(r) < 2 }) {
				st.impossibleReplicated++
			}
		}
	}
	if prev != nil {
		changed := changedLeaders(prev, leaders)
		allowed := moveBound(replicas, up, prev, maxLoad(leaders))
		if changed > allowed {
			t.Fatalf("up %v: %d leaders changed, the bound is %d", up, changed, allowed)
		}
		forced := 0
		for ref := range replicas {
			leader, had := prev[ref]
			_, has := leaders[ref]
			if had != has || (had && !slices.Contains(up, leader)) {
				forced++
			}
		}
		if changed < forced {
			t.Fatalf("up %v: %d leaders changed, %d had to", up, changed, forced)
		}
		st.changed += changed
		st.forced += forced
		st.allowed += allowed
	}
}

// TestLeaderSpreadRandomClusters runs spreadLeaders and moveLeaders through
// node failures and recoveries on random clusters.
func TestLeaderSpreadRandomClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var st leaderStats
	for range 60 {
		c := randomCluster(t, rng, 64, 16)
		st.clusters++
		all := slices.Clone(c.nodes)
		balanced := spreadLeaders(c.replicas, all)
		st.checkStep(t, c.replicas, all, nil, balanced)

		// Each node in turn goes down from all up, and comes back.
		for _, x := range c.nodes {
			up := without(all, x)
			down := spreadLeaders(c.replicas, up)
			st.checkStep(t, c.replicas, up, balanced, down)
			back := spreadLeaders(c.replicas, all)
			if !maps.Equal(back, balanced) {
				t.Fatalf("node %d back: leaders differ from the balanced assignment", x)
			}
			// Coming back undoes exactly the changes of going down, which
			// the step above bounded.
			st.checkStep(t, c.replicas, all, nil, back)
		}

		// From a random set of up nodes, one more goes down and one comes
		// back, the controller keeping what it can (moveLeaders).
		for range 3 {
			up := randomUp(rng, c.nodes)
			cur := spreadLeaders(c.replicas, up)
			st.checkStep(t, c.replicas, up, nil, cur)
			if len(up) > 0 {
				fewer := without(up, up[rng.IntN(len(up))])
				st.checkStep(t, c.replicas, fewer, cur, moveLeaders(c.replicas, fewer, cur))
			}
			if len(up) < len(c.nodes) {
				var out []uint64
				for _, n := range c.nodes {
					if !slices.Contains(up, n) {
						out = append(out, n)
					}
				}
				more := append(slices.Clone(up), out[rng.IntN(len(out))])
				st.checkStep(t, c.replicas, more, cur, moveLeaders(c.replicas, more, cur))
			}
		}
	}
	if st.certified == 0 || st.boundMet == 0 || st.changed == 0 {
		t.Fatalf("vacuous: %+v", st)
	}
	t.Logf("%+v", st)
}

// bruteLeaders returns the least (maximum load, shards not led by their
// anchor, sum of the leaders' positions) over every assignment of leaders
// to up replicas: the order moveLeaders minimizes in.
func bruteLeaders(replicas map[shardRef][]uint64, up []uint64, anchor map[shardRef]uint64) [3]int {
	refs := slices.Collect(maps.Keys(replicas))
	best := [3]int{-1}
	loads := map[uint64]int{}
	var walk func(i, changes, positions int)
	walk = func(i, changes, positions int) {
		if i == len(refs) {
			most := 0
			for _, l := range loads {
				most = max(most, l)
			}
			got := [3]int{most, changes, positions}
			if best[0] < 0 || slices.Compare(got[:], best[:]) < 0 {
				best = got
			}
			return
		}
		ref := refs[i]
		placed := false
		for pos, n := range replicas[ref] {
			if !slices.Contains(up, n) {
				continue
			}
			placed = true
			change := 0
			if a, ok := anchor[ref]; !ok || a != n {
				change = 1
			}
			loads[n]++
			walk(i+1, changes+change, positions+pos)
			loads[n]--
		}
		if !placed {
			walk(i+1, changes, positions)
		}
	}
	walk(0, 0, 0)
	return best
}

// score is an assignment's (maximum load, shards not led by their anchor,
// sum of the leaders' positions).
func score(replicas map[shardRef][]uint64, anchor, leaders map[shardRef]uint64) [3]int {
	got := [3]int{maxLoad(leaders), 0, 0}
	for ref, n := range leaders {
		if a, ok := anchor[ref]; !ok || a != n {
			got[1]++
		}
		got[2] += slices.Index(replicas[ref], n)
	}
	return got
}

// TestLeaderSpreadBruteForce compares spreadLeaders and moveLeaders with
// every possible assignment on small clusters: the maximum load is the
// least, the number of changed leaders the least for it, and the rendezvous
// order is preferred among those.
func TestLeaderSpreadBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	compared := 0
	for range 400 {
		c := testCluster{nodes: testNodes(rng, 2+rng.IntN(3)), replicas: map[shardRef][]uint64{}}
		for shard := range uint32(1 + rng.IntN(8)) {
			r := 1 + rng.IntN(min(3, len(c.nodes)))
			c.replicas[shardRef{1, shard}] = mustPlace(t, 1, shard, c.nodes, r)
		}
		first := map[shardRef]uint64{}
		for ref, nodes := range c.replicas {
			first[ref] = nodes[0]
		}
		balanced := spreadLeaders(c.replicas, c.nodes)
		if got, want := score(c.replicas, first, balanced), bruteLeaders(c.replicas, c.nodes, first); got != want {
			t.Fatalf("all up %v, replicas %v: spreadLeaders scores %v, the best is %v", c.nodes, c.replicas, got, want)
		}
		up := randomUp(rng, c.nodes)
		spread := spreadLeaders(c.replicas, up)
		checkLeaders(t, c.replicas, up, spread)
		if got, want := score(c.replicas, balanced, spread), bruteLeaders(c.replicas, up, balanced); got != want {
			t.Fatalf("up %v, replicas %v: spreadLeaders scores %v, the best is %v", up, c.replicas, got, want)
		}
		// A current assignment that is arbitrary, even invalid.
		current := map[shardRef]uint64{}
		for ref := range c.replicas {
			if rng.IntN(4) > 0 {
				current[ref] = c.nodes[rng.IntN(len(c.nodes))]
			}
		}
		moved := moveLeaders(c.replicas, up, current)
		checkLeaders(t, c.replicas, up, moved)
		if got, want := score(c.replicas, current, moved), bruteLeaders(c.replicas, up, current); got != want {
			t.Fatalf("up %v, replicas %v, current %v: moveLeaders scores %v, the best is %v", up, c.replicas, current, got, want)
		}
		compared += 3
	}
	if compared == 0 {
		t.Fatal("nothing compared")
	}
}

// TestLeaderSpreadImpossibleBound: when the replica lists make ceil(S/N)
// unreachable, the maximum is still the least possible.
func TestLeaderSpreadImpossibleBound(t *testing.T) {
	t.Run("one node holds everything", func(t *testing.T) {
		replicas := map[shardRef][]uint64{}
		for i := range uint32(10) {
			replicas[shardRef{1, i}] = []uint64{5}
		}
		replicas[shardRef{2, 0}] = []uint64{6}
		got := spreadLeaders(replicas, []uint64{5, 6})
		checkLeaders(t, replicas, []uint64{5, 6}, got)
		if l := leaderLoads(got); l[5] != 10 || l[6] != 1 {
			t.Fatalf("loads %v, want 10 on node 5 and 1 on node 6", l)
		}
		certifyMinMax(t, replicas, []uint64{5, 6}, got)
	})
	t.Run("a crowded pair", func(t *testing.T) {
		// Six shards on nodes 1 and 2, one on 2 and 3, one on 3 and 4:
		// ceil(8/4) = 2 would need nodes 1 and 2 to take 4 of the six at
		// most; the least maximum is 3, and 3 and 4 take one shard each.
		replicas := map[shardRef][]uint64{}
		for i := range uint32(6) {
			replicas[shardRef{1, i}] = []uint64{1, 2}
		}
		replicas[shardRef{2, 0}] = []uint64{2, 3}
		replicas[shardRef{2, 1}] = []uint64{3, 4}
		up := []uint64{1, 2, 3, 4}
		got := spreadLeaders(replicas, up)
		checkLeaders(t, replicas, up, got)
		l := leaderLoads(got)
		if l[1] != 3 || l[2] != 3 || l[3]+l[4] != 2 {
			t.Fatalf("loads %v, want 3, 3 and one each for 3 and 4", l)
		}
		certifyMinMax(t, replicas, up, got)
	})
}

// TestLeaderSpreadNoUpReplica: shards with no up replica, or an empty
// list, get no leader, and nodes that hold nothing lead nothing.
func TestLeaderSpreadNoUpReplica(t *testing.T) {
	replicas := map[shardRef][]uint64{
		{1, 0}: {1, 2},
		{1, 1}: {3},
		{1, 2}: {},
		{1, 3}: {2, 0, 2}, // a 0 and a repeat are ignored
	}
	for _, up := range [][]uint64{nil, {9}, {0}} {
		if got := spreadLeaders(replicas, up); len(got) != 0 {
			t.Fatalf("up %v: leaders %v, want none", up, got)
		}
	}
	got := spreadLeaders(replicas, []uint64{2, 9})
	want := map[shardRef]uint64{{1, 0}: 2, {1, 3}: 2}
	if !maps.Equal(got, want) {
		t.Fatalf("leaders %v, want %v", got, want)
	}
	if got := spreadLeaders(nil, []uint64{1}); len(got) != 0 {
		t.Fatalf("no shards: leaders %v", got)
	}
}

// TestLeaderSpreadDeterministic checks that the answer depends on values
// only: not on the order of up, or of the replicas map's construction, or
// on anything left from an earlier call; and that the arguments are left
// as they were.
func TestLeaderSpreadDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 30 {
		c := randomCluster(t, rng, 16, 8)
		up := randomUp(rng, c.nodes)
		want := spreadLeaders(c.replicas, up)
		wantMoved := moveLeaders(c.replicas, up, want)
		if !maps.Equal(wantMoved, want) {
			t.Fatalf("moveLeaders from a valid balanced assignment changed it")
		}
		snapshot := map[shardRef][]uint64{}
		for ref, nodes := range c.replicas {
			snapshot[ref] = slices.Clone(nodes)
		}
		for range 3 {
			refs := slices.Collect(maps.Keys(c.replicas))
			rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
			rebuilt := make(map[shardRef][]uint64)
			for _, ref := range refs {
				rebuilt[ref] = c.replicas[ref]
			}
			perm := slices.Clone(up)
			rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			perm = append(perm, perm...) // repeats in up change nothing
			if got := spreadLeaders(rebuilt, perm); !maps.Equal(got, want) {
				t.Fatalf("same cluster, other orders: different leaders")
			}
		}
		if !maps.EqualFunc(snapshot, c.replicas, slices.Equal) {
			t.Fatalf("spreadLeaders modified its replicas")
		}
	}
}
