// Package wire is Herald's wire protocol v1: the frame codec shared by the
// broker and the Go client. It knows no actors, storage or sockets; it turns
// bytes into typed frames and back, and every decoder returns a *Error with a
// stable code for input it cannot accept, never a panic.
//
// Every frame is a 16-byte header followed by a body:
//
//	u32 body length | u8 type | u8 flags | u16 reserved (0) | u64 request id
//
// All integers are big-endian. docs/protocol.md is the byte-by-byte reference.
package wire
