package actors

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestFollowerRule(t *testing.T) {
	rule := followerRule{MaxSilenceTicks: 10, MaxLagEntries: 100}
	tests := []struct {
		name       string
		v          replicaView
		admit, end behindReason // for a new read or subscription; for a live subscription
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
				t.Errorf("new request: %d (%s), want %d", got, rule.describe(got, tc.v, "100ms"), tc.admit)
			}
			if got := rule.behind(tc.v, true); got != tc.end {
				t.Errorf("live subscription: %d (%s), want %d", got, rule.describe(got, tc.v, "100ms"), tc.end)
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
// batch: the lag in records and bytes at any raft index the marks cover is
// exact, and below the first mark held it is the lag from there (at least
// what is shown).
func TestApplyMarks(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	type batch struct{ index, records, bytes uint64 }
	for run := range 20 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			var a applyMarks
			start, tail := uint64(1+rng.IntN(50)), uint64(rng.IntN(1000))
			a.reset(start, tail)
			var model []batch
			index := start
			checked := 0
			for step := range 3000 {
				switch r := rng.IntN(10); {
				case r < 6: // a batch applies (after entries that take no offset)
					index += 1 + uint64(rng.IntN(3))
					b := batch{index: index, records: 1 + uint64(rng.IntN(64)), bytes: 1 + uint64(rng.IntN(4096))}
					tail += b.records
					a.add(b.index, tail, int(b.bytes))
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
					_, exact := a.at(match)
					if exact && (gotRec != wantRec || gotBytes != wantBytes) {
						t.Fatalf("step %d: lag at %d = %d records %d bytes, want %d and %d", step, match, gotRec, gotBytes, wantRec, wantBytes)
					}
					if !exact && (gotRec > wantRec || gotBytes > wantBytes) {
						t.Fatalf("step %d: inexact lag at %d = %d records %d bytes, more than %d and %d", step, match, gotRec, gotBytes, wantRec, wantBytes)
					}
					if exact {
						checked++
					}
				}
				if len(a.marks) > maxMarks {
					t.Fatalf("step %d: %d marks", step, len(a.marks))
				}
			}
			if checked == 0 {
				t.Fatal("no exact lag was checked")
			}
			// A replica holding everything lacks nothing.
			if r, b := a.lag(index); r != 0 || b != 0 {
				t.Fatalf("lag at the last index: %d records %d bytes", r, b)
			}
		})
	}
	// The cap: a replica that holds nothing of what was applied since the
	// marks began is counted from the oldest mark kept.
	var a applyMarks
	a.reset(10, 0)
	for i := range uint64(maxMarks + 100) {
		a.add(11+i, i+1, 1)
	}
	if len(a.marks) != maxMarks {
		t.Fatalf("%d marks held, want %d", len(a.marks), maxMarks)
	}
	if r, _ := a.lag(10); r != maxMarks {
		t.Fatalf("lag below the marks: %d records, want the %d held", r, maxMarks)
	}
	if _, exact := a.at(10); exact {
		t.Fatal("a lag below the marks held is exact")
	}
	// A reset (a snapshot installed) starts afresh and keeps the bytes total.
	total := a.last().bytes
	a.reset(50000, 123)
	if m := a.last(); m.index != 50000 || m.tail != 123 || m.bytes != total || len(a.marks) != 0 {
		t.Fatalf("after a reset: %+v, %d marks", m, len(a.marks))
	}
}
