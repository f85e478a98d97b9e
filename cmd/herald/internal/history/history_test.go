package history

import (
	"errors"
	"reflect"
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
