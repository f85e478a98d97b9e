package wire_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// collect iterates block to the end and returns its records (copied) and the
// iterator's error.
func collect(block []byte) ([]wire.Record, error) {
	it := wire.NewRecordIter(block)
	var out []wire.Record
	var r wire.Record
	for it.Next(&r) {
		c := wire.Record{Key: bytes.Clone(r.Key), Payload: bytes.Clone(r.Payload)}
		for _, h := range r.Headers {
			c.Headers = append(c.Headers, wire.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
		}
		out = append(out, c)
	}
	return out, it.Err()
}

func manyHeaders(n, nameLen int) []wire.RecordHeader {
	hs := make([]wire.RecordHeader, n)
	for i := range hs {
		hs[i] = wire.RecordHeader{Key: repeatString('h', nameLen), Value: []byte{byte(i)}}
	}
	return hs
}

func TestRecordsLayout(t *testing.T) {
	tests := []struct {
		name string
		recs []wire.Record
		hex  string
	}{
		{"empty record", []wire.Record{{}}, "000000"},
		{"key header payload", []wire.Record{{Key: []byte("k"), Headers: []wire.RecordHeader{{Key: "h", Value: []byte("v")}}, Payload: []byte("p")}},
			"016b" + "01" + "0168" + "0176" + "0170"},
		{"two records", []wire.Record{{Payload: []byte("a")}, {Key: []byte("b")}}, "00000161" + "016200" + "00"},
		{"two-byte varint", []wire.Record{{Payload: repeat('x', 128)}}, "0000" + "8001" + hex.EncodeToString(repeat('x', 128))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := wire.AppendRecords([]byte{0xaa}, tc.recs)
			if h := hex.EncodeToString(got[1:]); h != tc.hex || got[0] != 0xaa {
				t.Fatalf("AppendRecords = %s, want %s", h, tc.hex)
			}
		})
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		recs []wire.Record
	}{
		{"none", nil},
		{"one empty", []wire.Record{{}}},
		{"payload only", []wire.Record{{Payload: []byte("hello")}}},
		{"trace header", []wire.Record{{Key: []byte("user-1"), Headers: []wire.RecordHeader{
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}, Payload: []byte(`{"x":1}`)}}},
		{"empty header name and value", []wire.Record{{Headers: []wire.RecordHeader{{}}}}},
		{"limits exactly", []wire.Record{{Key: repeat('k', wire.MaxKeyBytes), Headers: manyHeaders(wire.MaxHeaders, wire.MaxHeaderKeyBytes), Payload: repeat('p', 70000)}}},
		{"many", func() []wire.Record {
			recs := make([]wire.Record, 100)
			for i := range recs {
				recs[i] = wire.Record{Key: []byte{byte(i)}, Payload: repeat(byte(i), i*3)}
			}
			return recs
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			block := wire.AppendRecords(nil, tc.recs)
			if n := wire.RecordsSize(tc.recs); n != len(block) {
				t.Fatalf("RecordsSize = %d, encoded %d", n, len(block))
			}
			got, err := collect(block)
			if err != nil {
				t.Fatalf("iterate: %v", err)
			}
			if !sameValue(got, tc.recs) {
				t.Fatalf("records differ after a round trip")
			}
			if len(tc.recs) == 0 {
				return
			}
			want := 0
			for _, r := range tc.recs {
				want += len(r.Payload)
			}
			n, err := wire.ValidateRecords(block, uint32(len(tc.recs)))
			if err != nil || n != want {
				t.Fatalf("ValidateRecords = %d, %v; want %d", n, err, want)
			}
		})
	}
}

func TestRecordIterSharesBlock(t *testing.T) {
	recs := []wire.Record{
		{Key: []byte("k1"), Headers: manyHeaders(3, 2), Payload: []byte("p1")},
		{Key: []byte("k2"), Headers: manyHeaders(1, 2), Payload: []byte("p2")},
	}
	block := wire.AppendRecords(nil, recs)
	it := wire.NewRecordIter(block)
	r := wire.Record{Headers: make([]wire.RecordHeader, 0, 8)}
	reused := &r.Headers[:1][0]
	within := func(b []byte) bool {
		for i := range block {
			if len(b) > 0 && &b[0] == &block[i] {
				return true
			}
		}
		return false
	}
	for i := 0; it.Next(&r); i++ {
		if !within(r.Key) || !within(r.Payload) || !within(r.Headers[0].Value) {
			t.Fatalf("record %d: key, payload or header value copied out of the block", i)
		}
		if &r.Headers[:1][0] != reused {
			t.Fatalf("record %d: Headers capacity not reused", i)
		}
		if len(r.Headers) != len(recs[i].Headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(r.Headers), len(recs[i].Headers))
		}
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	// Appending to a yielded slice must not scribble over the next record.
	it = wire.NewRecordIter(block)
	it.Next(&r)
	_ = append(r.Key, 'X')
	_ = append(r.Payload, 'X')
	if !bytes.Equal(block, wire.AppendRecords(nil, recs)) {
		t.Fatal("appending to a yielded slice changed the block")
	}
}

// badBlocks are records blocks the iterator must refuse with
// CodeMalformedFrame. ok is how many records decode before the failure.
var badBlocks = []struct {
	name  string
	block []byte
	ok    int
}{
	{"key length lies", []byte{0x05, 'a'}, 0},
	{"key over the limit", wire.AppendRecord(nil, &wire.Record{Key: repeat('k', wire.MaxKeyBytes+1)}), 0},
	{"header count missing", []byte{0x01, 'k'}, 0},
	{"too many headers", wire.AppendRecord(nil, &wire.Record{Headers: manyHeaders(wire.MaxHeaders+1, 1)}), 0},
	{"huge header count", []byte{0x00, 0xff, 0xff, 0xff, 0xff, 0x0f}, 0},
	{"header name over the limit", wire.AppendRecord(nil, &wire.Record{Headers: manyHeaders(1, wire.MaxHeaderKeyBytes+1)}), 0},
	{"header name length lies", []byte{0x00, 0x01, 0x09, 'h'}, 0},
	{"header value length lies", []byte{0x00, 0x01, 0x01, 'h', 0x09, 'v'}, 0},
	{"header value missing", []byte{0x00, 0x01, 0x01, 'h'}, 0},
	{"payload length lies", []byte{0x00, 0x00, 0x05, 'a', 'b'}, 0},
	{"payload length missing", []byte{0x00, 0x00}, 0},
	{"varint cut short", []byte{0x00, 0x00, 0x80}, 0},
	{"varint overflows", []byte{0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 0},
	{"length near 2^64", []byte{0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 0},
	{"garbage after a good record", []byte{0x00, 0x00, 0x01, 'p', 0x07}, 1},
}

func TestRecordIterErrors(t *testing.T) {
	for _, tc := range badBlocks {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := collect(tc.block)
			wantCode(t, err, wire.CodeMalformedFrame)
			if len(recs) != tc.ok {
				t.Fatalf("%d records before the error, want %d", len(recs), tc.ok)
			}
			// The error sticks.
			it := wire.NewRecordIter(tc.block)
			var r wire.Record
			for it.Next(&r) {
			}
			if it.Next(&r) || it.Err() == nil {
				t.Fatal("the iterator moved on after an error")
			}
			// ValidateRecords refuses the block whatever count it is told.
			for _, count := range []uint32{1, 2, uint32(tc.ok), uint32(tc.ok + 1)} {
				if count == 0 {
					continue
				}
				_, err := wire.ValidateRecords(tc.block, count)
				wantCode(t, err, wire.CodeMalformedFrame)
			}
		})
	}
}

func TestValidateRecords(t *testing.T) {
	three := wire.AppendRecords(nil, []wire.Record{{Payload: []byte("ab")}, {Payload: []byte("c")}, {Key: []byte("k")}})
	tests := []struct {
		name  string
		block []byte
		count uint32
		code  wire.Code // 0: valid
		bytes int
	}{
		{"exact", three, 3, 0, 3},
		{"count zero", three, 0, wire.CodeInvalidRequest, 0},
		{"count zero empty block", nil, 0, wire.CodeInvalidRequest, 0},
		{"count over the limit", three, wire.MaxRecordsInBatch + 1, wire.CodeBatchTooLarge, 0},
		{"count at the limit, block short", three, wire.MaxRecordsInBatch, wire.CodeMalformedFrame, 0},
		{"count too small", three, 2, wire.CodeMalformedFrame, 0},
		{"count one", three, 1, wire.CodeMalformedFrame, 0},
		{"count too large", three, 4, wire.CodeMalformedFrame, 0},
		{"empty block", nil, 1, wire.CodeMalformedFrame, 0},
		{"trailing byte", append(bytes.Clone(three), 0x00), 3, wire.CodeMalformedFrame, 0},
		{"trailing record", append(bytes.Clone(three), 0x00, 0x00, 0x00), 3, wire.CodeMalformedFrame, 0},
		{"lying length in the last record", append(bytes.Clone(three[:len(three)-2]), 0x03, 'k'), 3, wire.CodeMalformedFrame, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := wire.ValidateRecords(tc.block, tc.count)
			if tc.code != 0 {
				wantCode(t, err, tc.code)
				if n != 0 {
					t.Errorf("payload bytes %d reported with an error", n)
				}
				return
			}
			if err != nil || n != tc.bytes {
				t.Fatalf("ValidateRecords = %d, %v; want %d", n, err, tc.bytes)
			}
		})
	}
}

func TestValidateRecordsMaxCount(t *testing.T) {
	block := bytes.Repeat([]byte{0, 0, 0}, wire.MaxRecordsInBatch)
	if n, err := wire.ValidateRecords(block, wire.MaxRecordsInBatch); err != nil || n != 0 {
		t.Fatalf("MaxRecordsInBatch empty records: %d, %v", n, err)
	}
	_, err := wire.ValidateRecords(append(block, 0, 0, 0), wire.MaxRecordsInBatch)
	wantCode(t, err, wire.CodeMalformedFrame)
}
