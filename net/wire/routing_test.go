package wire_test

import (
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// Golden values pin the documented hashes: changing them would move keys
// between shards for every existing stream.
func TestShardForGolden(t *testing.T) {
	// FNV-1a of "" is the offset basis; of "a" a known constant.
	if wire.KeyHash(nil) != 14695981039346656037 || wire.KeyHash([]byte("a")) != 0xaf63dc4c8601ec8c {
		t.Fatalf("FNV-1a drifted: %x", wire.KeyHash([]byte("a")))
	}
	for _, tc := range []struct {
		key     string
		shards  uint32
		routing wire.Routing
		want    uint32
	}{
		{"", 8, wire.RoutingHash, 0},
		{"", 8, wire.RoutingJump, 0},
		{"a", 1, wire.RoutingJump, 0},
		{"a", 7, wire.RoutingHash, uint32(0xaf63dc4c8601ec8c % 7)},
	} {
		if got := wire.ShardFor([]byte(tc.key), tc.shards, tc.routing); got != tc.want {
			t.Fatalf("ShardFor(%q, %d, %s) = %d, want %d", tc.key, tc.shards, tc.routing, got, tc.want)
		}
	}
}

// Jump consistent hashing: buckets in range, and growing n to n+1 moves a
// key only to the new bucket.
func TestJumpHashMonotone(t *testing.T) {
	for k := uint64(0); k < 2000; k++ {
		key := wire.KeyHash([]byte{byte(k), byte(k >> 8)})
		prev := wire.JumpHash(key, 1)
		if prev != 0 {
			t.Fatal("one bucket must be bucket 0")
		}
		for n := uint32(2); n <= 32; n++ {
			b := wire.JumpHash(key, n)
			if b >= n {
				t.Fatalf("bucket %d of %d", b, n)
			}
			if b != prev && b != n-1 {
				t.Fatalf("key moved from %d to %d when growing to %d buckets", prev, b, n)
			}
			prev = b
		}
	}
}
