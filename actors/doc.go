// Package actors holds Herald's broker actors, one kind per file with its
// messages beside it: the catalog (streams and their shard actors), shards
// (the single writer of each shard log), the storage writer (group commit),
// connections, writer lanes and subscriptions.
//
// Each actor keeps its logic in a plain struct where that logic is worth
// testing on its own (shardCore), and its Receive only dispatches messages to
// onX methods. Actors never block in Receive, except the two kinds that own a
// blocking resource: a writer lane (its QUIC stream) and the storage writer
// (the disk sync), each fed through a bound.
//
// Messages are pointers. Requests are named XxxRequest/XxxResponse and
// notifications are in the past tense.
package actors
