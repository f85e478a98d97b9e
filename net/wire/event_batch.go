package wire

import (
	"encoding/binary"
	"io"
)

// SectionHeaderSize is the size of a section header in an EventBatch body:
//
//	u32 shard | u64 base offset | i64 timestamp (Unix ns) | u32 count | u32 records length
const SectionHeaderSize = 28

// Section is one committed batch in its delivery encoding. The node builds it
// once, when the batch commits, and every subscriber's EventBatch frame
// carries the same Section: the same header bytes and the same records bytes,
// never re-encoded. A Section is immutable once built and safe to share
// between goroutines.
type Section struct {
	// Head is the encoded section header.
	Head [SectionHeaderSize]byte
	// Records is the batch's records block, exactly as published.
	Records []byte
}

// NewSection builds the delivery encoding of a batch.
func NewSection(shard uint32, base uint64, ts int64, count uint32, records []byte) *Section {
	s := &Section{Records: records}
	binary.BigEndian.PutUint32(s.Head[0:], shard)
	binary.BigEndian.PutUint64(s.Head[4:], base)
	binary.BigEndian.PutUint64(s.Head[12:], uint64(ts))
	binary.BigEndian.PutUint32(s.Head[20:], count)
	binary.BigEndian.PutUint32(s.Head[24:], uint32(len(records)))
	return s
}

// Size is the section's encoded size.
func (s *Section) Size() int { return SectionHeaderSize + len(s.Records) }

// Base returns the offset of the section's first record.
func (s *Section) Base() uint64 { return binary.BigEndian.Uint64(s.Head[4:]) }

// Count returns the section's record count.
func (s *Section) Count() uint32 { return binary.BigEndian.Uint32(s.Head[20:]) }

// End returns the offset after the section's last record.
func (s *Section) End() uint64 { return s.Base() + uint64(s.Count()) }

// MaxSectionsPerFrame bounds the sections in one EventBatch frame.
const MaxSectionsPerFrame = 1 << 12

// EventBatchBodySize is the body size of an EventBatch frame carrying
// sections.
func EventBatchBodySize(sections []*Section) int {
	n := 2
	for _, s := range sections {
		n += s.Size()
	}
	return n
}

// AppendEventBatchHead appends the frame header and section count of an
// EventBatch frame carrying sections; the sections' own bytes follow it on
// the wire (WriteEventBatch does both).
func AppendEventBatchHead(dst []byte, reqID uint64, sections []*Section) []byte {
	dst = AppendHeader(dst, Header{Length: uint32(EventBatchBodySize(sections)), Type: TypeEventBatch, RequestID: reqID})
	return binary.BigEndian.AppendUint16(dst, uint16(len(sections)))
}

// WriteEventBatch writes one EventBatch frame carrying sections to w without
// copying the sections' records: w should be buffered (a bufio.Writer).
func WriteEventBatch(w io.Writer, reqID uint64, sections []*Section) error {
	var head [HeaderSize + 2]byte
	if _, err := w.Write(AppendEventBatchHead(head[:0], reqID, sections)); err != nil {
		return err
	}
	for _, s := range sections {
		if _, err := w.Write(s.Head[:]); err != nil {
			return err
		}
		if _, err := w.Write(s.Records); err != nil {
			return err
		}
	}
	return nil
}

// BatchView is one section of a decoded EventBatch frame; Records shares the
// frame body.
type BatchView struct {
	Shard     uint32
	Base      uint64
	Timestamp int64
	Count     uint32
	Records   []byte
}

// DecodeEventBatch decodes an EventBatch body into its sections. It checks
// the section layout and that each records block holds Count records.
func DecodeEventBatch(body []byte) ([]BatchView, error) {
	d := decoder{b: body}
	n := d.u16("section count")
	if d.err == nil && (n == 0 || n > MaxSectionsPerFrame || int(n)*SectionHeaderSize > len(body)) {
		return nil, malformed("section count %d is zero, over %d, or too large for the frame", n, MaxSectionsPerFrame)
	}
	out, err := d.sections(n)
	if err != nil {
		return nil, err
	}
	if err := d.end("event_batch"); err != nil {
		return nil, err
	}
	return out, nil
}

// sections decodes n sections (the body of an EventBatch or a ReadResult),
// checking that each records block holds its count of records.
func (d *decoder) sections(n uint16) ([]BatchView, error) {
	out := make([]BatchView, 0, n)
	for i := uint16(0); i < n && d.err == nil; i++ {
		v := BatchView{Shard: d.u32("shard"), Base: d.u64("base"), Timestamp: int64(d.u64("timestamp")), Count: d.u32("count")}
		v.Records = d.bytes32("records")
		if d.err != nil {
			break
		}
		if _, err := ValidateRecords(v.Records, v.Count); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
