package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// TestRead: the page holds the records of the returned batches that fall in
// [start, next), in order; batches straddling either edge are cut.
func TestRead(t *testing.T) {
	srv := newTestServer(t)
	reads := make(chan wire.Read, 4)
	srv.onRead = func(sc *serverConn, f wire.Frame, r wire.Read) {
		reads <- r
		if r.Shard == 9 {
			sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: 3}))
			return
		}
		// Batches 3..6, 7..10 and 11..12: the page is [5, 9).
		sections := []*wire.Section{
			wire.NewSection(2, 3, 1e9, 4, wire.AppendRecords(nil, recs(3, 4))),
			wire.NewSection(2, 7, 2e9, 4, wire.AppendRecords(nil, recs(7, 4))),
			wire.NewSection(2, 11, 3e9, 2, wire.AppendRecords(nil, recs(11, 2))),
		}
		sc.writeCtl(wire.AppendReadResult(nil, f.Header.RequestID, 9, 1, 13, sections))
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	page, err := c.Read(ctx, orders, 2, 5, ReadToTail, WithMaxRecords(4), WithMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if r := <-reads; r != (wire.Read{Name: orders, Shard: 2, Start: 5, End: wire.NoEnd, MaxRecords: 4, MaxBytes: 1 << 20}) {
		t.Fatalf("read frame = %+v", r)
	}
	if page.Next != 9 || page.First != 1 || page.Tail != 13 || len(page.Records) != 4 {
		t.Fatalf("page = next %d first %d tail %d, %d records", page.Next, page.First, page.Tail, len(page.Records))
	}
	for i, ev := range page.Records {
		want := uint64(5 + i)
		if ev.Shard != 2 || ev.Offset != want || string(ev.Payload) != fmt.Sprint("p", want) || string(ev.Headers.Get("h")) != "v" {
			t.Fatalf("record %d = %+v, want offset %d", i, ev, want)
		}
	}
	if page.Records[1].Timestamp != time.Unix(0, 1e9) || page.Records[2].Timestamp != time.Unix(0, 2e9) {
		t.Fatalf("timestamps %v %v", page.Records[1].Timestamp, page.Records[2].Timestamp)
	}

	// Node caps by default; a refusal carries its detail.
	_, err = c.Read(ctx, orders, 9, 0, 10)
	if r := <-reads; r.MaxRecords != 0 || r.MaxBytes != 0 || r.End != 10 {
		t.Fatalf("read frame = %+v", r)
	}
	var we *Error
	if !errors.Is(err, ErrOffsetOutOfRange) || !errors.As(err, &we) || we.Detail != 3 {
		t.Fatalf("read below retention: %v", err)
	}
	if _, err := c.Read(ctx, orders, 0, 10, 5); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("end before start: %v", err)
	}
}

func TestPageFromResult(t *testing.T) {
	batch := func(shard uint32, base uint64, n int) wire.BatchView {
		return wire.BatchView{Shard: shard, Base: base, Count: uint32(n), Records: wire.AppendRecords(nil, recs(base, n))}
	}
	offsets := func(p ReadPage) string {
		var out []uint64
		for _, ev := range p.Records {
			out = append(out, ev.Offset)
		}
		return fmt.Sprint(out)
	}
	tests := []struct {
		name  string
		start uint64
		res   wire.ReadResult
		want  string
	}{
		{"inside", 0, wire.ReadResult{Next: 3, Batches: []wire.BatchView{batch(0, 0, 3)}}, "[0 1 2]"},
		{"straddles both edges", 2, wire.ReadResult{Next: 4, Batches: []wire.BatchView{batch(0, 0, 6)}}, "[2 3]"},
		{"batches outside", 5, wire.ReadResult{Next: 7, Batches: []wire.BatchView{batch(0, 0, 5), batch(0, 5, 2), batch(0, 7, 2)}}, "[5 6]"},
		{"overlapping batches", 0, wire.ReadResult{Next: 4, Batches: []wire.BatchView{batch(0, 0, 3), batch(0, 1, 3)}}, "[0 1 2 3]"},
		{"empty", 8, wire.ReadResult{Next: 8}, "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pageFromResult(tc.res, 0, tc.start)
			if err != nil {
				t.Fatal(err)
			}
			if got := offsets(p); got != tc.want {
				t.Fatalf("offsets %s, want %s", got, tc.want)
			}
		})
	}
	_, err := pageFromResult(wire.ReadResult{Next: 1, Batches: []wire.BatchView{batch(3, 0, 1)}}, 0, 0)
	if !errors.Is(err, ErrProtocolViolation) {
		t.Fatalf("batch of another shard: %v", err)
	}
}
