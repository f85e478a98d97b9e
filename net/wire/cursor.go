package wire

import "encoding/binary"

// decoder reads a frame body. The first failure sticks: later reads return
// zero values, and err reports the first problem.
type decoder struct {
	b   []byte
	off int
	err *Error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = malformed(format, args...)
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b)-d.off < n {
		d.fail("%s: need %d bytes, have %d", what, n, len(d.b)-d.off)
		return nil
	}
	s := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return s
}

func (d *decoder) u8(what string) uint8 {
	if s := d.take(1, what); s != nil {
		return s[0]
	}
	return 0
}

func (d *decoder) u16(what string) uint16 {
	if s := d.take(2, what); s != nil {
		return binary.BigEndian.Uint16(s)
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if s := d.take(4, what); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if s := d.take(8, what); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

// str16 reads a u16-length-prefixed string.
func (d *decoder) str16(what string) string {
	n := d.u16(what)
	return string(d.take(int(n), what))
}

// bytes32 reads a u32-length-prefixed byte string (sharing the body).
func (d *decoder) bytes32(what string) []byte {
	n := d.u32(what)
	if d.err == nil && int64(n) > int64(len(d.b)-d.off) {
		d.fail("%s: length %d exceeds the frame", what, n)
		return nil
	}
	return d.take(int(n), what)
}

// rest returns everything not yet read.
func (d *decoder) rest() []byte {
	if d.err != nil {
		return nil
	}
	s := d.b[d.off:]
	d.off = len(d.b)
	return s
}

// end checks that the whole body was consumed.
func (d *decoder) end(what string) error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%s: %d trailing bytes", what, len(d.b)-d.off)
	}
	if d.err != nil {
		return d.err
	}
	return nil
}

func appendStr16(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBytes32(dst []byte, b []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}
