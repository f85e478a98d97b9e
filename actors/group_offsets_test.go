package actors

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// offsetsView is an offsetTable's state as maps, for tests.
type offsetsView struct {
	done     map[uint64]bool   // settled: marked
	claims   map[uint64]string // claimed: owner
	seqs     map[uint64]uint64 // claimed: sequence number
	attempts map[uint64]uint32
	staged   map[uint64]uint64 // stage
	stagedMk map[uint64]bool   // the staged ack wrote a marker
}

func newOffsetsView() offsetsView {
	return offsetsView{done: map[uint64]bool{}, claims: map[uint64]string{}, seqs: map[uint64]uint64{}, attempts: map[uint64]uint32{},
		staged: map[uint64]uint64{}, stagedMk: map[uint64]bool{}}
}

// view returns t's state as maps, and fails if t's counts disagree with it.
func (t *offsetTable) view(tb testing.TB) offsetsView {
	tb.Helper()
	v := newOffsetsView()
	t.each(func(off uint64, st *offState) {
		if st.flags&offDone != 0 {
			v.done[off] = st.flags&offMarked != 0
		}
		if st.claim != 0 {
			v.claims[off], v.seqs[off] = st.owner, st.claim
		}
		if st.flags&offCounted != 0 {
			v.attempts[off] = st.attempts
		}
		if st.stage != 0 {
			v.staged[off], v.stagedMk[off] = st.stage, st.flags&offStagedMarked != 0
		}
	})
	if len(v.done) != t.done || len(v.claims) != t.claims || len(v.attempts) != t.counted || len(v.staged) != t.staged {
		tb.Fatalf("offset table counts done %d claims %d attempts %d staged %d; it holds %d, %d, %d, %d",
			t.done, t.claims, t.counted, t.staged, len(v.done), len(v.claims), len(v.attempts), len(v.staged))
	}
	return v
}

// The offset table keeps what a map per kind of state would, through
// random changes at offsets around a base that moves up (as committed
// does), jumps far (retention, seek), and windows wider than the ring.
func TestOffsetTableMatchesMaps(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			var tab offsetTable
			want := newOffsetsView()
			var base uint64
			// width is how far above base offsets go; some runs go past
			// the ring's bound.
			width := uint64(64 + rng.IntN(4096))
			if seed%8 == 0 {
				width = maxOffsetRing + maxOffsetRing/2
			}
			pickOff := func() uint64 {
				if base > 0 && rng.IntN(10) == 0 {
					return rng.Uint64N(base) // below the base: a redriven record
				}
				if width > maxOffsetRing && rng.IntN(2) == 0 {
					return base + width - 1 - rng.Uint64N(64) // the far end of a wide window
				}
				return base + rng.Uint64N(min(width, 512))
			}
			for step := range 3000 {
				off := pickOff()
				switch rng.IntN(12) {
				case 0:
					seq := uint64(step + 1)
					owner := []string{"", "a", "b"}[rng.IntN(3)]
					tab.setClaim(off, owner, seq)
					want.claims[off], want.seqs[off] = owner, seq
				case 1:
					owner, ok := tab.clearClaim(off)
					wo, wok := want.claims[off]
					if owner != wo || ok != wok {
						t.Fatalf("step %d: clearClaim(%d) = %q %v, want %q %v", step, off, owner, ok, wo, wok)
					}
					delete(want.claims, off)
					delete(want.seqs, off)
				case 2:
					m := rng.IntN(2) == 0
					tab.setDone(off, m)
					want.done[off] = m
				case 3:
					m, ok := tab.clearDone(off)
					wm, wok := want.done[off]
					if m != wm || ok != wok {
						t.Fatalf("step %d: clearDone(%d) = %v %v, want %v %v", step, off, m, ok, wm, wok)
					}
					delete(want.done, off)
				case 4:
					stage, m := uint64(1+rng.IntN(5)), rng.IntN(2) == 0
					tab.setStage(off, stage, m)
					want.staged[off], want.stagedMk[off] = stage, m
				case 5:
					tab.clearStage(off)
					delete(want.staged, off)
					delete(want.stagedMk, off)
				case 6:
					n := uint32(rng.IntN(4))
					tab.setAttempts(off, n)
					want.attempts[off] = n
				case 7:
					got := tab.addAttempt(off)
					want.attempts[off]++
					if got != want.attempts[off] {
						t.Fatalf("step %d: addAttempt(%d) = %d, want %d", step, off, got, want.attempts[off])
					}
				case 8:
					tab.clearAttempts(off)
					delete(want.attempts, off)
				case 9:
					// committed moves up; a rare jump passes what is held.
					to := base + uint64(rng.IntN(64))
					if rng.IntN(50) == 0 {
						to = base + uint64(1+rng.IntN(1<<30))
					}
					tab.slide(to)
					base = to
				case 10:
					if rng.IntN(100) == 0 {
						base += uint64(rng.IntN(1000))
						tab.reset(base)
						want = newOffsetsView()
					}
				case 11:
					// firstFrom agrees with a scan of the maps.
					from := off
					to := from + uint64(1+rng.IntN(2048))
					w := to
					for o := range want.done {
						if o > from && o < w {
							w = o
						}
					}
					for o := range want.claims {
						if o > from && o < w {
							w = o
						}
					}
					if got := tab.firstFrom(from, to); got != w {
						t.Fatalf("step %d: firstFrom(%d, %d) = %d, want %d", step, from, to, got, w)
					}
				}
				// Lookups agree, at the offset changed and at random ones.
				for _, o := range []uint64{off, pickOff()} {
					m, d := tab.isDone(o)
					wm, wd := want.done[o]
					n, counted := tab.attemptsOf(o)
					wn, wc := want.attempts[o]
					stage, smk := tab.stageOf(o)
					if m != wm || d != wd || n != wn || counted != wc || stage != want.staged[o] || smk != want.stagedMk[o] ||
						tab.claimed(o) != (want.seqs[o] != 0) {
						t.Fatalf("step %d: offset %d disagrees with the maps", step, o)
					}
				}
				if step%100 == 0 || step == 2999 {
					got := tab.view(t)
					if !maps.Equal(got.done, want.done) || !maps.Equal(got.claims, want.claims) || !maps.Equal(got.seqs, want.seqs) ||
						!maps.Equal(got.attempts, want.attempts) || !maps.Equal(got.staged, want.staged) || !maps.Equal(got.stagedMk, want.stagedMk) {
						t.Fatalf("step %d: the table's state differs from the maps'", step)
					}
				}
			}
			if len(tab.ring) > maxOffsetRing {
				t.Fatalf("ring of %d slots, bound %d", len(tab.ring), maxOffsetRing)
			}
		})
	}
}
