package wire

// KeyHash is the hash keyed routing uses: 64-bit FNV-1a of the key.
func KeyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// JumpHash is jump consistent hashing (Lamping and Veach, 2014): it maps a
// 64-bit key to a bucket in [0, buckets) so that growing the bucket count
// from n to n+1 moves only about 1/(n+1) of the keys.
func JumpHash(key uint64, buckets uint32) uint32 {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return uint32(b)
}

// ShardFor returns the shard a publish with key goes to on a stream with
// shards shards and the given routing. An empty key goes to shard 0. This is
// part of the protocol: clients compute it to pick a publish stream per
// shard, and the node computes it for publishes sent to AnyShard.
func ShardFor(key []byte, shards uint32, routing Routing) uint32 {
	if len(key) == 0 || shards <= 1 {
		return 0
	}
	h := KeyHash(key)
	if routing == RoutingJump {
		return JumpHash(h, shards)
	}
	return uint32(h % uint64(shards))
}
