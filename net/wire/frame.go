package wire

import (
	"encoding/binary"
	"io"
	"slices"
)

// Version is the protocol version this package speaks.
const Version uint16 = 1

// ALPN is the TLS application protocol negotiated on every Herald QUIC
// connection.
const ALPN = "herald/1"

// HeaderSize is the size of a frame header.
const HeaderSize = 16

// DefaultMaxFrameBytes is the default bound on a frame body (16 MiB). A peer
// announces its own bound in Hello/Welcome; a frame over it is refused with
// CodeFrameTooLarge before its body is read.
const DefaultMaxFrameBytes = 16 << 20

// Type is a frame type.
type Type uint8

// Frame types. docs/protocol.md gives each body's layout.
const (
	TypeHello          Type = 0x01 // client → node, first frame on the control stream
	TypeWelcome        Type = 0x02 // node → client, answer to Hello
	TypeError          Type = 0x03 // either way: a typed error for a request (or the connection)
	TypeGoAway         Type = 0x04 // node → client: draining, stop sending new requests
	TypeOK             Type = 0x05 // node → client: a request succeeded with nothing to return
	TypeCreateStream   Type = 0x10 // client → node: create a stream
	TypeDescribeStream Type = 0x11 // client → node: describe one stream
	TypeListStreams    Type = 0x12 // client → node: list streams
	TypeStreamInfo     Type = 0x13 // node → client: one stream's config and shard tails
	TypeStreamList     Type = 0x14 // node → client: a list of StreamInfo
	TypeDeleteStream   Type = 0x15 // client → node: delete a stream and its records
	TypeRead           Type = 0x16 // client → node: read one page of a shard
	TypeReadResult     Type = 0x17 // node → client: the page
	TypeOffsetsForTime Type = 0x18 // client → node: the first offset at or after a time, per shard
	TypeShardOffsets   Type = 0x19 // node → client: an offset per shard (offsets_for_time and group_seek answer)
	TypeSetReplicas    Type = 0x1A // client → node: change a cluster stream's replica count
	TypeClusterNodes   Type = 0x1B // client → node: the cluster's nodes and their client addresses
	TypeNodeList       Type = 0x1C // node → client: the answer to ClusterNodes
	TypePublish        Type = 0x20 // client → node: a batch of records for one stream
	TypePublishAck     Type = 0x21 // node → client: the offsets a publish was written at
	TypeSubscribe      Type = 0x30 // client → node: first frame of a subscription stream
	TypeSubscribed     Type = 0x31 // node → client: the subscription is live from an offset
	TypeEventBatch     Type = 0x32 // node → client: delivered records

	TypeGroupPoll        Type = 0x40 // client → node: claim records of one shard for a group
	TypeGroupRecords     Type = 0x41 // node → client: claimed records (poll answer, or a push)
	TypeGroupAck         Type = 0x42 // client → node: finish claimed records
	TypeGroupNack        Type = 0x43 // client → node: hand claimed records back for redelivery
	TypeGroupDeadLetters Type = 0x44 // client → node: list a group's dead letters
	TypeGroupDeadList    Type = 0x45 // node → client: dead letters
	TypeGroupRedrive     Type = 0x46 // client → node: give dead letters back to the group
	TypeGroupDiscard     Type = 0x47 // client → node: drop dead letters
	TypeGroupDone        Type = 0x48 // node → client: how many records an ack/nack/redrive/discard changed
	TypeDescribeGroup    Type = 0x49 // client → node: a group's cursors, claims and members
	TypeGroupInfo        Type = 0x4A // node → client: the answer to DescribeGroup
	TypeGroupSubscribe   Type = 0x4B // client → node: first frame of a group push stream
	TypeGroupAssignment  Type = 0x4C // node → client: a member's shards (join and ack answer)
	TypeGroupStreamAck   Type = 0x4D // client → node: on a push stream, return credit and commit a cursor
	TypeListGroups       Type = 0x4E // client → node: list a stream's groups
	TypeGroupList        Type = 0x4F // node → client: the answer to ListGroups
	TypeDeleteGroup      Type = 0x50 // client → node: delete a group and its state
	TypeGroupSeek        Type = 0x51 // client → node: set a group's committed position
	TypeGroupAcks        Type = 0x52 // client → node: several acks, each settled and answered on its own
	TypeGroupAcksDone    Type = 0x53 // node → client: the outcome of each entry of a GroupAcks
)

// String returns the frame type's name.
func (t Type) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeWelcome:
		return "welcome"
	case TypeError:
		return "error"
	case TypeGoAway:
		return "goaway"
	case TypeOK:
		return "ok"
	case TypeDeleteStream:
		return "delete_stream"
	case TypeSetReplicas:
		return "set_replicas"
	case TypeClusterNodes:
		return "cluster_nodes"
	case TypeNodeList:
		return "node_list"
	case TypeRead:
		return "read"
	case TypeReadResult:
		return "read_result"
	case TypeOffsetsForTime:
		return "offsets_for_time"
	case TypeShardOffsets:
		return "shard_offsets"
	case TypeCreateStream:
		return "create_stream"
	case TypeDescribeStream:
		return "describe_stream"
	case TypeListStreams:
		return "list_streams"
	case TypeStreamInfo:
		return "stream_info"
	case TypeStreamList:
		return "stream_list"
	case TypePublish:
		return "publish"
	case TypePublishAck:
		return "publish_ack"
	case TypeSubscribe:
		return "subscribe"
	case TypeSubscribed:
		return "subscribed"
	case TypeEventBatch:
		return "event_batch"
	case TypeGroupPoll:
		return "group_poll"
	case TypeGroupRecords:
		return "group_records"
	case TypeGroupAck:
		return "group_ack"
	case TypeGroupNack:
		return "group_nack"
	case TypeGroupDeadLetters:
		return "group_dead_letters"
	case TypeGroupDeadList:
		return "group_dead_list"
	case TypeGroupRedrive:
		return "group_redrive"
	case TypeGroupDiscard:
		return "group_discard"
	case TypeGroupDone:
		return "group_done"
	case TypeDescribeGroup:
		return "describe_group"
	case TypeGroupInfo:
		return "group_info"
	case TypeGroupSubscribe:
		return "group_subscribe"
	case TypeGroupAssignment:
		return "group_assignment"
	case TypeGroupStreamAck:
		return "group_stream_ack"
	case TypeListGroups:
		return "list_groups"
	case TypeGroupList:
		return "group_list"
	case TypeDeleteGroup:
		return "delete_group"
	case TypeGroupSeek:
		return "group_seek"
	case TypeGroupAcks:
		return "group_acks"
	case TypeGroupAcksDone:
		return "group_acks_done"
	default:
		return "unknown"
	}
}

func (t Type) known() bool { return t.String() != "unknown" }

// Header is a decoded frame header.
type Header struct {
	// Length is the body length in bytes.
	Length uint32
	// Type is the frame type.
	Type Type
	// Flags are type-specific; undefined bits must be zero, and version 1
	// defines none, so DecodeHeader refuses any set bit.
	Flags uint8
	// RequestID pairs a response with its request; 0 for unsolicited frames.
	RequestID uint64
}

// AppendHeader appends an encoded header to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = binary.BigEndian.AppendUint32(dst, h.Length)
	dst = append(dst, byte(h.Type), h.Flags, 0, 0)
	return binary.BigEndian.AppendUint64(dst, h.RequestID)
}

// DecodeHeader decodes a header from the first HeaderSize bytes of b. It
// checks the reserved bytes, the type and the length bound.
func DecodeHeader(b []byte, maxBody uint32) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, malformed("short header: %d bytes", len(b))
	}
	h := Header{
		Length:    binary.BigEndian.Uint32(b[0:4]),
		Type:      Type(b[4]),
		Flags:     b[5],
		RequestID: binary.BigEndian.Uint64(b[8:16]),
	}
	if b[6] != 0 || b[7] != 0 {
		return h, malformed("reserved header bytes are not zero")
	}
	if !h.Type.known() {
		return h, Errorf(CodeUnknownFrameType, "frame type 0x%02x", uint8(h.Type))
	}
	if h.Flags != 0 {
		// No frame type of this version defines a flag.
		return h, malformed("%s frame has undefined flags 0x%02x", h.Type, h.Flags)
	}
	if h.Length > maxBody {
		return h, &Error{Code: CodeFrameTooLarge, Message: "frame body exceeds the maximum", Detail: uint64(maxBody)}
	}
	return h, nil
}

// Frame is a header and its body.
type Frame struct {
	Header Header
	// Body is owned by the frame; ReadFrame allocates it fresh.
	Body []byte
}

// ReadFrame reads one frame from r, refusing bodies over maxBody before
// reading them. io.EOF is returned only at a clean frame boundary; a frame cut
// short returns io.ErrUnexpectedEOF. The body's buffer grows as its bytes
// arrive (readBody): a peer that announces a large body commits memory
// only as fast as it sends.
func ReadFrame(r io.Reader, maxBody uint32) (Frame, error) {
	return readFrame(r, maxBody, readBody)
}

// ReadTrustedFrame is ReadFrame for a peer trusted to send the bodies it
// announces (a client reading the node it dialed and authenticated): the
// body is allocated whole once its header is read, up to maxBody, rather
// than grown as it arrives, which allocated and copied a quarter more for
// every large delivery.
func ReadTrustedFrame(r io.Reader, maxBody uint32) (Frame, error) {
	return readFrame(r, maxBody, readWholeBody)
}

// readWholeBody reads n bytes into a buffer of n.
func readWholeBody(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

func readFrame(r io.Reader, maxBody uint32, read func(io.Reader, int) ([]byte, error)) (Frame, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Frame{}, err
	}
	h, err := DecodeHeader(hb[:], maxBody)
	if err != nil {
		return Frame{Header: h}, err
	}
	body, err := read(r, int(h.Length))
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{Header: h}, err
	}
	return Frame{Header: h, Body: body}, nil
}

// readChunk is how much of a body ReadFrame allocates before the bytes have
// arrived: a header that announces a large body commits memory only as fast
// as the peer really sends.
const readChunk = 64 << 10

// readGrowth bounds how far a body's buffer runs ahead of the bytes read:
// once full, it grows to readGrowth times what arrived (64 KiB, 256 KiB,
// 1 MiB, ...). A peer that announces a large body and stops commits at most
// that multiple of what it sent, and a body is copied less than a third of
// its size on the way (doubling copied up to all of it, and allocated twice
// its size: a producer-batched 256 KiB publish went through 64, 128 and
// 256 KiB buffers).
const readGrowth = 4

// readBody reads n bytes, growing its buffer as data arrives.
func readBody(r io.Reader, n int) ([]byte, error) {
	if n <= readChunk {
		return readWholeBody(r, n)
	}
	b := make([]byte, 0, readChunk)
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n, readGrowth*len(b))-len(b))
		}
		m, err := io.ReadFull(r, b[len(b):min(cap(b), n)])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF && len(b) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// AppendFrame appends a whole frame with the given type, flags, request id
// and body to dst.
func AppendFrame(dst []byte, t Type, flags uint8, reqID uint64, body []byte) []byte {
	dst = AppendHeader(dst, Header{Length: uint32(len(body)), Type: t, Flags: flags, RequestID: reqID})
	return append(dst, body...)
}

// frameStart appends a header with a zero length and returns where the body
// starts; frameEnd patches the length in. This builds a frame in one buffer.
func frameStart(dst []byte, t Type, flags uint8, reqID uint64) ([]byte, int) {
	dst = AppendHeader(dst, Header{Type: t, Flags: flags, RequestID: reqID})
	return dst, len(dst)
}

func frameEnd(dst []byte, bodyStart int) []byte {
	binary.BigEndian.PutUint32(dst[bodyStart-HeaderSize:], uint32(len(dst)-bodyStart))
	return dst
}
