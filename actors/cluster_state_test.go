package actors

import (
	"encoding/json"
	"slices"
	"testing"
)

// withDrained adds and removes a node, keeps the list sorted, returns the
// same state when nothing changes, and never changes the state it was
// called on (a published state is shared).
func TestClusterMembershipWithDrained(t *testing.T) {
	var none *ClusterMembership
	if none.IsDrained(1) || none.withDrained(1, false) != none {
		t.Fatal("a nil state drains nobody, and undraining changes nothing")
	}
	a := none.withDrained(3, true)
	b := a.withDrained(1, true)
	c := b.withDrained(3, false)
	for _, tc := range []struct {
		m    *ClusterMembership
		want []uint64
	}{{a, []uint64{3}}, {b, []uint64{1, 3}}, {c, []uint64{1}}} {
		if !slices.Equal(tc.m.Drained, tc.want) {
			t.Errorf("drained %v, want %v", tc.m.Drained, tc.want)
		}
	}
	if b.withDrained(1, true) != b || c.withDrained(3, false) != c {
		t.Error("a change that changes nothing made a new state")
	}
	if d := c.withDrained(1, false); d.Drained != nil || d.IsDrained(1) {
		t.Errorf("undrained all: %+v", d)
	}
	// Stored and read back.
	v, _ := json.Marshal(b)
	back, err := decodeClusterMembership(v)
	if err != nil || !slices.Equal(back.Drained, b.Drained) {
		t.Fatalf("read back %+v, %v", back, err)
	}
	for _, bad := range []string{`{"drained":[3,1]}`, `{"drained":[0]}`, `{"drained":"x"}`, `nope`} {
		if _, err := decodeClusterMembership([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
