package actors

import (
	"bytes"
	"testing"
)

// A publish entry decodes to what was encoded, with every combination of
// a conditional's expected tail and an idempotent producer's sequence; a
// cut-short or unknown entry is an error, never a batch.
func TestRaftPublishEntryRoundTrip(t *testing.T) {
	for _, p := range []raftPublish{
		{Proposal: 1, Timestamp: 5, Count: 2, Records: []byte("ab")},
		{Proposal: 2, Timestamp: -1, Count: 1, HasExpected: true, Expected: 40, Records: []byte("c")},
		{Proposal: 3, Count: 3, Idempotent: true, ProducerID: 7, Sequence: 9, Records: []byte("def")},
		{Proposal: 4, Count: 1, HasExpected: true, Expected: 1, Idempotent: true, ProducerID: 1 << 60, Sequence: 1, Records: nil},
	} {
		data := appendRaftPublish(nil, p)
		got, err := decodeRaftPublish(data)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if got.Proposal != p.Proposal || got.Timestamp != p.Timestamp || got.Count != p.Count || got.HasExpected != p.HasExpected ||
			got.Expected != p.Expected || got.Idempotent != p.Idempotent || got.ProducerID != p.ProducerID ||
			got.Sequence != p.Sequence || !bytes.Equal(got.Records, p.Records) {
			t.Fatalf("decoded %+v, encoded %+v", got, p)
		}
		// Cut anywhere inside its head, it does not decode.
		head := raftEntryHeadLen
		if p.HasExpected {
			head += 8
		}
		if p.Idempotent {
			head += 16
		}
		for n := range head {
			if _, err := decodeRaftPublish(data[:n]); err == nil {
				t.Fatalf("%+v cut to %d bytes decoded", p, n)
			}
		}
	}
	bad := appendRaftPublish(nil, raftPublish{Proposal: 1, Count: 1})
	bad[21] |= 4
	if _, err := decodeRaftPublish(bad); err == nil {
		t.Fatal("an entry with an unknown flag decoded")
	}
}
