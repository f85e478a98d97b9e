package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/heraldmq/herald/net/wire"
)

// knownTypes is every frame type v1 defines, with its name.
var knownTypes = map[wire.Type]string{
	wire.TypeHello:          "hello",
	wire.TypeWelcome:        "welcome",
	wire.TypeError:          "error",
	wire.TypeGoAway:         "goaway",
	wire.TypeOK:             "ok",
	wire.TypeCreateStream:   "create_stream",
	wire.TypeDescribeStream: "describe_stream",
	wire.TypeListStreams:    "list_streams",
	wire.TypeStreamInfo:     "stream_info",
	wire.TypeStreamList:     "stream_list",
	wire.TypeDeleteStream:   "delete_stream",
	wire.TypeSetReplicas:    "set_replicas",
	wire.TypeClusterNodes:   "cluster_nodes",
	wire.TypeNodeList:       "node_list",
	wire.TypeRead:           "read",
	wire.TypeReadResult:     "read_result",
	wire.TypeOffsetsForTime: "offsets_for_time",
	wire.TypeShardOffsets:   "shard_offsets",
	wire.TypePublish:        "publish",
	wire.TypePublishAck:     "publish_ack",
	wire.TypeSubscribe:      "subscribe",
	wire.TypeSubscribed:     "subscribed",
	wire.TypeEventBatch:     "event_batch",

	wire.TypeGroupPoll:        "group_poll",
	wire.TypeGroupRecords:     "group_records",
	wire.TypeGroupAck:         "group_ack",
	wire.TypeGroupNack:        "group_nack",
	wire.TypeGroupDeadLetters: "group_dead_letters",
	wire.TypeGroupDeadList:    "group_dead_list",
	wire.TypeGroupRedrive:     "group_redrive",
	wire.TypeGroupDiscard:     "group_discard",
	wire.TypeGroupDone:        "group_done",
	wire.TypeDescribeGroup:    "describe_group",
	wire.TypeGroupInfo:        "group_info",
	wire.TypeGroupSubscribe:   "group_subscribe",
	wire.TypeGroupAssignment:  "group_assignment",
	wire.TypeGroupStreamAck:   "group_stream_ack",
	wire.TypeListGroups:       "list_groups",
	wire.TypeGroupList:        "group_list",
	wire.TypeDeleteGroup:      "delete_group",
	wire.TypeGroupSeek:        "group_seek",
	wire.TypeGroupAcks:        "group_acks",
	wire.TypeGroupAcksDone:    "group_acks_done",
}

func TestHeaderLayout(t *testing.T) {
	h := wire.Header{Length: 0x01020304, Type: wire.TypePublish, Flags: 0xa5, RequestID: 0x1122334455667788}
	got := wire.AppendHeader([]byte{0xee}, h)
	want, _ := hex.DecodeString("ee" + "01020304" + "20" + "a5" + "0000" + "1122334455667788")
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendHeader = %x, want %x", got, want)
	}
	// v1 defines no flags, so a header with any is refused; without, it
	// decodes to itself.
	if _, err := wire.DecodeHeader(got[1:], 0xffffffff); err == nil {
		t.Fatal("DecodeHeader accepted undefined flags")
	}
	h.Flags = 0
	got = wire.AppendHeader(nil, h)
	back, err := wire.DecodeHeader(got, 0xffffffff)
	if err != nil {
		t.Fatalf("DecodeHeader: %v", err)
	}
	if back != h {
		t.Fatalf("DecodeHeader = %+v, want %+v", back, h)
	}
}

func TestDecodeHeaderErrors(t *testing.T) {
	valid := wire.AppendHeader(nil, wire.Header{Length: 10, Type: wire.TypeHello, RequestID: 1})
	with := func(i int, b byte) []byte {
		c := bytes.Clone(valid)
		c[i] = b
		return c
	}
	tests := []struct {
		name string
		b    []byte
		max  uint32
		code wire.Code
	}{
		{"empty", nil, 100, wire.CodeMalformedFrame},
		{"short", valid[:wire.HeaderSize-1], 100, wire.CodeMalformedFrame},
		{"reserved byte 6", with(6, 1), 100, wire.CodeMalformedFrame},
		{"reserved byte 7", with(7, 0x80), 100, wire.CodeMalformedFrame},
		{"undefined flag 0x01", with(5, 0x01), 100, wire.CodeMalformedFrame},
		{"undefined flag 0x80", with(5, 0x80), 100, wire.CodeMalformedFrame},
		{"unknown type 0x00", with(4, 0x00), 100, wire.CodeUnknownFrameType},
		{"unknown type 0x06", with(4, 0x06), 100, wire.CodeUnknownFrameType},
		{"unknown type 0x1d", with(4, 0x1d), 100, wire.CodeUnknownFrameType},
		{"unknown type 0xff", with(4, 0xff), 100, wire.CodeUnknownFrameType},
		{"over max", valid, 9, wire.CodeFrameTooLarge},
		{"max zero", valid, 0, wire.CodeFrameTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.DecodeHeader(tc.b, tc.max)
			wantCode(t, err, tc.code)
		})
	}
	if _, err := wire.DecodeHeader(valid, 10); err != nil {
		t.Errorf("length == max: %v", err)
	}
}

func TestTypeString(t *testing.T) {
	for i := 0; i < 256; i++ {
		typ := wire.Type(i)
		want, known := knownTypes[typ]
		if !known {
			want = "unknown"
		}
		if got := typ.String(); got != want {
			t.Errorf("Type(0x%02x).String() = %q, want %q", i, got, want)
		}
		// A type is accepted by the header decoder exactly when it is defined.
		h := wire.AppendHeader(nil, wire.Header{Type: typ})
		_, err := wire.DecodeHeader(h, 0)
		if known && err != nil {
			t.Errorf("type 0x%02x: %v", i, err)
		}
		if !known {
			wantCode(t, err, wire.CodeUnknownFrameType)
		}
	}
}

func TestReadFrame(t *testing.T) {
	for _, rf := range []struct {
		name string
		fn   func(io.Reader, uint32) (wire.Frame, error)
	}{{"ReadFrame", wire.ReadFrame}, {"ReadTrustedFrame", wire.ReadTrustedFrame}} {
		t.Run(rf.name, func(t *testing.T) { testReadFrame(t, rf.fn) })
	}
}

// A trusted frame's body is allocated once, whole.
func TestReadTrustedFrameAllocatesTheBodyOnce(t *testing.T) {
	frame := wire.AppendFrame(nil, wire.TypePublish, 0, 0, bytes.Repeat([]byte{1}, 300<<10))
	r := bytes.NewReader(frame)
	allocs := testing.AllocsPerRun(5, func() {
		r.Reset(frame)
		if f, err := wire.ReadTrustedFrame(r, wire.DefaultMaxFrameBytes); err != nil || len(f.Body) != 300<<10 {
			t.Fatalf("%d bytes, %v", len(f.Body), err)
		}
	})
	// The body, and the header's bytes (they escape into the reader);
	// ReadFrame grows the body from 64 KiB, one allocation more.
	if allocs != 2 {
		t.Fatalf("%v allocations per frame, want 2", allocs)
	}
}

func testReadFrame(t *testing.T, readFrame func(io.Reader, uint32) (wire.Frame, error)) {
	f1 := wire.AppendFrame(nil, wire.TypePublishAck, 0, 7, []byte("0123456789abcdef"))
	f2 := wire.AppendFrame(nil, wire.TypeGoAway, 0, 0, nil)
	stream := append(bytes.Clone(f1), f2...)

	t.Run("frames then EOF at boundary", func(t *testing.T) {
		for _, name := range []string{"whole", "one byte"} {
			var r io.Reader = bytes.NewReader(stream)
			if name == "one byte" {
				r = iotest.OneByteReader(r)
			}
			f, err := readFrame(r, 64)
			if err != nil || f.Header.Type != wire.TypePublishAck || f.Header.RequestID != 7 || string(f.Body) != "0123456789abcdef" {
				t.Fatalf("%s: first frame %+v, %v", name, f, err)
			}
			f, err = readFrame(r, 64)
			if err != nil || f.Header.Type != wire.TypeGoAway || f.Header.Flags != 0 || f.Body == nil || len(f.Body) != 0 {
				t.Fatalf("%s: second frame %+v, %v", name, f, err)
			}
			if _, err := readFrame(r, 64); err != io.EOF {
				t.Fatalf("%s: at the boundary got %v, want io.EOF itself", name, err)
			}
		}
	})

	t.Run("body is fresh", func(t *testing.T) {
		buf := bytes.Clone(f1)
		f, err := readFrame(bytes.NewReader(buf), 64)
		if err != nil {
			t.Fatal(err)
		}
		buf[wire.HeaderSize] = 'X'
		if f.Body[0] != '0' {
			t.Fatal("the frame body aliases the reader's buffer")
		}
	})

	t.Run("cut short", func(t *testing.T) {
		for n := 1; n < len(f1); n++ {
			_, err := readFrame(bytes.NewReader(f1[:n]), 64)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut at %d of %d: %v, want io.ErrUnexpectedEOF", n, len(f1), err)
			}
		}
	})

	t.Run("reader error passes through", func(t *testing.T) {
		boom := errors.New("boom")
		r := io.MultiReader(bytes.NewReader(f1[:wire.HeaderSize+2]), iotest.ErrReader(boom))
		if _, err := readFrame(r, 64); !errors.Is(err, boom) {
			t.Fatalf("got %v, want boom", err)
		}
		if _, err := readFrame(iotest.ErrReader(boom), 64); !errors.Is(err, boom) {
			t.Fatalf("header: got %v, want boom", err)
		}
	})

	t.Run("too large refused before the body", func(t *testing.T) {
		hdr := wire.AppendHeader(nil, wire.Header{Length: 1 << 30, Type: wire.TypePublish, RequestID: 9})
		f, err := readFrame(io.MultiReader(bytes.NewReader(hdr), failReader{t}), wire.DefaultMaxFrameBytes)
		wantCode(t, err, wire.CodeFrameTooLarge)
		var we *wire.Error
		if errors.As(err, &we) && we.Detail != wire.DefaultMaxFrameBytes {
			t.Errorf("Detail = %d, want the bound %d", we.Detail, wire.DefaultMaxFrameBytes)
		}
		if f.Header.RequestID != 9 || f.Header.Length != 1<<30 {
			t.Errorf("the refused frame's header is not reported: %+v", f.Header)
		}
		// One byte over the bound is refused too; exactly the bound is read.
		over := wire.AppendHeader(nil, wire.Header{Length: 17, Type: wire.TypePublish})
		_, err = readFrame(io.MultiReader(bytes.NewReader(over), failReader{t}), 16)
		wantCode(t, err, wire.CodeFrameTooLarge)
		if _, err := readFrame(bytes.NewReader(f1), 16); err != nil {
			t.Errorf("body of exactly the bound: %v", err)
		}
	})

	t.Run("unknown type refused before the body", func(t *testing.T) {
		hdr := wire.AppendHeader(nil, wire.Header{Length: 4, Type: 0x7f})
		_, err := readFrame(io.MultiReader(bytes.NewReader(hdr), failReader{t}), 64)
		wantCode(t, err, wire.CodeUnknownFrameType)
	})

	t.Run("reserved bytes", func(t *testing.T) {
		for _, i := range []int{6, 7} {
			bad := bytes.Clone(f1)
			bad[i] = 1
			_, err := readFrame(io.MultiReader(bytes.NewReader(bad[:wire.HeaderSize]), failReader{t}), 64)
			wantCode(t, err, wire.CodeMalformedFrame)
		}
	})
}

func TestAppendFrameMatchesBuilders(t *testing.T) {
	// The one-buffer builders (AppendX) and AppendFrame agree on the header.
	want := wire.AppendPublishAck([]byte("prefix"), 42, wire.PublishAck{Shard: 1, Offset: 2, Count: 3})
	f := splitFrame(t, want[len("prefix"):])
	got := wire.AppendFrame([]byte("prefix"), wire.TypePublishAck, 0, 42, f.Body)
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendFrame = %x, want %x", got, want)
	}
}
