package wire_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// splitFrame reads exactly one frame from frame and fails the test if it does
// not decode or if bytes are left over.
func splitFrame(t testing.TB, frame []byte) wire.Frame {
	t.Helper()
	r := bytes.NewReader(frame)
	f, err := wire.ReadFrame(r, wire.DefaultMaxFrameBytes)
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if r.Len() != 0 {
		t.Fatalf("ReadFrame left %d bytes of a %d-byte frame", r.Len(), len(frame))
	}
	if int(f.Header.Length) != len(f.Body) || len(frame) != wire.HeaderSize+len(f.Body) {
		t.Fatalf("header length %d, body %d, frame %d", f.Header.Length, len(f.Body), len(frame))
	}
	return f
}

// wantCode fails the test unless err is a *wire.Error with code want, checked
// both with errors.As and with errors.Is.
func wantCode(t testing.TB, err error, want wire.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *wire.Error, want %v", err, err, want)
	}
	if we.Code != want {
		t.Fatalf("error code %v (%v), want %v", we.Code, err, want)
	}
	if !errors.Is(err, &wire.Error{Code: want}) {
		t.Fatalf("errors.Is(%v, code %v) is false", err, want)
	}
}

// wantWireError fails the test unless err is a *wire.Error of any code.
func wantWireError(t testing.TB, err error) *wire.Error {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *wire.Error", err, err)
	}
	return we
}

// sameValue is reflect.DeepEqual except that a nil slice equals an empty one:
// decoders return empty, non-nil slices that share the frame body.
func sameValue(a, b any) bool {
	return sameReflect(reflect.ValueOf(a), reflect.ValueOf(b))
}

func sameReflect(a, b reflect.Value) bool {
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !sameReflect(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Array:
		for i := 0; i < a.Len(); i++ {
			if !sameReflect(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameReflect(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !sameReflect(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}

// failReader fails the test if anything reads from it: it stands for a frame
// body that must not be read.
type failReader struct{ t testing.TB }

func (r failReader) Read([]byte) (int, error) {
	r.t.Error("the frame body was read")
	return 0, io.ErrUnexpectedEOF
}

func repeat(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func repeatString(c byte, n int) string { return string(repeat(c, n)) }
