package wire_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

func section(shard uint32, base uint64, ts int64, recs ...wire.Record) *wire.Section {
	return wire.NewSection(shard, base, ts, uint32(len(recs)), wire.AppendRecords(nil, recs))
}

func view(s *wire.Section, shard uint32, ts int64) wire.BatchView {
	return wire.BatchView{Shard: shard, Base: s.Base(), Timestamp: ts, Count: s.Count(), Records: s.Records}
}

func writeBatch(t testing.TB, reqID uint64, sections []*wire.Section) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := wire.WriteEventBatch(&buf, reqID, sections); err != nil {
		t.Fatalf("WriteEventBatch: %v", err)
	}
	return buf.Bytes()
}

func TestSectionLayout(t *testing.T) {
	recs := wire.AppendRecords(nil, []wire.Record{{Payload: []byte("a")}, {Payload: []byte("b")}})
	s := wire.NewSection(0x01020304, 0x1112131415161718, -2, 2, recs)
	var want [wire.SectionHeaderSize]byte
	binary.BigEndian.PutUint32(want[0:], 0x01020304)
	binary.BigEndian.PutUint64(want[4:], 0x1112131415161718)
	binary.BigEndian.PutUint64(want[12:], 0xfffffffffffffffe)
	binary.BigEndian.PutUint32(want[20:], 2)
	binary.BigEndian.PutUint32(want[24:], uint32(len(recs)))
	if s.Head != want {
		t.Fatalf("Head = %x, want %x", s.Head, want)
	}
	if s.Base() != 0x1112131415161718 || s.Count() != 2 || s.End() != 0x1112131415161718+2 || s.Size() != wire.SectionHeaderSize+len(recs) {
		t.Fatalf("Base %d Count %d End %d Size %d", s.Base(), s.Count(), s.End(), s.Size())
	}
	if &s.Records[0] != &recs[0] {
		t.Fatal("NewSection copied the records block")
	}
}

func TestEventBatchRoundTrip(t *testing.T) {
	trace := wire.RecordHeader{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}
	s1 := section(0, 0, 1_700_000_000_000_000_000, wire.Record{Payload: []byte("one")})
	s2 := section(0, 1, 1_700_000_000_000_000_001, wire.Record{Key: []byte("k"), Headers: []wire.RecordHeader{trace}, Payload: []byte("two")}, wire.Record{})
	s3 := section(math.MaxUint32, math.MaxUint64-5, math.MinInt64, wire.Record{Payload: repeat('z', 100_000)})
	tests := []struct {
		name     string
		reqID    uint64
		sections []*wire.Section
		want     []wire.BatchView
	}{
		{"one section", 1, []*wire.Section{s1}, []wire.BatchView{view(s1, 0, 1_700_000_000_000_000_000)}},
		{"two sections", 2, []*wire.Section{s1, s2}, []wire.BatchView{view(s1, 0, 1_700_000_000_000_000_000), view(s2, 0, 1_700_000_000_000_000_001)}},
		{"extremes", math.MaxUint64, []*wire.Section{s3, s1}, []wire.BatchView{view(s3, math.MaxUint32, math.MinInt64), view(s1, 0, 1_700_000_000_000_000_000)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := writeBatch(t, tc.reqID, tc.sections)
			if len(frame) != wire.HeaderSize+wire.EventBatchBodySize(tc.sections) {
				t.Fatalf("frame is %d bytes, EventBatchBodySize says %d", len(frame), wire.EventBatchBodySize(tc.sections))
			}
			f := splitFrame(t, frame)
			if f.Header.Type != wire.TypeEventBatch || f.Header.RequestID != tc.reqID || f.Header.Flags != 0 {
				t.Fatalf("header %+v", f.Header)
			}
			got, err := wire.DecodeEventBatch(f.Body)
			if err != nil {
				t.Fatalf("DecodeEventBatch: %v", err)
			}
			if !sameValue(got, tc.want) {
				t.Fatalf("decoded %+v", got)
			}
			// Every prefix and any trailing byte is refused.
			for n := 0; n < len(f.Body); n += 1 + n/64 {
				_, err := wire.DecodeEventBatch(f.Body[:n:n])
				wantWireError(t, err)
			}
			_, err = wire.DecodeEventBatch(append(bytes.Clone(f.Body), 0))
			wantCode(t, err, wire.CodeMalformedFrame)
		})
	}
}

func TestAppendEventBatchHead(t *testing.T) {
	s := section(1, 2, 3, wire.Record{Payload: []byte("x")})
	head := wire.AppendEventBatchHead([]byte{0xee}, 5, []*wire.Section{s, s})
	if head[0] != 0xee || len(head) != 1+wire.HeaderSize+2 {
		t.Fatalf("head %x", head)
	}
	h, err := wire.DecodeHeader(head[1:], math.MaxUint32)
	if err != nil {
		t.Fatal(err)
	}
	if h.Type != wire.TypeEventBatch || h.RequestID != 5 || int(h.Length) != 2+2*s.Size() {
		t.Fatalf("header %+v", h)
	}
	if binary.BigEndian.Uint16(head[1+wire.HeaderSize:]) != 2 {
		t.Fatalf("section count %x", head[1+wire.HeaderSize:])
	}
}

// recordingWriter remembers the slices it was given, to check that
// WriteEventBatch hands over the sections' own memory.
type recordingWriter struct{ writes [][]byte }

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, p)
	return len(p), nil
}

func TestEventBatchEncodeOnce(t *testing.T) {
	s := section(0, 10, 99, wire.Record{Payload: []byte("shared")}, wire.Record{Payload: []byte("by all")})
	other := section(1, 0, 98, wire.Record{Payload: []byte("x")})

	t.Run("records are not copied", func(t *testing.T) {
		var w recordingWriter
		if err := wire.WriteEventBatch(&w, 1, []*wire.Section{s}); err != nil {
			t.Fatal(err)
		}
		if len(w.writes) != 3 || &w.writes[1][0] != &s.Head[0] || &w.writes[2][0] != &s.Records[0] {
			t.Fatalf("WriteEventBatch did not write the section's own Head and Records (%d writes)", len(w.writes))
		}
	})

	t.Run("the same section bytes in every subscriber's frame", func(t *testing.T) {
		// Subscribers on different request ids and with different neighbours
		// carry byte-identical section encodings, written concurrently.
		batches := [][]*wire.Section{{s}, {other, s}, {s, other}, {s}}
		frames := make([][]byte, len(batches))
		var wg sync.WaitGroup
		for i := range batches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var buf bytes.Buffer
				bw := bufio.NewWriterSize(&buf, 16)
				if err := wire.WriteEventBatch(bw, uint64(100+i), batches[i]); err != nil {
					t.Error(err)
					return
				}
				if err := bw.Flush(); err != nil {
					t.Error(err)
				}
				frames[i] = buf.Bytes()
			}()
		}
		wg.Wait()
		enc := append(s.Head[:], s.Records...)
		for i, frame := range frames {
			if !bytes.Contains(frame, enc) {
				t.Fatalf("frame %d does not carry the section's bytes", i)
			}
			views, err := wire.DecodeEventBatch(splitFrame(t, frame).Body)
			if err != nil || len(views) != len(batches[i]) {
				t.Fatalf("frame %d: %d views, %v", i, len(views), err)
			}
		}
	})
}

type failWriter struct{ after int }

var errWrite = errors.New("write failed")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.after == 0 {
		return 0, errWrite
	}
	w.after--
	return len(p), nil
}

func TestWriteEventBatchError(t *testing.T) {
	s := section(0, 0, 0, wire.Record{})
	for after := 0; after < 5; after++ {
		err := wire.WriteEventBatch(&failWriter{after: after}, 1, []*wire.Section{s, s})
		if !errors.Is(err, errWrite) {
			t.Errorf("failing after %d writes: %v", after, err)
		}
	}
}

// eventBody builds an EventBatch body by hand: a section count and then
// sections given as (shard, base, ts, count, records length, records).
type rawSection struct {
	count  uint32
	length uint32 // records length as written, may lie
	recs   []byte
}

func eventBody(count uint16, secs ...rawSection) []byte {
	b := binary.BigEndian.AppendUint16(nil, count)
	for i, s := range secs {
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = binary.BigEndian.AppendUint64(b, uint64(i)*10)
		b = binary.BigEndian.AppendUint64(b, 1)
		b = binary.BigEndian.AppendUint32(b, s.count)
		b = binary.BigEndian.AppendUint32(b, s.length)
		b = append(b, s.recs...)
	}
	return b
}

// badSection is a malformed EventBatch body and the code it is refused with
// (0: any *wire.Error).
type badSection struct {
	name string
	body []byte
	code wire.Code
}

// oneRecord is a records block holding one record with payload "p".
var oneRecord = wire.AppendRecords(nil, []wire.Record{{Payload: []byte("p")}})

// goodRaw is a well-formed section.
var goodRaw = rawSection{count: 1, length: uint32(len(oneRecord)), recs: oneRecord}

// manyRaw returns n well-formed sections.
func manyRaw(n int) []rawSection {
	many := make([]rawSection, n)
	for i := range many {
		many[i] = goodRaw
	}
	return many
}

// badEventBodies are EventBatch bodies every decoder of sections refuses;
// ReadResult reuses those whose section count it allows.
func badEventBodies() []badSection {
	one, good := oneRecord, goodRaw
	return []badSection{
		{"empty body", nil, wire.CodeMalformedFrame},
		{"one byte", []byte{0}, wire.CodeMalformedFrame},
		{"zero sections", eventBody(0), wire.CodeMalformedFrame},
		{"zero sections with bytes", eventBody(0, good), wire.CodeMalformedFrame},
		{"count over the frame", eventBody(2, good), wire.CodeMalformedFrame},
		{"count far over the frame", eventBody(math.MaxUint16, good), wire.CodeMalformedFrame},
		{"too many sections", eventBody(wire.MaxSectionsPerFrame+1, manyRaw(wire.MaxSectionsPerFrame+1)...), wire.CodeMalformedFrame},
		{"records length lies long", eventBody(1, rawSection{count: 1, length: 100, recs: one}), wire.CodeMalformedFrame},
		{"records length huge", eventBody(1, rawSection{count: 1, length: math.MaxUint32, recs: one}), wire.CodeMalformedFrame},
		{"records length lies short", eventBody(1, rawSection{count: 1, length: 2, recs: one}), wire.CodeMalformedFrame},
		{"count mismatch", eventBody(1, rawSection{count: 2, length: uint32(len(one)), recs: one}), wire.CodeMalformedFrame},
		{"bad records", eventBody(1, rawSection{count: 1, length: 2, recs: []byte{0x05, 'a'}}), wire.CodeMalformedFrame},
		{"second section bad", eventBody(2, good, rawSection{count: 1, length: 1, recs: []byte{0x80}}), wire.CodeMalformedFrame},
		{"section header cut", eventBody(2, good, good)[:2+good.size()+27], wire.CodeMalformedFrame},
		{"trailing bytes", append(eventBody(1, good), 0), wire.CodeMalformedFrame},
		// ValidateRecords' own codes come through for an empty or oversized
		// section; either way the frame is refused with a typed error.
		{"section count zero", eventBody(1, rawSection{count: 0, length: 0}), 0},
		{"section count over the limit", eventBody(1, rawSection{count: wire.MaxRecordsInBatch + 1, length: uint32(len(one)), recs: one}), 0},
	}
}

func (s rawSection) size() int { return wire.SectionHeaderSize + len(s.recs) }

func TestDecodeEventBatchErrors(t *testing.T) {
	for _, tc := range badEventBodies() {
		t.Run(tc.name, func(t *testing.T) {
			views, err := wire.DecodeEventBatch(tc.body)
			if views != nil {
				t.Errorf("views returned with an error: %+v", views)
			}
			if tc.code == 0 {
				wantWireError(t, err)
				return
			}
			wantCode(t, err, tc.code)
		})
	}
	// MaxSectionsPerFrame sections is fine.
	views, err := wire.DecodeEventBatch(eventBody(wire.MaxSectionsPerFrame, manyRaw(wire.MaxSectionsPerFrame)...))
	if err != nil || len(views) != wire.MaxSectionsPerFrame {
		t.Fatalf("%d sections: %d views, %v", wire.MaxSectionsPerFrame, len(views), err)
	}
}
