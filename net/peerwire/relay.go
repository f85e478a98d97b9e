package peerwire

import (
	"encoding/binary"
)

// RelayALPN is the TLS application protocol of a relay connection: a node
// passing a client's consumer-group traffic on to the node that
// coordinates the group (the leader of the stream's shard 0). It reaches
// the coordinator's cluster listener, under the same peer TLS as a peer
// connection, and after one RelayHello on its first stream it speaks the
// client protocol (ALPN herald/1's frames): the coordinator serves it as a
// client connection acting for the principal the relaying node
// authenticated.
const RelayALPN = "herald-relay/1"

// RelayHello opens a relay connection: who relays (From, to To) and for
// whom. A node that authenticates its peers (a cluster CA) takes the
// principal as the relaying node states it; one that does not (development
// peer TLS) trusts no statement and authenticates Token itself, as it
// would a client's Hello.
type RelayHello struct {
	// Version is the peer protocol version (Version).
	Version uint16
	From    uint64
	To      uint64
	// Principal is who the relayed client acts as.
	Principal RelayPrincipal
	// Token is the client's token ("" without one).
	Token string
}

// RelayPrincipal is a client's principal as the relaying node
// authenticated it (the fields of actors.Principal).
type RelayPrincipal struct {
	Name, Tenant string
	Any          bool
	Perms        uint8
	Namespaces   []string
}

// The relay hello's frame type: only ever the first frame of a relay
// connection's first stream.
const TypeRelayHello Type = 0x04

// Validate refuses a hello its frame cannot carry: a string longer than
// 65535 bytes, or more than 65535 namespaces (AppendRelayHello would cut
// them, changing the principal it states).
func (h RelayHello) Validate() error {
	for _, s := range append([]string{h.Principal.Name, h.Principal.Tenant, h.Token}, h.Principal.Namespaces...) {
		if len(s) > 0xFFFF {
			return malformed("relay hello string of %d bytes", len(s))
		}
	}
	if len(h.Principal.Namespaces) > 0xFFFF {
		return malformed("relay hello of %d namespaces", len(h.Principal.Namespaces))
	}
	return nil
}

// AppendRelayHello appends a RelayHello frame (h must Validate):
//
//	version u16 | from u64 | to u64 | flags u8 (1: any) | perms u8 |
//	name | tenant | token | count u16 | count × namespace
//
// where each string is length u16 | bytes.
func AppendRelayHello(dst []byte, h RelayHello) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, h.Version)
	b = binary.BigEndian.AppendUint64(b, h.From)
	b = binary.BigEndian.AppendUint64(b, h.To)
	var flags byte
	if h.Principal.Any {
		flags = 1
	}
	b = append(b, flags, h.Principal.Perms)
	for _, s := range []string{h.Principal.Name, h.Principal.Tenant, h.Token} {
		b = appendString16(b, s)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Principal.Namespaces)))
	for _, ns := range h.Principal.Namespaces {
		b = appendString16(b, ns)
	}
	return AppendFrame(dst, TypeRelayHello, b)
}

func appendString16(b []byte, s string) []byte {
	if len(s) > 0xFFFF {
		s = s[:0xFFFF]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// DecodeRelayHello decodes a RelayHello body.
func DecodeRelayHello(b []byte) (RelayHello, error) {
	if len(b) < 2+8+8+2 {
		return RelayHello{}, malformed("relay hello of %d bytes", len(b))
	}
	h := RelayHello{Version: binary.BigEndian.Uint16(b), From: binary.BigEndian.Uint64(b[2:]), To: binary.BigEndian.Uint64(b[10:])}
	flags := b[18]
	if flags&^1 != 0 {
		return RelayHello{}, malformed("relay hello flags %#x", flags)
	}
	h.Principal.Any, h.Principal.Perms = flags&1 != 0, b[19]
	rest := b[20:]
	str := func() (string, bool) {
		if len(rest) < 2 {
			return "", false
		}
		n := int(binary.BigEndian.Uint16(rest))
		if len(rest) < 2+n {
			return "", false
		}
		s := string(rest[2 : 2+n])
		rest = rest[2+n:]
		return s, true
	}
	var ok bool
	for _, dst := range []*string{&h.Principal.Name, &h.Principal.Tenant, &h.Token} {
		if *dst, ok = str(); !ok {
			return RelayHello{}, malformed("relay hello cut short")
		}
	}
	if len(rest) < 2 {
		return RelayHello{}, malformed("relay hello without its namespace count")
	}
	n := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if n*2 > len(rest) {
		return RelayHello{}, malformed("relay hello of %d namespaces in %d bytes", n, len(rest))
	}
	for range n {
		ns, ok := str()
		if !ok {
			return RelayHello{}, malformed("relay hello namespace cut short")
		}
		h.Principal.Namespaces = append(h.Principal.Namespaces, ns)
	}
	if len(rest) != 0 {
		return RelayHello{}, malformed("relay hello has %d bytes past its end", len(rest))
	}
	if h.From == 0 || h.To == 0 {
		return RelayHello{}, malformed("relay hello from node %d to node %d: node ids are not 0", h.From, h.To)
	}
	return h, nil
}
