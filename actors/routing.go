package actors

// ShardForKey maps a routing key to a shard: an empty key goes to shard 0,
// any other to hash(key) % shards, where hash is 64-bit FNV-1a. The mapping
// is part of the protocol: clients may compute it too.
func ShardForKey(key []byte, shards uint32) uint32 {
	if len(key) == 0 || shards <= 1 {
		return 0
	}
	return uint32(fnv1a(key) % uint64(shards))
}

func fnv1a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
