package supervisors

import (
	"crypto/sha256"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The latency histogram's quantiles are within its resolution (one bucket,
// 2^(1/4)) above the exact quantile of what was recorded, and the counts of
// an interval are the difference of two snapshots.
func TestLatencyHistQuantiles(t *testing.T) {
	var h latencyHist
	if q := h.snapshot(); q.quantile(0.99) != 0 {
		t.Fatalf("empty histogram's p99 = %v, want 0", q.quantile(0.99))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var values []float64
	for range 10_000 {
		v := math.Exp(rng.NormFloat64()*1.5) * 1e-3 // log-normal around 1 ms
		values = append(values, v)
		h.Record(v)
	}
	slices.Sort(values)
	snap := h.snapshot()
	if snap.total() != 10_000 {
		t.Fatalf("total = %d", snap.total())
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := values[int(math.Ceil(q*float64(len(values))))-1]
		got := snap.quantile(q)
		if got < exact || got > exact*math.Exp2(1.0/histBucketsPerOctave)*1.0001 {
			t.Errorf("q%v = %v, exact %v: outside one bucket above", q, got, exact)
		}
	}
	before := h.snapshot()
	for range 100 {
		h.Record(2) // 2 s
	}
	after := h.snapshot()
	window := after.since(&before)
	if window.total() != 100 || window.quantile(0.5) < 2 || window.quantile(0.5) > 2*1.19 {
		t.Errorf("window: %d values, median %v", window.total(), window.quantile(0.5))
	}
	h.Record(0)
	h.Record(-1)
	h.Record(math.NaN())
	h.Record(1e9) // far past the last bucket
	if all := h.snapshot(); all.total() != 10_104 {
		t.Errorf("odd values were not all counted: %d", all.total())
	}
}

// The ring keeps the last samples in order.
func TestSampleRing(t *testing.T) {
	r := newSampleRing(3)
	for i := range 5 {
		r.push(dashSample{T: int64(i), Subscriptions: int64(i * 10)})
	}
	s := r.series(1, true)
	if !slices.Equal(s.T, []int64{2, 3, 4}) || !slices.Equal(s.Subscriptions, []int64{20, 30, 40}) || len(s.HeapBytes) != 3 {
		t.Errorf("series = %+v", s)
	}
	if last, ok := r.last(); !ok || last.T != 4 {
		t.Errorf("last = %+v, %v", last, ok)
	}
	if tenant := r.series(1, false); tenant.HeapBytes != nil || tenant.CommitP99 != nil {
		t.Errorf("a tenant's series has node figures: %+v", tenant)
	}
}

// A login cookie opens only with the key that sealed it, unchanged and
// before it expires.
func TestSessionCookie(t *testing.T) {
	d := &dashboard{}
	d.sessionKey[0] = 1
	digest := sha256.Sum256([]byte("some-token-of-this-node"))
	now := time.Unix(1_800_000_000, 0)
	v := d.sealSession(digest, now.Add(time.Hour))
	if got, ok := d.openSession(v, now); !ok || got != digest {
		t.Fatalf("open = %x, %v", got, ok)
	}
	if _, ok := d.openSession(v, now.Add(time.Hour)); ok {
		t.Error("an expired cookie opened")
	}
	other := &dashboard{}
	other.sessionKey[0] = 2
	if _, ok := other.openSession(v, now); ok {
		t.Error("another node's (or a restarted node's) key opened the cookie")
	}
	for i := range v {
		if v[i] == '.' {
			continue
		}
		b := []byte(v)
		b[i] ^= 1
		if _, ok := d.openSession(string(b), now); ok {
			t.Errorf("a cookie changed at byte %d opened", i)
		}
	}
	for _, bad := range []string{"", ".", "abc", "a.b", v + "x"} {
		if _, ok := d.openSession(bad, now); ok {
			t.Errorf("%q opened", bad)
		}
	}
}

// pageOf filters, sorts (ties by name) and pages.
func TestPageOf(t *testing.T) {
	rows := []streamRow{{Name: "t/n/b", Tail: 5}, {Name: "t/n/a", Tail: 5}, {Name: "t/x/c", Tail: 9}, {Name: "u/n/d", Tail: 1}}
	keep := func(r *streamRow) bool { return r.Name[0] == 't' }
	name := func(r *streamRow) string { return r.Name }
	names := func(rs []streamRow) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	for _, tc := range []struct {
		q     pageQuery
		want  []string
		total int
	}{
		{pageQuery{Sort: "name", Limit: 10}, []string{"t/n/a", "t/n/b", "t/x/c"}, 3},
		{pageQuery{Sort: "tail", Desc: true, Limit: 10}, []string{"t/x/c", "t/n/a", "t/n/b"}, 3},
		{pageQuery{Sort: "tail", Limit: 2}, []string{"t/n/a", "t/n/b"}, 3},
		{pageQuery{Sort: "tail", Limit: 2, Offset: 2}, []string{"t/x/c"}, 3},
		{pageQuery{Sort: "tail", Limit: 2, Offset: 3}, nil, 3},
		{pageQuery{Sort: "name", Limit: 10, Q: "/n/"}, []string{"t/n/a", "t/n/b"}, 2},
	} {
		got, total := pageOf(rows, tc.q, keep, name, streamKeys)
		if !slices.Equal(names(got), tc.want) || total != tc.total {
			t.Errorf("%+v: got %v of %d, want %v of %d", tc.q, names(got), total, tc.want, tc.total)
		}
	}
}
