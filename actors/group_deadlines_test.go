package actors

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestDeadlineQueueMatchesAModel drives the queue with random pushes (most
// in order, some earlier than the last, some equal), pops and retains, and
// checks after every step that its front is the earliest entry a plain
// list holds, and that both hold the same entries.
func TestDeadlineQueueMatchesAModel(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var q deadlineQueue
		model := map[uint64]deadlineEntry{} // by seq
		base := time.Unix(1000, 0)
		last := base
		var seq uint64
		steps := 200 + rng.IntN(3000)
		for step := 0; step < steps; step++ {
			switch r := rng.IntN(100); {
			case r < 55:
				at := last.Add(time.Duration(rng.IntN(3)) * time.Millisecond)
				if rng.IntN(20) == 0 {
					at = last.Add(-time.Duration(1+rng.IntN(50)) * time.Millisecond)
				}
				if at.After(last) {
					last = at
				}
				seq++
				e := deadlineEntry{at: at, shard: uint32(rng.IntN(4)), offset: seq, seq: seq}
				q.push(e)
				model[seq] = e
			case r < 95:
				e, ok := q.front()
				if ok != (len(model) > 0) {
					t.Fatalf("seed %d step %d: front ok=%v with %d entries", seed, step, ok, len(model))
				}
				if !ok {
					continue
				}
				m, in := model[e.seq]
				if !in || m != e {
					t.Fatalf("seed %d step %d: front %+v is not an entry held", seed, step, e)
				}
				for _, o := range model {
					if o.at.Before(e.at) {
						t.Fatalf("seed %d step %d: front at %v, but %v is held", seed, step, e.at, o.at)
					}
				}
				q.pop()
				delete(model, e.seq)
			default:
				keep := rng.Uint64()
				live := func(e deadlineEntry) bool { return (e.seq^keep)%3 != 0 }
				q.retain(live)
				for k, e := range model {
					if !live(e) {
						delete(model, k)
					}
				}
			}
			if q.len() != len(model) {
				t.Fatalf("seed %d step %d: %d entries, model %d", seed, step, q.len(), len(model))
			}
		}
	}
}

// BenchmarkDeadlineQueue is the group's per-claim cost: a claim's deadline
// pushed in order, then popped once its claim is settled.
func BenchmarkDeadlineQueue(b *testing.B) {
	var q deadlineQueue
	at := time.Unix(1000, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q.push(deadlineEntry{at: at.Add(time.Duration(i)), offset: uint64(i), seq: uint64(i)})
		if q.len() > 1500 {
			q.pop()
		}
	}
}
