package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// Tests of the frames added for stream deletion and range reads: OK,
// DeleteStream, Read and ReadResult.

func TestOKRoundTrip(t *testing.T) {
	decode := func(b []byte) (struct{}, error) { return struct{}{}, wire.DecodeOK(b) }
	for _, reqID := range []uint64{1, math.MaxUint64} {
		frame := wire.AppendOK(nil, reqID)
		if len(frame) != wire.HeaderSize {
			t.Fatalf("OK frame is %d bytes, want a bare header", len(frame))
		}
		roundTrip(t, frame, wire.TypeOK, reqID, decode, struct{}{}, -1, true)
	}
	for _, body := range [][]byte{{0}, {1, 2, 3}, make([]byte, 64)} {
		wantCode(t, wire.DecodeOK(body), wire.CodeMalformedFrame)
	}
	if err := wire.DecodeOK(nil); err != nil {
		t.Fatalf("DecodeOK(nil): %v", err)
	}
}

func TestDeleteStreamRoundTrip(t *testing.T) {
	for _, n := range []wire.StreamName{nameABC, nameLong, {}} {
		roundTrip(t, wire.AppendDeleteStream(nil, 12, n), wire.TypeDeleteStream, 12, wire.DecodeDeleteStream, n, -1, true)
	}
	// The body is a stream name, laid out as in DescribeStream.
	del := splitFrame(t, wire.AppendDeleteStream(nil, 1, nameABC)).Body
	desc := splitFrame(t, wire.AppendDescribeStream(nil, 1, nameABC)).Body
	if !bytes.Equal(del, desc) {
		t.Fatalf("DeleteStream body %x, DescribeStream body %x", del, desc)
	}
	// A name part whose length runs past the body.
	_, err := wire.DecodeDeleteStream([]byte{4, 'a', 'c', 'm', 'e', 9, 's'})
	wantCode(t, err, wire.CodeMalformedFrame)
}

func TestReadRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		r    wire.Read
	}{
		{"zero", wire.Read{}},
		{"to the tail, node caps", wire.Read{Name: nameABC, Shard: 2, Start: 100, End: wire.NoEnd}},
		{"bounded", wire.Read{Name: nameABC, Shard: 1, Start: 10, End: 20, MaxRecords: 5, MaxBytes: 4096}},
		{"extremes", wire.Read{Name: nameLong, Shard: math.MaxUint32, Start: math.MaxUint64, End: math.MaxUint64, MaxRecords: math.MaxUint32, MaxBytes: math.MaxUint32}},
		// The codec carries a range as given; an empty or inverted one is the
		// node's to judge.
		{"inverted", wire.Read{Name: nameABC, Start: 9, End: 3}},
		{"from the leader", wire.Read{Name: nameABC, Shard: 3, Start: 1, End: wire.NoEnd, Replica: wire.ReplicaLeader}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := wire.AppendRead(nil, 13, tc.r)
			fixed := -1
			if tc.r.Replica != wire.ReplicaNearest {
				fixed = len(frame) - wire.HeaderSize - 1 // without the replica byte: nearest
			}
			roundTrip(t, frame, wire.TypeRead, 13, wire.DecodeRead, tc.r, fixed, true)
		})
	}
	checkReplicaByte(t, splitFrame(t, wire.AppendRead(nil, 13, wire.Read{Name: nameABC, Replica: wire.ReplicaLeader})).Body,
		func(b []byte) (wire.Replica, error) { r, err := wire.DecodeRead(b); return r.Replica, err })
}

func TestReadLayout(t *testing.T) {
	r := wire.Read{Name: nameABC, Shard: 0x01020304, Start: 0x1112131415161718, End: wire.NoEnd, MaxRecords: 0x21222324, MaxBytes: 0x31323334}
	body := splitFrame(t, wire.AppendRead(nil, 1, r)).Body
	want, _ := hex.DecodeString("01020304" + "1112131415161718" + "ffffffffffffffff" + "21222324" + "31323334")
	if len(body) != nameLen+28 || !bytes.Equal(body[nameLen:], want) {
		t.Fatalf("Read body after the name %x, want %x", body[nameLen:], want)
	}
	if wire.NoEnd != math.MaxUint64 {
		t.Fatalf("NoEnd = %#x", wire.NoEnd)
	}
}

func readResultView(s *wire.Section) wire.BatchView {
	return wire.BatchView{Shard: binary.BigEndian.Uint32(s.Head[0:]), Base: s.Base(), Timestamp: int64(binary.BigEndian.Uint64(s.Head[12:])),
		Count: s.Count(), Records: s.Records}
}

func TestReadResultRoundTrip(t *testing.T) {
	s1 := section(1, 10, 1_700_000_000_000_000_000, wire.Record{Payload: []byte("a")}, wire.Record{Key: []byte("k"), Payload: []byte("b")})
	s2 := section(1, 12, 1_700_000_000_000_000_001, wire.Record{Headers: []wire.RecordHeader{{Key: "traceparent", Value: []byte("00-01")}}})
	big := section(math.MaxUint32, math.MaxUint64-5, math.MinInt64, wire.Record{Payload: repeat('z', 100_000)})
	tests := []struct {
		name     string
		reqID    uint64
		r        wire.ReadResult
		sections []*wire.Section
	}{
		{"empty page", 1, wire.ReadResult{Next: 5, First: 0, Tail: 5}, nil},
		{"empty stream", 1, wire.ReadResult{}, nil},
		{"one batch", 2, wire.ReadResult{Next: 12, First: 0, Tail: 13}, []*wire.Section{s1}},
		// A page read from 11 to 12 still carries both whole batches: the
		// reader skips offsets 10 and 12.
		{"batches straddle the page", 3, wire.ReadResult{Next: 12, First: 10, Tail: 13}, []*wire.Section{s1, s2}},
		{"extremes", math.MaxUint64, wire.ReadResult{Next: math.MaxUint64, First: math.MaxUint64, Tail: math.MaxUint64}, []*wire.Section{big, s1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.r
			for _, s := range tc.sections {
				want.Batches = append(want.Batches, readResultView(s))
			}
			frame := wire.AppendReadResult(nil, tc.reqID, tc.r.Next, tc.r.First, tc.r.Tail, tc.sections)
			size := 26
			for _, s := range tc.sections {
				size += s.Size()
			}
			if len(frame) != wire.HeaderSize+size {
				t.Fatalf("frame is %d bytes, want %d", len(frame), wire.HeaderSize+size)
			}
			fixed := -1
			if len(frame) > 1<<16 {
				fixed = 64 // every prefix of a 100 KB body would be slow
			}
			roundTrip(t, frame, wire.TypeReadResult, tc.reqID, wire.DecodeReadResult, want, fixed, true)
			// Every prefix is refused, sampled for the large body.
			body := splitFrame(t, frame).Body
			for n := 0; n < len(body); n += 1 + n/64 {
				_, err := wire.DecodeReadResult(body[:n:n])
				wantCode(t, err, wire.CodeMalformedFrame)
			}
		})
	}
}

func TestReadResultLayout(t *testing.T) {
	s := section(7, 0x1112131415161718, -2, wire.Record{Payload: []byte("p")})
	body := splitFrame(t, wire.AppendReadResult(nil, 1, 0x2122232425262728, 0x3132333435363738, 0x4142434445464748, []*wire.Section{s, s})).Body
	want, _ := hex.DecodeString("2122232425262728" + "3132333435363738" + "4142434445464748" + "0002")
	want = append(want, s.Head[:]...)
	want = append(want, s.Records...)
	want = append(want, s.Head[:]...)
	want = append(want, s.Records...)
	if !bytes.Equal(body, want) {
		t.Fatalf("body %x\nwant %x", body, want)
	}
	// The sections are laid out exactly as in an EventBatch.
	eb := splitFrame(t, writeBatch(t, 1, []*wire.Section{s, s})).Body
	if !bytes.Equal(body[24:], eb) {
		t.Fatalf("ReadResult sections %x differ from EventBatch sections %x", body[24:], eb)
	}
	// Batches share the frame body.
	r, err := wire.DecodeReadResult(body)
	if err != nil {
		t.Fatal(err)
	}
	if &r.Batches[1].Records[0] != &body[len(body)-len(s.Records)] {
		t.Fatal("ReadResult batches do not share the frame body")
	}
}

// readResultBody prefixes an EventBatch body (section count and sections)
// with next, first and tail.
func readResultBody(sections []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, 13)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint64(b, 13)
	return append(b, sections...)
}

func TestDecodeReadResultErrors(t *testing.T) {
	tests := []badSection{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"cut in next", make([]byte, 7), wire.CodeMalformedFrame},
		{"cut in tail", make([]byte, 23), wire.CodeMalformedFrame},
		{"cut in the section count", make([]byte, 25), wire.CodeMalformedFrame},
		{"zero sections with bytes", readResultBody(eventBody(0, goodRaw)), wire.CodeMalformedFrame},
		{"empty page with a trailing byte", append(readResultBody(eventBody(0)), 0), wire.CodeMalformedFrame},
		{"section count far over the frame", readResultBody(eventBody(math.MaxUint16)), wire.CodeMalformedFrame},
	}
	// Sections are checked as an EventBatch's are: every body that
	// DecodeEventBatch refuses for a reason other than its section count is
	// refused inside a ReadResult too.
	for _, tc := range badEventBodies() {
		if len(tc.body) >= 2 {
			if n := binary.BigEndian.Uint16(tc.body); n == 0 || n > wire.MaxSectionsPerFrame {
				continue
			}
		}
		tests = append(tests, badSection{"sections: " + tc.name, readResultBody(tc.body), tc.code})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.DecodeReadResult(tc.body)
			if tc.code == 0 {
				wantWireError(t, err)
				return
			}
			wantCode(t, err, tc.code)
		})
	}
	// An empty page is 26 bytes.
	r, err := wire.DecodeReadResult(readResultBody(eventBody(0)))
	if err != nil || len(r.Batches) != 0 || r.Next != 13 || r.Tail != 13 {
		t.Fatalf("empty page: %+v, %v", r, err)
	}
}
