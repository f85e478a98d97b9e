package peerwire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// Shard frames round-trip, and bad ones are refused with ErrMalformed.
func TestShardRoundTrip(t *testing.T) {
	g := Group{Stream: 1<<63 + 9, Shard: 2}
	f := ShardFetch{Group: g, Token: 77, From: 10, To: 500, MaxBytes: 1 << 20}
	p := ShardPage{Group: g, Token: 77, First: 5, Tail: 600, Batches: []PageBatch{
		{Base: 10, Count: 3, Timestamp: -4, Records: []byte("abc")},
		{Base: 13, Count: 1, Timestamp: 1 << 40, Records: bytes.Repeat([]byte{7}, 300)},
	}}
	var buf []byte
	buf = AppendShardFetch(buf, f)
	buf = AppendShardPage(buf, p)
	buf = AppendShardPage(buf, ShardPage{Group: g, Token: 1, First: 0, Tail: 0})
	q := ShardQuiesce{Group: g, Term: 4, Commit: 1 << 40}
	buf = AppendShardQuiesce(buf, q)
	buf = AppendShardWake(buf, ShardWake{Group: g})
	rm := ShardRemoved{Group: g, Applied: 1<<33 + 5}
	buf = AppendShardRemoved(buf, rm)
	r := bytes.NewReader(buf)
	var got []ShardMessage
	for range 6 {
		typ, body, err := ReadFrame(r, DefaultMaxFrameBytes)
		if err != nil || typ != TypeShard {
			t.Fatalf("frame %v, %v", typ, err)
		}
		m, err := DecodeShard(body)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if got[0].Fetch == nil || *got[0].Fetch != f || got[0].Group() != g {
		t.Fatalf("fetch %+v, want %+v", got[0].Fetch, f)
	}
	if got[1].Page == nil || !reflect.DeepEqual(*got[1].Page, p) || got[1].Group() != g {
		t.Fatalf("page %+v, want %+v", got[1].Page, p)
	}
	if got[2].Page == nil || len(got[2].Page.Batches) != 0 {
		t.Fatalf("empty page %+v", got[2].Page)
	}
	if got[3].Quiesce == nil || *got[3].Quiesce != q || got[3].Group() != g {
		t.Fatalf("quiesce %+v, want %+v", got[3].Quiesce, q)
	}
	if got[4].Wake == nil || got[4].Group() != g {
		t.Fatalf("wake %+v", got[4])
	}
	if got[5].Removed == nil || *got[5].Removed != rm || got[5].Group() != g {
		t.Fatalf("removed %+v, want %+v", got[5].Removed, rm)
	}
	body := func(frame []byte) []byte { return frame[HeaderSize:] }
	bad := map[string][]byte{
		"short":           {1, 2, 3},
		"unknown kind":    func() []byte { b := body(AppendShardFetch(nil, f)); b[12] = 9; return b }(),
		"fetch backwards": body(AppendShardFetch(nil, ShardFetch{Group: g, From: 9, To: 3})),
		"fetch cut":       body(AppendShardFetch(nil, f))[:30],
		"quiesce cut":     body(AppendShardQuiesce(nil, q))[:20],
		"wake long":       append(body(AppendShardWake(nil, ShardWake{Group: g})), 0),
		"removed cut":     body(AppendShardRemoved(nil, rm))[:16],
		"page cut":        func() []byte { b := body(AppendShardPage(nil, p)); return b[:len(b)-1] }(),
		"page extra":      append(body(AppendShardPage(nil, p)), 0),
		"overlap":         body(AppendShardPage(nil, ShardPage{Group: g, Tail: 99, Batches: []PageBatch{{Base: 10, Count: 5}, {Base: 12, Count: 1}}})),
		"empty batch":     body(AppendShardPage(nil, ShardPage{Group: g, Tail: 99, Batches: []PageBatch{{Base: 10}}})),
		"past tail":       body(AppendShardPage(nil, ShardPage{Group: g, Tail: 11, Batches: []PageBatch{{Base: 10, Count: 5}}})),
		"first past tail": body(AppendShardPage(nil, ShardPage{Group: g, First: 12, Tail: 11})),
		"count too large": func() []byte { b := body(AppendShardPage(nil, ShardPage{Group: g})); b[37] = 0xff; return b }(),
	}
	for name, b := range bad {
		if _, err := DecodeShard(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// Group state fetches and pages round-trip; bad ones are refused.
func TestGroupStateRoundTrip(t *testing.T) {
	g := Group{Stream: 7, Shard: 0}
	f := GroupStateFetch{Group: g, Token: 5, After: []byte("G\x00key"), MaxBytes: 1 << 20}
	p := GroupStatePage{Group: g, Token: 5, Applied: 1 << 40, More: true, Entries: []GroupStateEntry{
		{Key: []byte("Ga"), Value: []byte("1")}, {Key: []byte("Gb"), Value: []byte{}}, {Key: []byte("Gc"), Value: bytes.Repeat([]byte{9}, 70000)},
	}}
	for _, frame := range [][]byte{AppendGroupStateFetch(nil, f), AppendGroupStatePage(nil, p),
		AppendGroupStateFetch(nil, GroupStateFetch{Group: g}), AppendGroupStatePage(nil, GroupStatePage{Group: g})} {
		typ, body, err := ReadFrame(bytes.NewReader(frame), DefaultMaxFrameBytes)
		if err != nil || typ != TypeShard {
			t.Fatalf("frame %v, %v", typ, err)
		}
		m, err := DecodeShard(body)
		if err != nil {
			t.Fatal(err)
		}
		if m.Group() != g {
			t.Fatalf("group %+v", m.Group())
		}
		switch {
		case m.GroupStateFetch != nil:
			if again := AppendGroupStateFetch(nil, *m.GroupStateFetch); !bytes.Equal(again, frame) {
				t.Fatalf("fetch %+v did not round-trip", m.GroupStateFetch)
			}
		case m.GroupStatePage != nil:
			if again := AppendGroupStatePage(nil, *m.GroupStatePage); !bytes.Equal(again, frame) {
				t.Fatalf("page %+v did not round-trip", m.GroupStatePage)
			}
		default:
			t.Fatalf("decoded %+v", m)
		}
	}
	body := func(frame []byte) []byte { return frame[HeaderSize:] }
	bad := map[string][]byte{
		"fetch cut":    body(AppendGroupStateFetch(nil, f))[:20],
		"fetch long":   append(body(AppendGroupStateFetch(nil, f)), 0),
		"page cut":     func() []byte { b := body(AppendGroupStatePage(nil, p)); return b[:len(b)-1] }(),
		"page extra":   append(body(AppendGroupStatePage(nil, p)), 0),
		"more flag":    func() []byte { b := body(AppendGroupStatePage(nil, p)); b[shardHead+16] = 2; return b }(),
		"out of order": body(AppendGroupStatePage(nil, GroupStatePage{Group: g, Entries: []GroupStateEntry{{Key: []byte("b")}, {Key: []byte("a")}}})),
		"repeated key": body(AppendGroupStatePage(nil, GroupStatePage{Group: g, Entries: []GroupStateEntry{{Key: []byte("a")}, {Key: []byte("a")}}})),
	}
	for name, b := range bad {
		if _, err := DecodeShard(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}
