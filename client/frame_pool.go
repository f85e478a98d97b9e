package client

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"
)

// frameBuffers recycles the buffers of publish frames. A merged frame is
// written to its stream at once and held by nothing after the write
// returns (the parts keep their own frames for a resend); a publish's own
// frames are held until it is acknowledged in full. Making new ones was
// most of a publishing client's allocations.
var frameBuffers framePool

// framePool is a pool of frame buffers in power-of-two size classes, from
// 1<<minPooledShift to 1<<maxPooledShift bytes; smaller and larger ones are
// left to the collector.
type framePool struct {
	classes [maxPooledShift - minPooledShift + 1]sync.Pool

	// checked, set by the package's tests before any use, keeps the
	// buffers given back in free lists that drop none, fills each with
	// poolPoison, and makes put panic on a buffer it holds already: one
	// given back twice would go to two frames at once.
	checked bool
	mu      sync.Mutex
	free    [maxPooledShift - minPooledShift + 1][][]byte
	held    map[*byte]bool
}

const (
	minPooledShift = 10 // 1 KiB
	maxPooledShift = 19 // 512 KiB
	// poolPoison fills the buffers a checked pool holds.
	poolPoison = 0xdb
)

// get returns an empty buffer of at least size bytes.
func (f *framePool) get(size int) []byte {
	c := bits.Len(uint(max(size, 1) - 1)) // the least c with 1<<c >= size
	if c < minPooledShift || c > maxPooledShift {
		return make([]byte, 0, size)
	}
	if f.checked {
		return f.getChecked(c)
	}
	if b, ok := f.classes[c-minPooledShift].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<c)
}

// put gives b, from get, back for another get; nothing may use it after.
func (f *framePool) put(b []byte) {
	c := bits.Len(uint(cap(b))) - 1 // the greatest c with 1<<c <= cap(b)
	if c < minPooledShift || c > maxPooledShift || cap(b) != 1<<c {
		return
	}
	if f.checked {
		f.putChecked(c, b)
		return
	}
	f.putClass(c, b)
}

// putClass puts b in class c's pool. It is apart from put so that only a
// buffer the pool takes is boxed for it: taking b's address in put moved
// every put's b to the heap, the frames it turns away included (and so
// would inlining it).
//
//go:noinline
func (f *framePool) putClass(c int, b []byte) {
	b = b[:0]
	f.classes[c-minPooledShift].Put(&b)
}

func (f *framePool) getChecked(c int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	free := f.free[c-minPooledShift]
	if len(free) == 0 {
		return make([]byte, 0, 1<<c)
	}
	b := free[len(free)-1]
	f.free[c-minPooledShift] = free[:len(free)-1]
	delete(f.held, unsafe.SliceData(b))
	for _, v := range b[:cap(b)] {
		if v != poolPoison {
			panic("client: a frame buffer was written to after it was given back")
		}
	}
	return b[:0]
}

func (f *framePool) putChecked(c int, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := unsafe.SliceData(b)
	if f.held[p] {
		panic(fmt.Sprintf("client: a frame buffer of %d bytes was given back twice", cap(b)))
	}
	if f.held == nil {
		f.held = map[*byte]bool{}
	}
	f.held[p] = true
	b = b[:cap(b)]
	for i := range b {
		b[i] = poolPoison
	}
	f.free[c-minPooledShift] = append(f.free[c-minPooledShift], b[:0])
}
