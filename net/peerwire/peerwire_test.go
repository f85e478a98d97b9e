package peerwire

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// Frames round-trip: a Hello, a Raft frame of messages of several groups
// (an empty message among them), and an empty Raft frame.
func TestRoundTrip(t *testing.T) {
	msgs := []Message{
		{Group: Group{Stream: 1, Shard: 0}, Data: []byte("vote")},
		{Group: Group{Stream: 1, Shard: 7}, Data: nil},
		{Group: Group{Stream: 1<<63 + 5, Shard: 1<<32 - 1}, Data: bytes.Repeat([]byte{9}, 1000)},
	}
	var buf []byte
	buf = AppendHello(buf, Hello{Version: Version, From: 1, To: 3})
	buf = AppendRaft(buf, msgs)
	buf = AppendRaft(buf, nil)
	r := bytes.NewReader(buf)
	typ, body, err := ReadFrame(r, DefaultMaxFrameBytes)
	if err != nil || typ != TypeHello {
		t.Fatalf("first frame %v, %v", typ, err)
	}
	if h, err := DecodeHello(body); err != nil || h != (Hello{Version: Version, From: 1, To: 3}) {
		t.Fatalf("hello %+v, %v", h, err)
	}
	typ, body, err = ReadFrame(r, DefaultMaxFrameBytes)
	if err != nil || typ != TypeRaft || len(body) != RaftSize(msgs) {
		t.Fatalf("second frame %v (%d bytes, want %d), %v", typ, len(body), RaftSize(msgs), err)
	}
	got, err := DecodeRaft(body)
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("raft %v, %v", got, err)
	}
	for i := range msgs {
		if got[i].Group != msgs[i].Group || !bytes.Equal(got[i].Data, msgs[i].Data) {
			t.Errorf("message %d: %+v, want %+v", i, got[i], msgs[i])
		}
	}
	if _, body, err = ReadFrame(r, DefaultMaxFrameBytes); err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeRaft(body); err != nil || len(got) != 0 {
		t.Fatalf("empty raft frame: %v, %v", got, err)
	}
	if _, _, err := ReadFrame(r, DefaultMaxFrameBytes); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// Bad input is refused with ErrMalformed (or a short read), never a panic
// or a huge allocation.
func TestRefusals(t *testing.T) {
	hello := AppendHello(nil, Hello{Version: Version, From: 1, To: 2})
	frames := map[string][]byte{
		"reserved bytes": func() []byte { b := slices.Clone(hello); b[6] = 1; return b }(),
		"unknown type":   func() []byte { b := slices.Clone(hello); b[4] = 0x7f; return b }(),
		"over the bound": AppendFrame(nil, TypeRaft, make([]byte, 65)),
	}
	for name, b := range frames {
		if _, _, err := ReadFrame(bytes.NewReader(b), 64); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := ReadFrame(bytes.NewReader(hello[:len(hello)-1]), 64); err != io.ErrUnexpectedEOF {
		t.Errorf("cut short: %v", err)
	}
	withAddr := AppendHello(nil, Hello{Version: Version, From: 1, To: 2, Advertise: "h:1"})[HeaderSize:]
	if h, err := DecodeHello(withAddr); err != nil || h.Advertise != "h:1" {
		t.Errorf("hello with an address: %+v, %v", h, err)
	}
	for name, b := range map[string][]byte{
		"short":           {0, 1},
		"node 0":          AppendHello(nil, Hello{Version: Version, From: 0, To: 2})[HeaderSize:],
		"address cut":     withAddr[:len(withAddr)-1],
		"address long":    append(slices.Clone(withAddr), 'x'),
		"empty address":   append(slices.Clone(withAddr[:helloSize]), 0, 0),
		"one byte over":   append(slices.Clone(withAddr[:helloSize]), 0),
		"address too big": append(append(slices.Clone(withAddr[:helloSize]), 0x04, 0x01), bytes.Repeat([]byte("a"), 1025)...),
	} {
		if _, err := DecodeHello(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("hello %s: %v", name, err)
		}
	}
	good := AppendRaft(nil, []Message{{Group: Group{Stream: 1}, Data: []byte("abc")}})[HeaderSize:]
	for name, b := range map[string][]byte{
		"no count":       {0, 0},
		"count too big":  {0xff, 0xff, 0xff, 0xff, 1, 2},
		"data too long":  append(slices.Clone(good[:len(good)-1]), []byte{}...),
		"trailing bytes": append(slices.Clone(good), 0),
	} {
		if _, err := DecodeRaft(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("raft %s: %v", name, err)
		}
	}
}

// FuzzDecode: whatever arrives, decoding returns messages or an error,
// and what decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(AppendRaft(nil, []Message{{Group: Group{Stream: 3, Shard: 1}, Data: []byte("x")}})[HeaderSize:])
	f.Add(AppendHello(nil, Hello{Version: 1, From: 1, To: 2})[HeaderSize:])
	f.Add(AppendHello(nil, Hello{Version: 4, From: 1, To: 2, Advertise: "10.0.0.1:7400"})[HeaderSize:])
	f.Add([]byte{})
	f.Add(AppendRelayHello(nil, RelayHello{Version: Version, From: 2, To: 1, Token: "t",
		Principal: RelayPrincipal{Name: "n", Tenant: "acme", Perms: 5, Namespaces: []string{"shop"}}})[HeaderSize:])
	f.Add(AppendGroupStatePage(nil, GroupStatePage{Group: Group{Stream: 1}, Token: 2, Applied: 3, More: true,
		Entries: []GroupStateEntry{{Key: []byte("Ga"), Value: []byte("v")}}})[HeaderSize:])
	f.Add(AppendGroupStateFetch(nil, GroupStateFetch{Group: Group{Stream: 1}, Token: 2, After: []byte("Ga")})[HeaderSize:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := DecodeRelayHello(b); err == nil {
			if again := AppendRelayHello(nil, h)[HeaderSize:]; !bytes.Equal(again, b) {
				t.Fatalf("relay hello %x decoded and encoded as %x", b, again)
			}
		}
		if msgs, err := DecodeRaft(b); err == nil {
			if again := AppendRaft(nil, msgs)[HeaderSize:]; !bytes.Equal(again, b) {
				t.Fatalf("%x decoded and encoded as %x", b, again)
			}
		}
		if h, err := DecodeHello(b); err == nil {
			if again := AppendHello(nil, h)[HeaderSize:]; !bytes.Equal(again, b) {
				t.Fatalf("hello %x decoded and encoded as %x", b, again)
			}
		}
		if m, err := DecodeShard(b); err == nil && m.GroupStatePage != nil {
			if again := AppendGroupStatePage(nil, *m.GroupStatePage)[HeaderSize:]; !bytes.Equal(again, b) {
				t.Fatalf("group state page %x decoded and encoded as %x", b, again)
			}
		}
		_, _, _ = ReadFrame(bytes.NewReader(b), 1<<16)
	})
}

func TestRelayHelloRoundTrip(t *testing.T) {
	for _, h := range []RelayHello{
		{Version: Version, From: 1, To: 3},
		{Version: Version, From: 2, To: 1, Token: "secret", Principal: RelayPrincipal{Name: "app", Tenant: "acme", Perms: 7, Namespaces: []string{"shop", "ops"}}},
		{Version: Version, From: 9, To: 4, Principal: RelayPrincipal{Any: true, Perms: 15}},
	} {
		frame := AppendRelayHello(nil, h)
		typ, body, err := ReadFrame(bytes.NewReader(frame), 1<<16)
		if err != nil || typ != TypeRelayHello {
			t.Fatalf("read %v: %s %v", h, typ, err)
		}
		got, err := DecodeRelayHello(body)
		if err != nil {
			t.Fatal(err)
		}
		if got.From != h.From || got.To != h.To || got.Token != h.Token || got.Principal.Name != h.Principal.Name ||
			got.Principal.Tenant != h.Principal.Tenant || got.Principal.Any != h.Principal.Any || got.Principal.Perms != h.Principal.Perms ||
			strings.Join(got.Principal.Namespaces, ",") != strings.Join(h.Principal.Namespaces, ",") {
			t.Fatalf("round trip of %+v gave %+v", h, got)
		}
		for cut := range len(body) {
			if _, err := DecodeRelayHello(body[:cut]); err == nil {
				t.Fatalf("%+v cut to %d bytes decoded", h, cut)
			}
		}
	}
	if _, err := DecodeRelayHello(AppendRelayHello(nil, RelayHello{From: 0, To: 1})[HeaderSize:]); err == nil {
		t.Fatal("a relay hello from node 0 decoded")
	}
}
