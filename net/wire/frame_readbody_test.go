package wire

import (
	"bytes"
	"fmt"
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

// BenchmarkReadBody reads bodies of the sizes a node sends and receives
// under load: a lane's 64 KiB event batch, a producer-batched 256 KiB
// publish, a 1 MiB frame.
func BenchmarkReadBody(b *testing.B) {
	for _, n := range []int{64 << 10, 66 << 10, 256 << 10, 1 << 20} {
		src := make([]byte, n)
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			r := bytes.NewReader(src)
			for b.Loop() {
				r.Reset(src)
				if _, err := readBody(r, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
