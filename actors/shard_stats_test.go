package actors

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// selectSubscriptions returns exactly the page a full sort would give, for
// both orders, any offset and limit, while keeping only offset+limit
// candidates.
func TestSelectSubscriptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	subs := map[string]*subState{}
	for i := range 300 {
		id := fmt.Sprintf("sub-%03d", rng.IntN(1000))
		st := &subState{pid: actor.NewPID("nonhost", id), capacity: 1 + rng.IntN(64), maxBytes: int64(rng.IntN(3)) * 4096,
			next: uint64(i), live: rng.IntN(2) == 0}
		st.inEntries = rng.IntN(st.capacity + 1)
		if st.maxBytes > 0 {
			st.inBytes = rng.Int64N(st.maxBytes + 1)
		}
		subs[id] = st
	}
	all := make([]SubscriptionAccount, 0, len(subs))
	for _, st := range subs {
		all = append(all, SubscriptionAccount{PID: st.pid, Next: st.next, Capacity: st.capacity, MaxBytes: st.maxBytes,
			InEntries: st.inEntries, InBytes: st.inBytes, Live: st.live})
	}
	byFill := slices.Clone(all)
	slices.SortFunc(byFill, func(a, b SubscriptionAccount) int {
		return cmp.Or(cmp.Compare(b.Fill(), a.Fill()), cmp.Compare(a.PID.Id, b.PID.Id))
	})
	byID := slices.Clone(all)
	slices.SortFunc(byID, func(a, b SubscriptionAccount) int { return cmp.Compare(a.PID.Id, b.PID.Id) })
	ids := func(as []SubscriptionAccount) []string {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = a.PID.Id
		}
		return out
	}
	for _, tc := range []struct{ offset, limit int }{{0, 10}, {0, 1}, {5, 20}, {0, len(all)}, {len(all) - 3, 10}, {len(all), 5}, {0, 0}, {-4, 3}} {
		for order, want := range map[SubscriptionOrder][]SubscriptionAccount{SubscriptionsByFill: byFill, SubscriptionsByID: byID} {
			lo := min(max(tc.offset, 0), len(want))
			hi := min(lo+max(tc.limit, 0), len(want))
			got := selectSubscriptions(subs, tc.offset, tc.limit, order)
			if !slices.Equal(ids(got), ids(want[lo:hi])) {
				t.Errorf("order %d offset %d limit %d: got %v, want %v", order, tc.offset, tc.limit, ids(got), ids(want[lo:hi]))
			}
		}
	}
	if got := selectSubscriptions(subs, MaxShardStatsPage, 10, SubscriptionsByID); len(got) != 0 {
		t.Errorf("a page past MaxShardStatsPage: %d rows", len(got))
	}
}

// Fill is the fuller of the two bounds, capped at 1.
func TestSubscriptionAccountFill(t *testing.T) {
	for _, tc := range []struct {
		a    SubscriptionAccount
		want float64
	}{
		{SubscriptionAccount{Capacity: 10, InEntries: 5}, 0.5},
		{SubscriptionAccount{Capacity: 10, InEntries: 1, MaxBytes: 100, InBytes: 80}, 0.8},
		{SubscriptionAccount{Capacity: 10, InEntries: 20}, 1},
		{SubscriptionAccount{}, 0},
	} {
		if got := tc.a.Fill(); got != tc.want {
			t.Errorf("%+v: fill %v, want %v", tc.a, got, tc.want)
		}
	}
}

// BenchmarkSelectSubscriptions is what the dashboard's deepest page of a
// shard's subscriptions costs the shard's Receive: 10,000 subscriptions,
// the last page of 200 by fill.
func BenchmarkSelectSubscriptions(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 5))
	subs := map[string]*subState{}
	for i := range 10_000 {
		id := fmt.Sprintf("sub-%05d", i)
		st := &subState{pid: actor.NewPID("nonhost", id), capacity: 64, next: uint64(i)}
		st.inEntries = rng.IntN(65)
		subs[id] = st
	}
	for _, offset := range []int{0, MaxShardStatsPage - 200} {
		b.Run(fmt.Sprintf("offset=%d", offset), func(b *testing.B) {
			for b.Loop() {
				if got := selectSubscriptions(subs, offset, 200, SubscriptionsByFill); len(got) != 200 {
					b.Fatalf("%d rows", len(got))
				}
			}
		})
	}
}
