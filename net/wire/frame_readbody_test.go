package wire

import (
	"bytes"
	"io"
	"testing"
)

func TestReadBodyGrowsWithTheData(t *testing.T) {
	for _, n := range []int{0, 1, readChunk, readChunk + 1, 3*readChunk + 7, 1 << 20} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		got, err := readBody(bytes.NewReader(src), n)
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("n=%d err=%v eq=%v", n, err, bytes.Equal(got, src))
		}
		if n > 10 {
			_, err := readBody(bytes.NewReader(src[:n-3]), n)
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("short n=%d: %v", n, err)
			}
		}
	}
}
