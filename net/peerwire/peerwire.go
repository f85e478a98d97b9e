// Package peerwire is the node-to-node protocol of a Herald cluster: what
// one node sends another over their QUIC connection (ALPN "herald-peer/1",
// mutual TLS under the cluster CA). It carries the raft messages of every
// replicated shard the two nodes share, batched: one connection per node
// pair, one frame for whatever was queued. docs/protocol.md ("Peer
// protocol") gives the layouts.
//
// A connection has one bidirectional stream, opened by the node with the
// lower id. Each side writes its frames on its send side:
//
//	dialer → Hello{From, To}; listener → Hello{From, To} (or closes the
//	connection: wrong To, unknown From);
//	then either way: Raft{messages}, or Shard{one shard message}: a
//	replica catching up from a snapshot fetches the shard's log in pages
//	(ShardFetch), and a replica of the shard answers (ShardPage).
//
// Frames are a 8-byte header (body length u32, type u8, three zero bytes)
// and a body. Every integer is big-endian.
package peerwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ALPN is the TLS application protocol of peer connections; a peer
// connection never speaks the client protocol and the reverse.
const ALPN = "herald-peer/1"

// Version is the protocol version a Hello carries (2: Shard frames; 3: the
// Shard frame's removed kind; 4: the group state kinds and the group relays;
// a node refuses a peer of another version, so a cluster runs one version).
const Version = 4

// HeaderSize is a frame header's size.
const HeaderSize = 8

// DefaultMaxFrameBytes bounds a frame body unless configured: raft's
// append messages are bounded well below it.
const DefaultMaxFrameBytes = 16 << 20

// Type is a frame type.
type Type uint8

// Frame types.
const (
	TypeHello Type = 0x01 // first frame each way: who speaks, and to whom
	TypeRaft  Type = 0x02 // raft messages of any number of groups
	TypeShard Type = 0x03 // one fetch or page of a shard's log (snapshot catch-up)
)

// String names t.
func (t Type) String() string {
	switch t {
	case TypeHello:
		return "peer_hello"
	case TypeRaft:
		return "peer_raft"
	case TypeShard:
		return "peer_shard"
	case TypeRelayHello:
		return "peer_relay_hello"
	}
	return fmt.Sprintf("peer_type_0x%02x", uint8(t))
}

// ErrMalformed is every decoding error of this package (wrapped).
var ErrMalformed = errors.New("peerwire: malformed")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// AppendFrame appends a frame of type t and body to dst.
func AppendFrame(dst []byte, t Type, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	dst = append(dst, byte(t), 0, 0, 0)
	return append(dst, body...)
}

// ReadFrame reads one frame, refusing a body over maxBody (or an unknown
// type, or reserved bytes set) before reading it. io.EOF only at a frame
// boundary.
func ReadFrame(r io.Reader, maxBody uint32) (Type, []byte, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n, t := binary.BigEndian.Uint32(h[:4]), Type(h[4])
	if h[5] != 0 || h[6] != 0 || h[7] != 0 {
		return t, nil, malformed("reserved header bytes are not zero")
	}
	if t != TypeHello && t != TypeRaft && t != TypeShard && t != TypeRelayHello {
		return t, nil, malformed("unknown frame type %s", t)
	}
	if n > maxBody {
		return t, nil, malformed("%s frame of %d bytes, at most %d", t, n, maxBody)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return t, nil, err
	}
	return t, body, nil
}

// Hello opens each side of a peer connection.
type Hello struct {
	// Version is the speaker's protocol version.
	Version uint16
	// From is the speaker's node id; To the node id it means to reach (a
	// node refuses a Hello to another id: its address in the speaker's
	// --peers is wrong).
	From, To uint64
	// Advertise is the client address the speaker advertises ("" for
	// none): what other nodes tell clients that ask for the cluster's
	// nodes (a client learns of a node added later this way).
	Advertise string
}

// helloSize is a Hello body's size without an address.
const helloSize = 2 + 8 + 8

// AppendHello appends a Hello frame: version u16 | from u64 | to u64, then,
// when the speaker advertises a client address, its length u16 and the
// address (at most 1024 bytes).
func AppendHello(dst []byte, h Hello) []byte {
	b := make([]byte, helloSize, helloSize+2+len(h.Advertise))
	binary.BigEndian.PutUint16(b[0:], h.Version)
	binary.BigEndian.PutUint64(b[2:], h.From)
	binary.BigEndian.PutUint64(b[10:], h.To)
	if h.Advertise != "" {
		b = binary.BigEndian.AppendUint16(b, uint16(len(h.Advertise)))
		b = append(b, h.Advertise...)
	}
	return AppendFrame(dst, TypeHello, b)
}

// maxAdvertise bounds an advertised address.
const maxAdvertise = 1024

// DecodeHello decodes a Hello body.
func DecodeHello(b []byte) (Hello, error) {
	if len(b) < helloSize {
		return Hello{}, malformed("hello of %d bytes, want at least %d", len(b), helloSize)
	}
	h := Hello{Version: binary.BigEndian.Uint16(b), From: binary.BigEndian.Uint64(b[2:]), To: binary.BigEndian.Uint64(b[10:])}
	if h.From == 0 || h.To == 0 {
		return Hello{}, malformed("hello from node %d to node %d: node ids are not 0", h.From, h.To)
	}
	if rest := b[helloSize:]; len(rest) > 0 {
		if len(rest) < 2 {
			return Hello{}, malformed("hello address cut short")
		}
		n := int(binary.BigEndian.Uint16(rest))
		if n == 0 || n > maxAdvertise || len(rest) != 2+n {
			return Hello{}, malformed("hello address of %d bytes in %d", n, len(rest)-2)
		}
		h.Advertise = string(rest[2:])
	}
	return h, nil
}

// Group names a raft group: a replicated shard of a stream.
type Group struct {
	Stream uint64
	Shard  uint32
}

// Message is one raft message of one group, encoded by raft (opaque here).
type Message struct {
	Group Group
	Data  []byte
}

// messageHead is a message's size before its data: stream, shard, length.
const messageHead = 8 + 4 + 4

// RaftSize is what msgs add to a Raft frame's body.
func RaftSize(msgs []Message) int {
	n := 4
	for _, m := range msgs {
		n += messageHead + len(m.Data)
	}
	return n
}

// AppendRaft appends a Raft frame carrying msgs:
//
//	count u32 | count × (stream u64 | shard u32 | length u32 | data)
func AppendRaft(dst []byte, msgs []Message) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(RaftSize(msgs)))
	dst = append(dst, byte(TypeRaft), 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msgs)))
	for _, m := range msgs {
		dst = binary.BigEndian.AppendUint64(dst, m.Group.Stream)
		dst = binary.BigEndian.AppendUint32(dst, m.Group.Shard)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Data)))
		dst = append(dst, m.Data...)
	}
	return dst
}

// DecodeRaft decodes a Raft body; the messages' Data share b.
func DecodeRaft(b []byte) ([]Message, error) {
	if len(b) < 4 {
		return nil, malformed("raft frame of %d bytes has no count", len(b))
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n)*messageHead > uint64(len(b)) {
		return nil, malformed("raft frame of %d messages in %d bytes", n, len(b))
	}
	out := make([]Message, 0, n)
	for i := range n {
		if len(b) < messageHead {
			return nil, malformed("raft message %d cut short", i)
		}
		m := Message{Group: Group{Stream: binary.BigEndian.Uint64(b), Shard: binary.BigEndian.Uint32(b[8:])}}
		l := binary.BigEndian.Uint32(b[12:])
		b = b[messageHead:]
		if uint64(l) > uint64(len(b)) {
			return nil, malformed("raft message %d of %d bytes, %d left", i, l, len(b))
		}
		m.Data, b = b[:l:l], b[l:]
		out = append(out, m)
	}
	if len(b) != 0 {
		return nil, malformed("%d bytes after the last raft message", len(b))
	}
	return out, nil
}
