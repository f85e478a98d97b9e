package history

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
)

// TestRecorderRecordsInOrder records one event of each kind on a zero
// Recorder and expects them back numbered from 1, field for field.
func TestRecorderRecordsInOrder(t *testing.T) {
	var r Recorder
	errTimeout := errors.New("timeout")
	errRefused := errors.New("condition failed")
	r.Invoke("a", 1)
	r.InvokeIf("b", 2, 7)
	r.Ack("a", 1, 4)
	r.Fail("b", errRefused)
	r.Invoke("c", 0)
	r.Unknown("c", errTimeout)
	r.Read(1, 4, []string{"a", "x"})

	want := History{
		{Seq: 1, Kind: KindInvoke, ID: "a", Shard: 1},
		{Seq: 2, Kind: KindInvoke, ID: "b", Shard: 2, Conditional: true, Expected: 7},
		{Seq: 3, Kind: KindAck, ID: "a", Shard: 1, Offset: 4},
		{Seq: 4, Kind: KindFail, ID: "b", Err: errRefused},
		{Seq: 5, Kind: KindInvoke, ID: "c"},
		{Seq: 6, Kind: KindUnknown, ID: "c", Err: errTimeout},
		{Seq: 7, Kind: KindRead, Shard: 1, Offset: 4, IDs: []string{"a", "x"}},
	}
	got := r.History()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("History() =\n%+v\nwant\n%+v", got, want)
	}
	if n := r.Len(); n != len(want) {
		t.Errorf("Len() = %d, want %d", n, len(want))
	}
	if n := New().Len(); n != 0 {
		t.Errorf("New().Len() = %d, want 0", n)
	}
}

// TestRecorderSharesNothing checks that Read copies the caller's slice and
// History returns a copy: editing either leaves the recorded events as
// they were.
func TestRecorderSharesNothing(t *testing.T) {
	r := New()
	ids := []string{"a", "b"}
	r.Read(0, 0, ids)
	ids[0] = "changed by the caller"
	h := r.History()
	h[0].IDs[1] = "changed in a copy"
	h[0].Offset = 9
	if got := r.History()[0]; got.IDs[0] != "a" || got.IDs[1] != "b" || got.Offset != 0 {
		t.Errorf("recorded read became %+v, want ids [a b] from offset 0", got)
	}
}

// TestKindString names each kind and falls back to a number.
func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		KindInvoke: "invoke", KindAck: "ack", KindFail: "fail", KindUnknown: "unknown", KindRead: "read", 0: "kind(0)", 42: "kind(42)",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

// TestRecorderConcurrent has publishers append to a simulated log of three
// shards and readers read it, all recording into one Recorder at once (run
// it with -race). The history must hold every event once, numbered without
// a gap, each goroutine's events in its own order, and check clean against
// the simulated log.
func TestRecorderConcurrent(t *testing.T) {
	const (
		shards     = 3
		publishers = 8
		perPub     = 200
		readers    = 4
		perReader  = 100
	)
	var logs [shards]struct {
		sync.Mutex
		ids []string
	}
	rec := New()
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range perPub {
				id := fmt.Sprintf("p%d-%d", p, i)
				s := uint32((p + i) % shards)
				rec.Invoke(id, s)
				l := &logs[s]
				l.Lock()
				off := uint64(len(l.ids))
				l.ids = append(l.ids, id)
				l.Unlock()
				if i%10 == 0 {
					rec.Unknown(id, errors.New("connection lost"))
				} else {
					rec.Ack(id, s, off)
				}
			}
		})
	}
	var readRecords [readers]int
	for g := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(g)))
			for range perReader {
				s := rng.IntN(shards)
				l := &logs[s]
				l.Lock()
				from := rng.IntN(len(l.ids) + 1)
				n := rng.IntN(min(20, len(l.ids)-from) + 1)
				ids := append([]string(nil), l.ids[from:from+n]...)
				l.Unlock()
				rec.Read(uint32(s), uint64(from), ids)
				readRecords[g] += n
			}
		})
	}
	wg.Wait()

	h := rec.History()
	if want := publishers*perPub*2 + readers*perReader; len(h) != want {
		t.Fatalf("history has %d events, want %d", len(h), want)
	}
	invoked := map[string]uint64{}
	lastInvoke := map[int]uint64{}
	for i, e := range h {
		if e.Seq != uint64(i)+1 {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, i+1)
		}
		var p, n int
		switch e.Kind {
		case KindInvoke:
			if _, dup := invoked[e.ID]; dup {
				t.Fatalf("%q invoked twice", e.ID)
			}
			invoked[e.ID] = e.Seq
			if _, err := fmt.Sscanf(e.ID, "p%d-%d", &p, &n); err != nil {
				t.Fatalf("invoke of unexpected id %q: %v", e.ID, err)
			}
			if e.Seq <= lastInvoke[p] {
				t.Fatalf("publisher %d's invoke of %q at seq %d is not after its previous one at seq %d", p, e.ID, e.Seq, lastInvoke[p])
			}
			lastInvoke[p] = e.Seq
		case KindAck, KindUnknown:
			if s, ok := invoked[e.ID]; !ok || s >= e.Seq {
				t.Fatalf("outcome of %q at seq %d is not after its invoke (seq %d, recorded %v)", e.ID, e.Seq, s, ok)
			}
		}
	}

	final := Final{}
	for s := range logs {
		final[uint32(s)] = LogOf(0, logs[s].ids...)
	}
	if vs := Check(h, final); len(vs) != 0 {
		t.Fatalf("concurrent history has %d violations, first %v", len(vs), vs[0])
	}
	sum := Summarize(h, final)
	totalRead := 0
	for _, n := range readRecords {
		totalRead += n
	}
	want := Summary{
		Events: len(h), Publishes: publishers * perPub, Attempts: publishers * perPub,
		Acked: publishers * perPub * 9 / 10, Unknown: publishers * perPub / 10, UnknownPresent: publishers * perPub / 10,
		Reads: readers * perReader, ReadRecords: totalRead, Records: publishers * perPub,
	}
	if sum != want {
		t.Errorf("Summarize =\n%v\nwant\n%v", sum, want)
	}
}
