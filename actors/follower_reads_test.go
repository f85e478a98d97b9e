package actors

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestFollowerRule(t *testing.T) {
	rule := followerRule{MaxSilenceTicks: 10, MaxLagEntries: 100}
	tests := []struct {
		name       string
		v          replicaView
		admit, end behindReason // for a new subscription; for a range read or a subscription served already
	}{
		{"leader", replicaView{Leading: true, Lead: 1, Silence: -1, Applied: 5, LeaderCommit: 5000}, behindNot, behindNot},
		{"fresh follower", replicaView{Lead: 1, Silence: 1, Applied: 50, LeaderCommit: 52}, behindNot, behindNot},
		{"follower applied past the commit it heard", replicaView{Lead: 1, Silence: 0, Applied: 60, LeaderCommit: 52}, behindNot, behindNot},
		{"silence at the bound", replicaView{Lead: 1, Silence: 10, Applied: 50, LeaderCommit: 50}, behindNot, behindNot},
		{"silence past the bound", replicaView{Lead: 1, Silence: 11, Applied: 50, LeaderCommit: 50}, behindSilent, behindSilent},
		{"never heard from a leader", replicaView{Lead: 0, Silence: -1}, behindSilent, behindSilent},
		{"never heard, a leader known", replicaView{Lead: 2, Silence: -1}, behindSilent, behindSilent},
		{"an election under way", replicaView{Lead: 0, Silence: 4, Applied: 50, LeaderCommit: 50}, behindNoLeader, behindNot},
		{"an election that lasts", replicaView{Lead: 0, Silence: 12, Applied: 50, LeaderCommit: 50}, behindSilent, behindSilent},
		{"lag at the bound", replicaView{Lead: 1, Silence: 2, Applied: 100, LeaderCommit: 200}, behindNot, behindNot},
		{"lag past the bound", replicaView{Lead: 1, Silence: 2, Applied: 99, LeaderCommit: 200}, behindLagging, behindLagging},
		{"lagging during an election", replicaView{Lead: 0, Silence: 2, Applied: 1, LeaderCommit: 200}, behindLagging, behindLagging},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rule.behind(tc.v, false); got != tc.admit {
				t.Errorf("new subscription: %d (%s), want %d", got, rule.describe(got, tc.v, "100ms"), tc.admit)
			}
			if got := rule.behind(tc.v, true); got != tc.end {
				t.Errorf("a read, or a subscription served: %d (%s), want %d", got, rule.describe(got, tc.v, "100ms"), tc.end)
			}
		})
	}
	// Without a lag bound only silence and elections count.
	if got := (followerRule{MaxSilenceTicks: 10}).behind(replicaView{Lead: 1, Applied: 1, LeaderCommit: 1 << 40}, false); got != behindNot {
		t.Fatalf("no lag bound: %d", got)
	}
	for why, want := range map[behindReason]string{
		behindNoLeader: "it knows no leader (an election is under way)",
		behindSilent:   "it has heard nothing from a leader for 11 ticks of 100ms (the election timeout is 10)",
		behindLagging:  "its applied index 99 is 101 entries behind its leader's commit index 200 (follower_max_lag_entries is 100)",
	} {
		v := replicaView{Silence: 11, Applied: 99, LeaderCommit: 200}
		if got := rule.describe(why, v, "100ms"); got != want {
			t.Errorf("describe(%d) = %q, want %q", why, got, want)
		}
	}
}

// TestApplyMarks checks the marks against a model that remembers every
// batch: the lag in records and bytes at a raft index the marks cover is
// exact while they were never thinned, and never less than the true lag
// once they were; below the first mark held it is never more.
func TestApplyMarks(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	type batch struct{ index, records, bytes uint64 }
	for run := range 40 {
		// Even runs never reach the limit; odd ones thin their marks.
		limit := 0
		if run%2 == 1 {
			limit = 16 + rng.IntN(48)
		}
		t.Run(fmt.Sprintf("%d limit %d", run, limit), func(t *testing.T) {
			a := applyMarks{limit: limit}
			start, tail := uint64(1+rng.IntN(50)), uint64(rng.IntN(1000))
			a.reset(start, tail)
			var model []batch
			index := start
			checked, thinned := 0, false
			for step := range 3000 {
				switch r := rng.IntN(10); {
				case r < 6: // a batch applies (after entries that take no offset)
					index += 1 + uint64(rng.IntN(3))
					b := batch{index: index, records: 1 + uint64(rng.IntN(64)), bytes: 1 + uint64(rng.IntN(4096))}
					tail += b.records
					n := len(a.marks)
					a.add(b.index, tail, int(b.bytes))
					thinned = thinned || len(a.marks) <= n
					model = append(model, b)
				case r < 8: // a trim to some replica's match
					least := start + uint64(rng.IntN(int(index-start)+1))
					keep := 0
					if rng.IntN(2) == 0 {
						keep = 1 + rng.IntN(300)
					}
					a.trim(least, keep)
					if keep == 0 && len(a.marks) > 0 && a.marks[0].index <= least {
						t.Fatalf("step %d: trim to %d kept mark %d", step, least, a.marks[0].index)
					}
					if keep > 0 && len(a.marks) > keep {
						t.Fatalf("step %d: trim kept %d marks, want at most %d", step, len(a.marks), keep)
					}
				default: // look at a replica's lag
					match := start - 1 + uint64(rng.IntN(int(index-start)+2))
					var wantRec, wantBytes uint64
					for _, b := range model {
						if b.index > match {
							wantRec += b.records
							wantBytes += b.bytes
						}
					}
					gotRec, gotBytes := a.lag(match)
					_, covered := a.at(match)
					switch {
					case covered && !thinned && (gotRec != wantRec || gotBytes != wantBytes):
						t.Fatalf("step %d: lag at %d = %d records %d bytes, want %d and %d", step, match, gotRec, gotBytes, wantRec, wantBytes)
					case covered && (gotRec < wantRec || gotBytes < wantBytes):
						t.Fatalf("step %d: lag at %d = %d records %d bytes, less than %d and %d", step, match, gotRec, gotBytes, wantRec, wantBytes)
					case !covered && (gotRec > wantRec || gotBytes > wantBytes):
						t.Fatalf("step %d: lag below the marks at %d = %d records %d bytes, more than %d and %d", step, match, gotRec, gotBytes, wantRec, wantBytes)
					}
					if covered {
						checked++
					}
				}
				if len(a.marks) > cmp.Or(limit, maxMarks) {
					t.Fatalf("step %d: %d marks, limit %d", step, len(a.marks), limit)
				}
			}
			if checked == 0 {
				t.Fatal("no covered lag was checked")
			}
			if limit > 0 && !thinned {
				t.Fatal("the marks were never thinned")
			}
			// A replica holding everything lacks nothing.
			if r, b := a.lag(index); r != 0 || b != 0 {
				t.Fatalf("lag at the last index: %d records %d bytes", r, b)
			}
		})
	}
	// Past the limit the marks are thinned, not dropped: a replica that
	// holds nothing of what was applied since they began is still counted
	// in full.
	var a applyMarks
	a.reset(10, 0)
	for i := range uint64(3 * maxMarks) {
		a.add(11+i, i+1, 1)
	}
	if len(a.marks) > maxMarks {
		t.Fatalf("%d marks held, limit %d", len(a.marks), maxMarks)
	}
	if r, b := a.lag(10); r != 3*maxMarks || b != 3*maxMarks {
		t.Fatalf("lag from the start: %d records %d bytes, want %d", r, b, 3*maxMarks)
	}
	if r, _ := a.lag(10 + 3*maxMarks - 5); r != 5 {
		t.Fatalf("lag of the newest 5 batches: %d", r)
	}
	// A reset (a snapshot installed) starts afresh and keeps the bytes total.
	total := a.last().bytes
	a.reset(50000, 123)
	if m := a.last(); m.index != 50000 || m.tail != 123 || m.bytes != total || len(a.marks) != 0 {
		t.Fatalf("after a reset: %+v, %d marks", m, len(a.marks))
	}
}
