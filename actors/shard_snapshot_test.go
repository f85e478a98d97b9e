package actors

import (
	"errors"
	"reflect"
	"testing"
)

// A shard's snapshot data round-trips its tail and producers (in id
// order), and malformed data is refused, never half-read.
func TestShardSnapshotRoundTrip(t *testing.T) {
	producers := map[uint64]*producerState{
		9: {id: 9, lastSeq: 4, recent: []producerBatch{{seq: 3, base: 10, count: 2}, {seq: 4, base: 12, count: 1}}},
		2: {id: 2, lastSeq: 1, recent: []producerBatch{{seq: 1, base: 0, count: 10}}},
	}
	b := encodeShardSnapshot(13, producers)
	got, err := decodeShardSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	want := shardSnapshot{tail: 13, producers: []*producerState{producers[2], producers[9]}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got, err := decodeShardSnapshot(encodeShardSnapshot(0, nil)); err != nil || got.tail != 0 || len(got.producers) != 0 {
		t.Fatalf("empty: %+v, %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"nil":         nil,
		"version":     append([]byte{9}, b[1:]...),
		"cut":         b[:len(b)-1],
		"extra":       append(append([]byte{}, b...), 0),
		"huge count":  func() []byte { c := append([]byte{}, b...); c[9] = 0xff; return c }(),
		"huge length": func() []byte { c := append([]byte{}, b...); c[13] = 0xff; return c }(),
	} {
		if _, err := decodeShardSnapshot(bad); err == nil || (!errors.Is(err, errBadShardSnapshot) && !errors.Is(err, errBadProducerState)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
